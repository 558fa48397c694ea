"""Vocabulary overlap between a source and a target vocabulary (docs/design.md §4.1).

Works on the tables of :func:`embtransfer.vocab.canonical.vocab_table`: tokens are
compared as (bytes, start-of-word flag), never as decoded strings, so partial
UTF-8 pieces match byte for byte or not at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core.atomic import read_parquet_metadata, write_parquet
from embtransfer.vocab.canonical import ROLES

MATCH_MODES: tuple[str, ...] = ("exact", "fuzzy")
HOWS: tuple[str, ...] = ("special", "exact", "fuzzy")

#: Role a target special token may fall back to when the source has no token
#: of its own role (an LLM source has bos/eos but rarely cls/sep).
ROLE_FALLBACK: dict[str, str] = {"cls": "bos", "sep": "eos"}

_MATCHABLE = ("normal", "byte")


def _name(table: pd.DataFrame, default: str) -> str:
    return str(table.attrs.get("name") or table.attrs.get("tokenizer") or default)


def _roles(value: Any) -> list[str]:
    if not isinstance(value, str) or not value:
        return []
    return [r for r in value.split(",") if r]


def _special_pairs(source: pd.DataFrame, target: pd.DataFrame) -> list[tuple[int, int]]:
    """Target special tokens paired with source special tokens by role."""
    src_special = source[source["kind"] == "special"]
    by_role: dict[str, int] = {}
    # lowest source id per role, whatever the row order
    for sid, role in sorted(zip(src_special["id"], src_special["role"], strict=True)):
        for r in _roles(role):
            by_role.setdefault(r, int(sid))
    pairs = []
    tgt_special = target[target["kind"] == "special"]
    for tid, role in zip(tgt_special["id"], tgt_special["role"], strict=True):
        # own roles first (in ROLES order), then the cls->bos / sep->eos fallbacks
        roles = sorted((r for r in _roles(role) if r in ROLES), key=ROLES.index)
        wanted = roles + [ROLE_FALLBACK[r] for r in roles if r in ROLE_FALLBACK]
        for r in wanted:
            if r in by_role:
                pairs.append((int(tid), by_role[r]))
                break
    return pairs


def compute_overlap(
    source: pd.DataFrame,
    target: pd.DataFrame,
    match: str = "fuzzy",
    *,
    source_name: str | None = None,
    target_name: str | None = None,
) -> pd.DataFrame:
    """Shared tokens: one row per target token that gets a source token.

    Returns columns ``target_id``, ``source_id`` (int64) and ``how``
    (``special`` | ``exact`` | ``fuzzy``), sorted by ``target_id``. Each target
    token appears at most once; one source token may serve several targets.

    Non-special tokens (kind ``normal`` or ``byte``, non-empty bytes; special
    tokens never pair with them):

    - ``match="exact"``: same bytes and same start-of-word flag.
    - ``match="fuzzy"`` (SALT default): same bytes, start flag ignored. ``how``
      says ``exact`` when the chosen source token also has the same flag.

    Tie-break when several source tokens qualify, in order: (1) same start flag
    as the target token, (2) same kind (normal with normal, byte with byte:
    SentencePiece ``<0x41>`` and ``A`` have the same bytes, and a target ``A``
    should take the source's ``A`` row, not its rarely-trained byte-fallback
    row), (3) lowest source id. The result does not depend on row order.

    Special tokens pair by role, never by string: the target token's roles in
    the order of :data:`embtransfer.vocab.canonical.ROLES` (bos, eos, pad, unk, mask, sep,
    cls), the first one some source special token holds wins; failing all,
    ``cls`` falls back to the source's ``bos`` and ``sep`` to its ``eos``. A
    target special token with no counterpart (no role, e.g. T5's
    ``<extra_id_0>``, or a role the source lacks) is not shared.

    Raises ``ValueError`` for an unknown ``match`` and when no non-special
    target token is shared (almost always the wrong tokenizer or mode).
    """
    if match not in MATCH_MODES:
        raise ValueError(f"match must be one of {MATCH_MODES}, got {match!r}")
    tgt = _matchable(target)
    chosen, same_start = _match_text(_matchable(source), tgt, match)
    hit = chosen >= 0
    if not hit.any():
        sname = source_name or _name(source, "source")
        tname = target_name or _name(target, "target")
        raise ValueError(
            f"no non-special token of the target vocabulary {tname!r} ({len(target)} tokens) "
            f"is shared with the source vocabulary {sname!r} ({len(source)} tokens) under "
            f"match={match!r}; check that the right tokenizers were given (and their vocab "
            "tables were built from them) and the match mode"
        )
    normal = pd.DataFrame(
        {
            "target_id": tgt["id"].to_numpy(dtype=np.int64)[hit],
            "source_id": chosen[hit],
            "how": np.where(same_start[hit], "exact", "fuzzy").astype(object),
        }
    )
    special = pd.DataFrame(_special_pairs(source, target), columns=["target_id", "source_id"])
    special["how"] = "special"
    out = pd.concat([special, normal], ignore_index=True)
    out = out.astype({"target_id": np.int64, "source_id": np.int64, "how": object})
    return out.sort_values("target_id", kind="stable").reset_index(drop=True)


def _matchable(vocab: pd.DataFrame) -> pd.DataFrame:
    """The tokens that match as text: kind ``normal`` or ``byte``, with bytes."""
    rows = vocab[vocab["kind"].isin(_MATCHABLE)]
    return rows[rows["bytes"].map(len) > 0]


def _match_text(src: pd.DataFrame, tgt: pd.DataFrame, match: str) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``tgt``: the source id it takes (-1: none), and whether that source
    token has the same start flag (the tie-break of :func:`compute_overlap`)."""
    # bytes -> integer codes shared by both sides; then one int64 key per
    # (bytes, start, is_byte) so all lookups are vectorised reindexing.
    codes, _ = pd.factorize(pd.concat([src["bytes"], tgt["bytes"]], ignore_index=True))
    s_code, t_code = codes[: len(src)].astype(np.int64), codes[len(src) :].astype(np.int64)
    s_start = src["start"].to_numpy(dtype=bool).astype(np.int64)
    t_start = tgt["start"].to_numpy(dtype=bool).astype(np.int64)
    s_isbyte = (src["kind"] == "byte").to_numpy().astype(np.int64)
    t_isbyte = (tgt["kind"] == "byte").to_numpy().astype(np.int64)

    s_key = s_code * 4 + s_start * 2 + s_isbyte
    best = pd.Series(src["id"].to_numpy(dtype=np.int64)).groupby(s_key).min()

    # candidate keys in preference order: (same start?, same kind?)
    prefs = [(True, True), (True, False)]
    if match == "fuzzy":
        prefs += [(False, True), (False, False)]
    chosen = np.full(len(tgt), -1, dtype=np.int64)
    same_start = np.zeros(len(tgt), dtype=bool)
    for keep_start, keep_kind in prefs:
        st = t_start if keep_start else 1 - t_start
        kd = t_isbyte if keep_kind else 1 - t_isbyte
        found = best.reindex(t_code * 4 + st * 2 + kd).to_numpy()
        take = (chosen < 0) & ~np.isnan(found)
        chosen[take] = found[take].astype(np.int64)
        same_start[take] = keep_start
    return chosen, same_start


def coverage(
    overlap: pd.DataFrame,
    target_vocab: pd.DataFrame,
    target_token_counts: np.ndarray | None = None,
) -> dict[str, Any]:
    """Counts of the SALT paper's Table 6 for one (source, target) pair.

    ``copied``: target tokens whose embedding is copied from the source (rows of
    ``overlap``); ``initialized``: the other target tokens, left to a transfer
    method; ``coverage_pct`` = 100 * copied / (copied + initialized); ``by_how``
    splits ``copied`` by match type. With ``target_token_counts`` (occurrences
    per target id over a corpus, :func:`count_tokens`) also
    ``corpus_coverage_pct``: the share of token occurrences that are copied
    tokens (None for an empty corpus).
    """
    size = int(len(target_vocab))
    copied = int(overlap["target_id"].nunique())
    initialized = size - copied
    by_how = {h: int((overlap["how"] == h).sum()) for h in HOWS}
    out: dict[str, Any] = {
        "copied": copied,
        "initialized": initialized,
        "target_vocab_size": size,
        "coverage_pct": 100.0 * copied / size if size else 0.0,
        "by_how": by_how,
    }
    if target_token_counts is not None:
        counts = np.asarray(target_token_counts, dtype=np.int64)
        if counts.shape[0] > size:
            raise ValueError(
                f"token counts cover {counts.shape[0]} ids but the target vocabulary has {size}"
            )
        total = int(counts.sum())
        ids = overlap["target_id"].to_numpy(dtype=np.int64)
        shared = int(counts[ids[ids < counts.shape[0]]].sum())
        out["corpus_tokens"] = total
        out["corpus_shared_tokens"] = shared
        out["corpus_coverage_pct"] = 100.0 * shared / total if total else None
    return out


def _lines(path: str | os.PathLike, max_lines: int | None) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if max_lines is not None and i >= max_lines:
                return
            line = line.rstrip("\n")
            if line.strip():
                yield line


def count_tokens(
    tokenizer: Any,
    text_file: str | os.PathLike,
    max_lines: int | None = None,
    batch_size: int = 10_000,
) -> np.ndarray:
    """Occurrences of every token id when encoding ``text_file`` line by line.

    Special tokens the tokenizer would add (bos/eos) are not counted: coverage
    is about the text. Uses the Rust backend's batched encoding (a slow
    tokenizer, PhoBERT's, encodes in Python).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    size = len(tokenizer)
    if backend is not None:
        size = max(size, backend.get_vocab_size(with_added_tokens=True))
    size = max(size, max(tokenizer.get_vocab().values(), default=-1) + 1)
    counts = np.zeros(size, dtype=np.int64)
    batch: list[str] = []

    def encode(lines: list[str]) -> list[list[int]]:
        if backend is not None:
            return [e.ids for e in backend.encode_batch(lines, add_special_tokens=False)]
        return tokenizer(lines, add_special_tokens=False)["input_ids"]

    def flush() -> None:
        if not batch:
            return
        ids = np.fromiter((i for e in encode(batch) for i in e), dtype=np.int64)
        counts[:] += np.bincount(ids, minlength=size)[:size]
        batch.clear()

    for line in _lines(text_file, max_lines):
        batch.append(line)
        if len(batch) >= batch_size:
            flush()
    flush()
    return counts


def write_overlap(
    overlap: pd.DataFrame, path: str | os.PathLike, metadata: dict[str, Any] | None = None
) -> None:
    """Write the overlap pairs as parquet, atomically (``metadata`` as JSON)."""
    write_parquet(Path(path), overlap[["target_id", "source_id", "how"]], metadata=metadata)


def read_overlap(path: str | os.PathLike) -> pd.DataFrame:
    table = pd.read_parquet(path)
    table = table.astype({"target_id": np.int64, "source_id": np.int64, "how": object})
    table.attrs.update(read_parquet_metadata(path))
    return table
