"""Mean baselines (docs/design.md §4.4): ``mean`` and ``subword_mean``.

``mean``          shared tokens copy their source row (``copied``); every other
                  row is the mean source row (``mean``) over the source's text
                  tokens (special and padding rows left out, see
                  ``TransferInputs.statistic_ids``).
``subword_mean``  shared tokens copy; every other token's text is tokenised by
                  the source tokenizer and the row is the plain mean of the
                  resulting tokens' source rows (``subword_mean``).

Token text for ``subword_mean``: the vocabulary table's real ``bytes`` decoded
as UTF-8 after dropping incomplete UTF-8 sequences at either edge (a byte-level
piece holding half a character), with a leading space when the token's
``start`` flag is set, which is how the source tokenizer sees a word start.
Special source tokens produced by the tokenizer (and ids outside the source
matrix) are dropped. Tokens whose text is empty or tokenises to nothing usable
(special tokens, lone bytes) are drawn from N(mean, std) of the source rows and
labelled ``random``; ``stats["no_subwords"]`` counts them.

A held-out source id (``TransferInputs.hidden``) is never a piece: a text whose encoding
uses one is split in two halves by characters and each half encoded again, down to single
characters, as though the source lacked that token; a character whose only piece is held
out is dropped (:func:`encode_avoiding`).

Known limits of the leading-space rule: WordPiece sources split on whitespace,
so a continuation piece is tokenised as a word start; SentencePiece sources
whose normaliser prepends ``▁`` itself (Llama style) see ``▁▁text``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.models.hf import encode_texts
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_mean,
    source_normal,
    sparse_combine,
)
from embtransfer.vocab.canonical import token_text


def token_texts(vocab: Any, ids: np.ndarray, word_start_space: bool = True) -> list[str]:
    """Decoded text of the given vocabulary rows (see the module docstring)."""
    raw = vocab["bytes"].to_numpy()[ids]
    start = vocab["start"].to_numpy(bool)[ids]
    texts = [token_text(bytes(r) if r is not None else b"") for r in raw]
    if word_start_space:
        texts = [" " + t if s and t else t for t, s in zip(texts, start, strict=True)]
    return texts


def encode_avoiding(tokenizer: Any, texts: list[str], hidden: np.ndarray) -> list[list[int]]:
    """Each text's source token ids, none of them in ``hidden``: a text whose encoding holds
    a hidden id is encoded again as its two halves (by characters), recursively; a single
    character encoded as hidden ids only is dropped. Without hidden ids, ``encode_texts``."""
    encoded = encode_texts(tokenizer, texts)
    if len(hidden) == 0:
        return encoded
    banned = set(np.asarray(hidden).tolist())
    for i, ids in enumerate(encoded):
        if banned.isdisjoint(ids):
            continue
        text = texts[i]
        if len(text) <= 1:
            encoded[i] = [t for t in ids if t not in banned]
            continue
        middle = len(text) // 2
        left, right = encode_avoiding(tokenizer, [text[:middle], text[middle:]], hidden)
        encoded[i] = left + right
    return encoded


@register("mean")
def mean(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    rows[todo] = source_mean(inputs, side).astype(np.float32)
    how[todo] = "mean"
    return SideResult(rows, how, {"counts": count_labels(how)})


@register("subword_mean")
def subword_mean(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    if inputs.source_tokenizer is None:
        raise ValueError("subword_mean needs the source tokenizer (inputs.source_tokenizer)")
    matrix = inputs.source_matrix(side)
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    texts = token_texts(inputs.target_vocab, todo)
    encoded = encode_avoiding(inputs.source_tokenizer, texts, inputs.hidden)

    usable = np.ones(matrix.shape[0], bool)
    kinds = inputs.source_vocab.set_index("id")["kind"]
    special = kinds.index[kinds.to_numpy() == "special"].to_numpy(np.int64)
    usable[special[special < matrix.shape[0]]] = False
    lengths = np.zeros(todo.size, np.int64)
    kept: list[np.ndarray] = []
    for i, ids in enumerate(encoded):
        ids = np.asarray(ids, np.int64)
        ids = ids[(ids >= 0) & (ids < matrix.shape[0])]
        ids = ids[usable[ids]]
        lengths[i] = ids.size
        kept.append(ids)

    have = lengths > 0
    columns = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    offsets = np.zeros(have.sum() + 1, np.int64)
    np.cumsum(lengths[have], out=offsets[1:])
    weights = np.repeat(1.0 / lengths[have], lengths[have]).astype(np.float32)
    rows[todo[have]] = sparse_combine(offsets, columns, weights, matrix)
    how[todo[have]] = "subword_mean"
    rows[todo[~have]] = source_normal(inputs, side, inputs.rng("subword_mean", side), (~have).sum())
    how[todo[~have]] = "random"
    stats = {
        "counts": count_labels(how),
        "no_subwords": int((~have).sum()),
        "subwords": {
            "mean": float(lengths[have].mean()) if have.any() else None,
            "max": int(lengths.max()) if lengths.size else None,
        },
    }
    return SideResult(rows, how, stats)
