"""The floor a pretrained language model must clear: bits per byte of two count models
over the model's own tokens, fitted on its training text and scored on held-out text.

A network that has learnt the language scores held-out text well below both:

* **add-one unigram**: ``P(w) = (c(w) + 1) / (N + V)`` over the tokenizer's ``V`` ids;
* **interpolated Kneser–Ney bigram** (Chen & Goodman 1998, one discount per level):
  ``P(w|v) = max(c(v,w) - D2, 0) / c(v) + D2 * N1+(v•) / c(v) * Pc(w)``, with the
  continuation unigram ``Pc(w) = max(N1+(•w) - D1, 0) / N1+(••) + D1 * T / N1+(••) / V``
  (``T`` the words with a continuation count) interpolated with the uniform, so every id
  has mass; an unseen context takes ``Pc`` alone. Each level's discount is Ney's
  ``D = n1 / (n1 + 2 n2)`` from its counts of counts, kept within [0.05, 0.95].

Documents, scored tokens and bytes are those of :mod:`embtransfer.evaluation.zeroshot`
(its zero-shot bits per byte): each non-empty line is a document, its tokens
(``add_special_tokens=False``) are followed by the tokenizer's eos (else sep), which the
models learn to predict but which is not scored; a document's first token has the
separator as its context, as in the packed stream the network reads. Bits per byte =
total NLL in nats / ln 2 / the documents' UTF-8 bytes (line breaks excluded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from embtransfer.evaluation.zeroshot import evaluate_with_options, read_documents
from embtransfer.models.loading import load_tokenizer

#: Bounds on a level's discount: each keeps some mass for the next, none gives all away.
DISCOUNT_RANGE = (0.05, 0.95)


def _discount(counts: np.ndarray) -> float:
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    d = n1 / (n1 + 2 * n2) if n1 + n2 else DISCOUNT_RANGE[1]
    return float(min(max(d, DISCOUNT_RANGE[0]), DISCOUNT_RANGE[1]))


def _stream(docs: Sequence[Sequence[int]], sep: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(previous, next) id pairs of the training stream, separators predicted too."""
    prev: list[int] = []
    nxt: list[int] = []
    for ids in docs:
        seq = [*ids, sep] if sep is not None else list(ids)
        ctx = [sep if sep is not None else -1, *seq[:-1]]
        prev.extend(ctx)
        nxt.extend(seq)
    return np.asarray(prev, dtype=np.int64), np.asarray(nxt, dtype=np.int64)


class CountModels:
    """The add-one unigram and interpolated Kneser–Ney bigram of ``docs`` (token ids)."""

    def __init__(self, docs: Sequence[Sequence[int]], vocab_size: int, sep: int | None):
        self.vocab_size, self.sep = int(vocab_size), sep
        prev, nxt = _stream(docs, sep)
        if len(nxt) == 0:
            raise ValueError("no training tokens to count")
        if nxt.max() >= vocab_size or nxt.min() < 0:
            raise ValueError(f"token ids must lie in [0, {vocab_size})")
        V = self.vocab_size
        self.unigram_counts = np.bincount(nxt, minlength=V).astype(np.float64)
        self.n_train = int(len(nxt))
        # Bigram types as one key each; the boundary context -1 (no separator) keys as V.
        prev = np.where(prev < 0, V, prev)
        pairs, pair_counts = np.unique(prev * (V + 1) + nxt, return_counts=True)
        self.pair_keys, self.pair_counts = pairs, pair_counts.astype(np.float64)
        ctx_of_pair = pairs // (V + 1)
        word_of_pair = pairs % (V + 1)
        self.context_counts = np.bincount(prev, minlength=V + 1).astype(np.float64)
        self.context_types = np.bincount(ctx_of_pair, minlength=V + 1).astype(np.float64)
        continuation = np.bincount(word_of_pair, minlength=V).astype(np.float64)[:V]
        self.d2 = _discount(pair_counts)
        self.d1 = _discount(continuation[continuation > 0].astype(np.int64))
        types = float(len(pairs))  # N1+(••)
        seen = float((continuation > 0).sum())
        self.continuation = (
            np.maximum(continuation - self.d1, 0.0) / types + self.d1 * seen / types / V
        )

    def unigram(self, words: np.ndarray) -> np.ndarray:
        """Add-one probabilities of ``words``."""
        return (self.unigram_counts[words] + 1.0) / (self.n_train + self.vocab_size)

    def bigram(self, contexts: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Kneser–Ney probabilities of ``words`` after ``contexts`` (-1: no separator)."""
        V = self.vocab_size
        contexts = np.where(contexts < 0, V, contexts)
        keys = contexts * (V + 1) + words
        at = np.clip(np.searchsorted(self.pair_keys, keys), 0, len(self.pair_keys) - 1)
        pair = np.where(self.pair_keys[at] == keys, self.pair_counts[at], 0.0)
        c = self.context_counts[contexts]
        pc = self.continuation[words]
        seen = c > 0
        safe = np.where(seen, c, 1.0)
        interpolated = (
            np.maximum(pair - self.d2, 0.0) / safe
            + self.d2 * self.context_types[contexts] / safe * pc
        )
        return np.where(seen, interpolated, pc)

    def document_nll(self, docs: Sequence[Sequence[int]]) -> dict[str, list[float]]:
        """Per document, the summed NLL in nats of its tokens under each model (separators,
        predicted at each document's end, are not scored)."""
        out: dict[str, list[float]] = {"unigram": [], "kn_bigram": []}
        start = self.sep if self.sep is not None else -1
        for ids in docs:
            words = np.asarray(ids, dtype=np.int64)
            contexts = np.asarray([start, *ids[:-1]], dtype=np.int64)[: len(words)]
            out["unigram"].append(float(-np.log(self.unigram(words)).sum()))
            out["kn_bigram"].append(float(-np.log(self.bigram(contexts, words)).sum()))
        return out


def _separator(tokenizer: Any) -> int | None:
    for role in ("eos_token_id", "sep_token_id"):
        value = getattr(tokenizer, role, None)
        if value is not None:
            return int(value)
    return None


def floor_bits_per_byte(
    tokenizer: Any, train_docs: Sequence[str], heldout_docs: Sequence[str]
) -> dict[str, Any]:
    """Bits per byte of ``heldout_docs`` under the add-one unigram and the interpolated
    Kneser–Ney bigram of ``tokenizer``'s tokens, both fitted on ``train_docs``; with the
    per-document NLLs and bytes (for paired tests against a network's own)."""
    encode = lambda docs: tokenizer(list(docs), add_special_tokens=False)["input_ids"]  # noqa: E731
    models = CountModels(encode(train_docs), len(tokenizer), _separator(tokenizer))
    nll = models.document_nll(encode(heldout_docs))
    doc_bytes = [len(d.encode("utf-8")) for d in heldout_docs]
    total = sum(doc_bytes)
    return {
        **{
            f"{name}_bits_per_byte": sum(values) / math.log(2) / total
            for name, values in nll.items()
        },
        "discounts": {"unigram_level": models.d1, "bigram_level": models.d2},
        "train_tokens": models.n_train,
        "vocab_size": models.vocab_size,
        "bytes": total,
        "document_bytes": doc_bytes,
        "document_nll_nats": nll,
    }


#: How far below the add-one unigram a source LLM's bits per byte must lie to count as a
#: language model (it must also lie below the Kneser–Ney bigram).
FLOOR_MARGIN = 0.25


def floor_record(
    model_dir: str,
    train_file: str,
    heldout_file: str,
    options: dict[str, Any],
    device: str = "auto",
) -> dict[str, Any]:
    """A causal LM's bits per byte on ``heldout_file`` (its own tokenizer, as the zero-shot
    evaluation scores it) beside the two count models of its tokens fitted on
    ``train_file``, and whether it clears them: at least :data:`FLOOR_MARGIN` below the
    unigram and below the bigram. ``options``: the zero-shot settings (max_length,
    batch_size, max_lines)."""
    tokenizer = load_tokenizer(model_dir)
    model = evaluate_with_options(model_dir, heldout_file, options, device, tokenizer)
    heldout = read_documents(heldout_file, options.get("max_lines"))
    floor = floor_bits_per_byte(tokenizer, read_documents(train_file), heldout)
    bpb = model["bits_per_byte"]
    return {
        "model_bits_per_byte": bpb,
        "unigram_bits_per_byte": floor["unigram_bits_per_byte"],
        "kn_bigram_bits_per_byte": floor["kn_bigram_bits_per_byte"],
        "below_unigram": 1.0 - bpb / floor["unigram_bits_per_byte"],
        "below_kn_bigram": 1.0 - bpb / floor["kn_bigram_bits_per_byte"],
        "clears_floor": bool(
            bpb <= (1.0 - FLOOR_MARGIN) * floor["unigram_bits_per_byte"]
            and bpb < floor["kn_bigram_bits_per_byte"]
        ),
        "documents": len(heldout),
        "bytes": model["bytes"],
        "train_tokens": floor["train_tokens"],
        "discounts": floor["discounts"],
        "model": str(model_dir),
        "train_file": str(train_file),
        "heldout_file": str(heldout_file),
        "document_bytes": model["document_bytes"],
        "document_nll_nats": {"model": model["document_nll_nats"], **floor["document_nll_nats"]},
    }
