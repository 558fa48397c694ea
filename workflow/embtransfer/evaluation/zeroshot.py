"""Zero-shot measures of a causal LM on held-out text (the zero-shot record).

:func:`evaluate_text` gives held-out loss, perplexity and bits per byte;
:func:`fertility` gives tokens per whitespace word. Definitions (fixed, so that
numbers are comparable across tokenizers and runs):

* Documents are the non-empty lines of the file (a line holding only
  whitespace is skipped), without their line break.
* Packing: each document's tokens (``add_special_tokens=False``) are followed by
  a separator (the tokenizer's eos, else its sep; none if it has neither) and
  the stream is cut into pieces of ``max_length - 1`` tokens. Every packed
  sequence starts with one context token (bos, else cls, else eos, else sep),
  so every stream token is predicted exactly once and no document token is lost
  at a sequence boundary. One context token per *sequence*, not per document.
* Scored tokens are the document tokens only: the context token is never
  predicted, and separator predictions are not counted (tokenizers differ in
  how they mark a line end; the bytes they would stand for are not counted
  either).
* ``loss`` = mean negative log-likelihood per scored token, in nats;
  ``perplexity`` = exp(loss) (null when it overflows a float, loss > 700 nats);
  ``bits_per_byte`` = total NLL / ln 2 / ``bytes``,
  where ``bytes`` is the UTF-8 length of the scored documents (line breaks
  excluded). Lossy tokenizers (BERT/T5 normalisation, ``[UNK]``) score text
  they cannot reproduce; ``unk_tokens`` reports how often that happened.
* Per document, in document order: ``document_nll_nats`` (the summed NLL of its
  scored tokens, whatever sequence each fell in), ``document_tokens`` and
  ``document_bytes``; their sums are ``nll_nats``, ``tokens`` and ``bytes`` (the NLL's
  up to float rounding), so any aggregate over documents can be recomputed from them
  (the report's standard errors and paired tests: ``embtransfer.report.setting_tables``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from embtransfer.core.atomic import write_json
from embtransfer.core.devices import inference_dtype, resolve_device
from embtransfer.models.hf import position_limit
from embtransfer.models.loading import load_tokenizer


def read_documents(text_file: str | os.PathLike, max_lines: int | None = None) -> list[str]:
    """The non-empty lines of ``text_file``, without line breaks (the first ``max_lines``)."""
    docs: list[str] = []
    with open(text_file, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            docs.append(line)
            if max_lines is not None and len(docs) >= max_lines:
                break
    return docs


def _role(tokenizer: Any, *roles: str) -> int | None:
    for role in roles:
        value = getattr(tokenizer, f"{role}_token_id", None)
        if value is not None:
            return int(value)
    return None


@dataclass
class Packed:
    """Packed evaluation sequences and which positions are scored."""

    sequences: list[list[int]]
    scored: list[list[bool]]  # per position: is this token's prediction counted?
    #: per position: the index of the document whose token it is, -1 for context/separator
    owners: list[list[int]]
    context_id: int
    separator_id: int | None
    document_tokens: list[int]
    document_bytes: list[int]

    @property
    def documents(self) -> int:
        return len(self.document_bytes)

    @property
    def bytes(self) -> int:
        return sum(self.document_bytes)

    @property
    def tokens(self) -> int:
        return sum(sum(s) for s in self.scored)


def pack_documents(tokenizer: Any, docs: list[str], max_length: int) -> Packed:
    """Pack ``docs`` as described in the module docstring."""
    if max_length < 2:
        raise ValueError("max_length must be at least 2 (a context token and one prediction)")
    context = _role(tokenizer, "bos", "cls", "eos", "sep")
    if context is None:
        raise ValueError("the tokenizer has no bos/cls/eos/sep token to start sequences with")
    sep = _role(tokenizer, "eos", "sep")
    stream: list[int] = []
    owner: list[int] = []
    encoded = tokenizer(docs, add_special_tokens=False)["input_ids"] if docs else []
    for index, ids in enumerate(encoded):
        stream.extend(ids)
        owner.extend([index] * len(ids))
        if sep is not None:
            stream.append(sep)
            owner.append(-1)
    step = max_length - 1
    sequences, scored, owners = [], [], []
    for start in range(0, len(stream), step):
        sequences.append([context] + stream[start : start + step])
        owners.append([-1] + owner[start : start + step])
        scored.append([o >= 0 for o in owners[-1]])
    return Packed(sequences, scored, owners, context, sep,
                  document_tokens=[len(ids) for ids in encoded],
                  document_bytes=[len(d.encode("utf-8")) for d in docs])


def evaluate_text(
    model_dir: str | os.PathLike,
    text_file: str | os.PathLike,
    *,
    max_length: int = 1024,
    batch_size: int = 8,
    device: str = "auto",
    max_lines: int | None = None,
    trust_remote_code: bool = False,
    tokenizer: Any | None = None,
) -> dict[str, Any]:
    """Held-out causal-LM loss, perplexity and bits per byte of ``model_dir`` on ``text_file``.

    ``max_length`` is capped at the model's position limit. The model runs in its
    checkpoint dtype on an accelerator and in float32 on the CPU
    (:func:`embtransfer.core.devices.inference_dtype`); log-probabilities are taken in
    float32. ``tokenizer``: the checkpoint's own, when the caller has loaded it already.
    """
    if tokenizer is None:
        tokenizer = load_tokenizer(model_dir, trust_remote_code=trust_remote_code)
    dev = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=inference_dtype(dev), trust_remote_code=trust_remote_code
    ).to(dev)
    model.eval()
    # The text config's limit alone, never a multimodal wrapper's own fields.
    limit = position_limit(model.config, wrapper=False)
    if limit is not None:
        max_length = min(max_length, limit)

    docs = read_documents(text_file, max_lines)
    if not docs:
        raise ValueError(f"{text_file}: no non-empty lines to evaluate")
    packed = pack_documents(tokenizer, docs, max_length)
    total_nll, document_nll = _total_nll(model, packed, batch_size, dev)
    n_tokens = packed.tokens
    n_unk = _scored_count(packed, tokenizer.unk_token_id)
    loss = total_nll / n_tokens if n_tokens else float("nan")
    return {
        "loss": loss,
        # exp overflows past ~709 nats: such a model's perplexity is reported as
        # null (the loss and bits per byte still say how bad it is), never as inf.
        "perplexity": math.exp(loss) if n_tokens and loss < 700 else None,
        "bits_per_byte": total_nll / math.log(2) / packed.bytes,
        "nll_nats": total_nll,
        "tokens": n_tokens,
        "bytes": packed.bytes,
        "tokens_per_byte": n_tokens / packed.bytes,
        "documents": packed.documents,
        "sequences": len(packed.sequences),
        "max_length": max_length,
        "context_token_id": packed.context_id,
        "separator_token_id": packed.separator_id,
        "unk_tokens": n_unk,
        "device": dev,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "model": str(model_dir),
        "text_file": str(text_file),
        "document_nll_nats": document_nll,
        "document_tokens": packed.document_tokens,
        "document_bytes": packed.document_bytes,
    }


def _total_nll(model: Any, packed: Packed, batch_size: int, dev: str
               ) -> tuple[float, list[float]]:
    """Summed negative log-likelihood (nats) of the scored tokens, in all and per document,
    ``batch_size`` sequences at a time, log-probabilities in float32."""
    # Any in-vocabulary id fills the padding; padded positions are masked and unscored.
    filler = packed.separator_id if packed.separator_id is not None else packed.context_id
    total_nll = 0.0
    per_document = np.zeros(packed.documents, dtype=np.float64)
    with torch.inference_mode():
        for start in range(0, len(packed.sequences), batch_size):
            seqs = packed.sequences[start : start + batch_size]
            owners = packed.owners[start : start + batch_size]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), width), filler, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            labels = torch.full((len(seqs), width), -100, dtype=torch.long)
            for i, (seq, owner) in enumerate(zip(seqs, owners, strict=True)):
                ids[i, : len(seq)] = torch.tensor(seq)
                mask[i, : len(seq)] = 1
                keep = torch.tensor(owner) >= 0
                labels[i, : len(seq)] = torch.where(keep, torch.tensor(seq), -100)
            # Right padding: causal attention keeps real positions blind to the pads.
            logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
            for i, owner in enumerate(owners):  # one row at a time: a float32 copy of V logits
                row_labels = labels[i, 1:].to(dev)
                # cross-entropy is the NLL of the log-softmax: taken once, for the summed
                # loss (exactly as before the per-document figures existed, so the record's
                # nll_nats and bits_per_byte keep their values) and the per-token losses
                log_probs = torch.log_softmax(logits[i, :-1].float(), dim=-1)
                total_nll += float(torch.nn.functional.nll_loss(
                    log_probs, row_labels, ignore_index=-100, reduction="sum"))
                token_nll = torch.nn.functional.nll_loss(
                    log_probs, row_labels, ignore_index=-100, reduction="none")
                targets = np.asarray(owner[1:])
                scored = targets >= 0
                np.add.at(per_document, targets[scored],
                          token_nll.double().cpu().numpy()[: len(targets)][scored])
    return total_nll, per_document.tolist()


def _scored_count(packed: Packed, token_id: int | None) -> int:
    """How many scored positions hold ``token_id`` (0 for None)."""
    if token_id is None:
        return 0
    return sum(
        tok == token_id and mark
        for seq, marks in zip(packed.sequences, packed.scored, strict=True)
        for tok, mark in zip(seq, marks, strict=True)
    )


def token_counts(tokenizer: Any, texts: Sequence[str]) -> dict[str, Any]:
    """Tokens (``add_special_tokens=False``), whitespace words and UTF-8 bytes of ``texts``;
    fertility = tokens per word, tokens per byte (NaN where there is nothing to divide by)."""
    texts = list(texts)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    tokens = sum(len(ids) for ids in encoded)
    words = sum(len(t.split()) for t in texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {
        "fertility": tokens / words if words else float("nan"),
        "tokens": tokens,
        "words": words,
        "bytes": n_bytes,
        "tokens_per_byte": tokens / n_bytes if n_bytes else float("nan"),
    }


def fertility(
    tokenizer: Any, text_file: str | os.PathLike, max_lines: int | None = None
) -> dict[str, Any]:
    """:func:`token_counts` of the lines of ``text_file`` (as :func:`read_documents`).

    ``tokenizer`` is a tokenizer or its directory.
    """
    if isinstance(tokenizer, str | os.PathLike | Path):
        tokenizer = load_tokenizer(tokenizer)
    docs = read_documents(text_file, max_lines)
    return {**token_counts(tokenizer, docs), "lines": len(docs)}


def evaluate_with_options(
    model_dir: str | os.PathLike,
    text_file: str | os.PathLike,
    options: dict[str, Any],
    device: str,
    tokenizer: Any,
) -> dict[str, Any]:
    """:func:`evaluate_text` with the config's ``zeroshot`` options (max_length, batch_size,
    max_lines): how every checkpoint and the quality floor's source are scored alike."""
    return evaluate_text(
        model_dir,
        text_file,
        max_length=options["max_length"],
        batch_size=options["batch_size"],
        device=device,
        max_lines=options.get("max_lines"),
        tokenizer=tokenizer,
    )


def zeroshot_record(
    model_dir: str | os.PathLike,
    text_file: str | os.PathLike,
    options: dict[str, Any],
    device: str,
    context: dict[str, Any],
) -> dict[str, Any]:
    """The zero-shot JSON of one checkpoint (``results/zeroshot/...``,
    ``results/lapt_zeroshot/...``): :func:`evaluate_text` with the config's ``zeroshot``
    options, the fertility of its tokenizer on the same text, and ``context`` (the run's
    wildcards; ``method`` is ``source_model`` for the untouched source LLM)."""
    tokenizer = load_tokenizer(model_dir)  # once, for the scores and the fertility
    record = evaluate_with_options(model_dir, text_file, options, device, tokenizer)
    record["fertility"] = fertility(tokenizer, text_file)
    record.update(context)
    record.setdefault("method", "source_model")
    return record


def write_zeroshot_record(
    out: str | os.PathLike,
    model_dir: str | os.PathLike,
    text_file: str | os.PathLike,
    options: dict[str, Any],
    device: str,
    context: dict[str, Any],
) -> dict[str, Any]:
    """:func:`zeroshot_record`, written atomically to ``out``; returns the record."""
    record = zeroshot_record(model_dir, text_file, options, device, context)
    write_json(out, record)
    return record
