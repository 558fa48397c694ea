"""Bilingual static vectors in one space (WECHSEL, OFA; docs/design.md §4.4).

Follows WECHSEL's reference implementation (github.com/CPJKU/wechsel,
``wechsel/__init__.py``, ``WECHSEL._compute_align_matrix_from_dictionary`` and
``WECHSEL.apply``):

* Direction: the **source** space is mapped onto the **target** space.
  ``W = orthogonal_procrustes(X_source, Y_target)`` minimises ``‖X W − Y‖_F``;
  source vectors become ``x W``, target vectors stay as they are.
* Dictionary lookup: every pair is tried with the case variants (as given,
  lower, title) of both words; a variant counts only when it is an
  in-vocabulary word of its fastText model (``get_word_id != -1``), not a
  vector built from n-grams. Every combination found is one correspondence.
  By default a variant equal to another (``haus`` is its own lower case) is
  used once; ``duplicate_variants=True`` counts it again, as the reference does
  (config ``aligned.duplicate_variants``).
* No row normalisation before Procrustes in the reference (only the token
  vectors are unit-normalised afterwards, for cosine similarity). ``normalize``
  offers it, off by default.
* Token vectors (config ``aligned.token_strings``): ``text`` (default) looks up
  the token's UTF-8 text, stripped (:func:`embtransfer.fasttext.vectors.token_vectors`
  ``mode="word"``): special tokens and pieces of a character have no vector.
  ``decode`` is the reference's ``tokenizer.decode(i).strip()`` for every id:
  special tokens (``<|endoftext|>``) and partial-UTF-8 pieces (decoded as
  U+FFFD) get n-gram vectors and can be neighbours. Either way zero vectors are
  "not found" and fall back to random rows.

:func:`topk_cosine` / :func:`softmax_neighbors` are the chunked neighbour search
both methods share and :func:`weighted_rows` their weighted sum of rows
(:func:`embtransfer.transfer.methods.common.check_aligned` checks their input). With
``aligned.share_search`` the search runs once, in a job of its own
(:func:`search_every_target`, :func:`write_search`), and each method's job reads it back onto
its vectors (:func:`read_search`) instead of searching again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from embtransfer.core.atomic import atomic_path
from embtransfer.core.topk import topk_lowest_index
from embtransfer.core.workspace import Workspace
from embtransfer.fasttext.vectors import MIN_NORM, token_vectors


@dataclass
class _TopK:
    """Top-k source candidates of the target rows searched so far (``done``)."""

    k: int
    idx: np.ndarray  # (V_t, k) int64, positions among the candidates
    sims: np.ndarray  # (V_t, k) float32
    done: np.ndarray  # (V_t,) bool


@dataclass
class AlignedVectors:
    """Static vectors of source and target tokens in one (aligned) space: WECHSEL, OFA."""

    source: np.ndarray  # (V_s, d)
    source_missing: np.ndarray  # (V_s,) bool
    target: np.ndarray  # (V_t, d)
    target_missing: np.ndarray  # (V_t,) bool
    # top-k rows already searched, by source-candidate limit: WECHSEL and OFA, and the input
    # and output sides of an untied source, search the same space (see softmax_neighbors)
    _searched: dict[int, _TopK] = field(default_factory=dict, repr=False, compare=False)


# --------------------------------------------------------------------------- Procrustes


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def procrustes(X: np.ndarray, Y: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Orthogonal ``W`` (d x d) minimising ``‖X W − Y‖_F``.

    ``X`` holds source-language and ``Y`` target-language vectors of the same
    dictionary pairs, row for row. Closed form: ``XᵀY = U S Vᵀ``, ``W = U Vᵀ``
    (as ``scipy.linalg.orthogonal_procrustes``). ``normalize`` scales every row
    to unit length first (not done by WECHSEL's reference).
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or X.shape != Y.shape:
        raise ValueError(f"X and Y must be 2-d of the same shape, got {X.shape} and {Y.shape}")
    if X.shape[0] == 0:
        raise ValueError("no pairs to fit an orthogonal map on")
    if normalize:
        X, Y = _unit_rows(X), _unit_rows(Y)
    u, _, vt = np.linalg.svd(X.T @ Y)
    return u @ vt


# --------------------------------------------------------------------------- neighbours


def topk_cosine(
    queries: np.ndarray,
    keys: np.ndarray,
    k: int,
    chunk_rows: int = 2048,
    chunk_cols: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` keys of highest cosine similarity to each query, best first.

    Returns ``(indices int64 (n, k'), similarities float32 (n, k'))`` with
    ``k' = min(k, len(keys))``. The similarity matrix is computed in blocks of
    ``chunk_rows x chunk_cols`` (float32), keeping a running top-k, so a
    50k x 256k matrix never exists. Rows of zero norm have similarity 0 to all.
    Every block is written into one reused buffer (a
    :class:`~embtransfer.core.workspace.Workspace`): with a fresh 256 MB block per product
    the kernel mapped and zeroed pages all the time (WECHSEL at real shapes: 109 s -> 73 s,
    benchmarks/README.md). Equal rows are searched once, queries and keys alike: token
    vectors repeat wherever two tokens share a word (``▁Haus`` and ``Haus``; at Gemma 3's
    shapes a sixth of the rows on both sides), and a key row shared by several tokens
    stands for all of them, ties by the lower index as everywhere (:func:`_expand_ties`).
    """
    if k < 1 or chunk_rows < 1 or chunk_cols < 1:
        raise ValueError("k, chunk_rows and chunk_cols must be >= 1")
    n, m = len(queries), len(keys)
    kk = min(int(k), m)
    out_i = np.zeros((n, kk), np.int64)
    out_s = np.zeros((n, kk), np.float32)
    if n == 0 or kk == 0:
        return out_i, out_s
    queries, query_of = distinct_rows(np.asarray(queries))
    keys, key_of = distinct_rows(np.asarray(keys))
    q_all = torch.from_numpy(np.ascontiguousarray(_unit_rows(queries).astype(np.float32)))
    k_all = torch.from_numpy(np.ascontiguousarray(_unit_rows(keys).astype(np.float32)))
    found_i = np.zeros((len(queries), min(kk, len(keys))), np.int64)
    found_s = np.zeros(found_i.shape, np.float32)
    work = Workspace()
    with torch.inference_mode():
        for r0 in range(0, len(queries), chunk_rows):
            q = q_all[r0 : r0 + chunk_rows]
            best_s, best_i = _running_topk(q, k_all, found_i.shape[1], chunk_cols, work)
            found_s[r0 : r0 + len(q)] = best_s.numpy()
            found_i[r0 : r0 + len(q)] = best_i.numpy()
    if len(keys) < m:
        found_i, found_s = _expand_ties(found_i, found_s, key_of, kk)
    out_i[:], out_s[:] = found_i[query_of], found_s[query_of]
    return out_i, out_s


def distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the 2-D ``x`` in the order they first occur, and for each row
    of ``x`` the index of its distinct row (rows are equal when their bytes are)."""
    x = np.ascontiguousarray(x)
    if x.shape[0] < 2 or x.shape[1] == 0:
        return x, np.arange(x.shape[0])
    as_bytes = x.view(np.dtype((np.void, x.shape[1] * x.itemsize))).ravel()
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    order = np.argsort(first)  # distinct rows by first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return x[first[order]], rank[inverse.ravel()]


#: Candidate keys :func:`_expand_ties` sorts at a time (queries x rows found x keys a row).
_EXPAND_BUDGET = 1 << 22


def _expand_ties(
    found_i: np.ndarray, found_s: np.ndarray, key_of: np.ndarray, kk: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``kk`` best keys from the best distinct key rows ``found_i`` (distinct rows in
    order of first occurrence, so ties among them are by their lowest key): each distinct
    row stands for its keys (``key_of``), equal in similarity, taken best first and by
    ascending key among equal similarities. The ``kk`` best distinct rows hold the ``kk``
    best keys: each holds at least one, and a key of any lower row has ``kk`` keys before
    it. Queries go in chunks of at most :data:`_EXPAND_BUDGET` candidate keys."""
    members = np.argsort(key_of, kind="stable")  # keys by distinct row, ascending within
    counts = np.bincount(key_of, minlength=int(key_of.max()) + 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.arange(min(kk, int(counts.max())))  # up to kk keys of each distinct row
    out_i = np.zeros((len(found_i), kk), np.int64)
    out_s = np.zeros((len(found_i), kk), np.float32)
    step = max(1, _EXPAND_BUDGET // (found_i.shape[1] * slot.size))
    for r0 in range(0, len(found_i), step):
        rows_i, rows_s = found_i[r0 : r0 + step], found_s[r0 : r0 + step]
        taken = slot < counts[rows_i][..., None]  # (queries, rows found, slots)
        ids = np.where(taken, members[np.minimum(starts[rows_i][..., None] + slot,
                                                 members.size - 1)], np.iinfo(np.int64).max)
        sims = np.where(taken, rows_s[..., None], -np.inf).reshape(len(rows_i), -1)
        ids = ids.reshape(len(rows_i), -1)
        by_id = np.argsort(ids, axis=1, kind="stable")
        ids, sims = np.take_along_axis(ids, by_id, 1), np.take_along_axis(sims, by_id, 1)
        by_sim = np.argsort(-sims, axis=1, kind="stable")[:, :kk]
        out_i[r0 : r0 + step] = np.take_along_axis(ids, by_sim, 1)
        out_s[r0 : r0 + step] = np.take_along_axis(sims, by_sim, 1)
    return out_i, out_s


def _running_topk(
    q: torch.Tensor, keys: torch.Tensor, kk: int, chunk_cols: int, work: Workspace
) -> tuple[torch.Tensor, torch.Tensor]:
    """(similarities, indices) of the ``kk`` best keys of each row of ``q``, over blocks of
    ``chunk_cols`` keys."""
    best_s: torch.Tensor | None = None
    best_i: torch.Tensor | None = None
    for c0 in range(0, len(keys), chunk_cols):
        block = keys[c0 : c0 + chunk_cols]
        sims = work.matrix("sims", torch.float32, len(q), len(block))
        torch.matmul(q, block.T, out=sims)
        if best_s is None or best_i is None or best_s.shape[1] < kk:
            rows = None  # every row: the running lists are not full yet
        else:
            # Only rows with a similarity above their k-th best so far can change:
            # a row maximum is a tenth of a top-k's cost, and after the first
            # blocks about half the rows have none (benchmarks/README.md, bench-real).
            rows = torch.nonzero(sims.amax(dim=1) > best_s[:, -1]).squeeze(1)
            if rows.numel() == 0:
                continue
            sims = sims[rows]
        s, i = topk_lowest_index(sims, min(kk, sims.shape[1]))  # ties: the lower key
        i = i + c0
        if best_s is not None and best_i is not None:
            old_s = best_s if rows is None else best_s[rows]
            old_i = best_i if rows is None else best_i[rows]
            both = torch.cat([old_s, s], 1)
            # the running list's keys precede the block's: position order is key order
            s, j = topk_lowest_index(both, min(kk, both.shape[1]))
            i = torch.gather(torch.cat([old_i, i], 1), 1, j)
        if rows is None:
            best_s, best_i = s, i
        else:
            best_s[rows], best_i[rows] = s, i
    assert best_s is not None and best_i is not None
    return best_s, best_i


def softmax(x: np.ndarray, temperature: float, axis: int = -1) -> np.ndarray:
    """``softmax(x / temperature)`` (max subtracted: same values, no overflow)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = np.asarray(x, dtype=np.float64) / float(temperature)
    z = np.exp(z - z.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def softmax_neighbors(
    aligned: AlignedVectors,
    target_ids: np.ndarray,
    k: int,
    temperature: float,
    n_source: int | None = None,
    chunk_rows: int = 2048,
    chunk_cols: int = 4096,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """WECHSEL / OFA neighbours of ``target_ids`` among all source tokens with a vector.

    Candidates are the source ids ``< n_source`` (default: all source rows of
    ``aligned``) that are not missing. Returns ``(source_ids (n, k'),
    similarities (n, k'), weights (n, k'))``, best first, weights =
    softmax(similarity / temperature) over the top k. Every target id must
    have a vector. Rows searched by an earlier call on the same ``aligned`` (and
    candidates) are reused, not searched again.
    """
    target_ids = np.asarray(target_ids, dtype=np.int64)
    if aligned.target_missing[target_ids].any():
        raise ValueError("softmax_neighbors got target tokens without a vector")
    limit = len(aligned.source) if n_source is None else min(int(n_source), len(aligned.source))
    cand = np.nonzero(~aligned.source_missing[:limit])[0]
    if cand.size == 0 and target_ids.size:
        raise ValueError("no source token has an aligned vector")
    kk = min(int(k), cand.size)
    # The search (V_t x V_s x d) is most of WECHSEL's and OFA's time: a row searched once
    # is kept on ``aligned`` and reused by every later call with the same candidates.
    found = aligned._searched.get(limit)
    if found is None or found.k < kk:
        n = len(aligned.target)
        found = _TopK(
            kk, np.zeros((n, kk), np.int64), np.zeros((n, kk), np.float32), np.zeros(n, bool)
        )
        aligned._searched[limit] = found
    todo = np.unique(target_ids[~found.done[target_ids]])
    if todo.size:
        found.idx[todo], found.sims[todo] = topk_cosine(
            aligned.target[todo], aligned.source[cand], found.k, chunk_rows, chunk_cols
        )
        found.done[todo] = True
    idx, sims = found.idx[target_ids, :kk], found.sims[target_ids, :kk]
    weights = softmax(sims, temperature, axis=1) if idx.size else np.zeros_like(sims, np.float64)
    return cand[idx], sims, weights


# --------------------------------------------------------------------------- method helpers


def weighted_rows(
    matrix: np.ndarray, source_ids: np.ndarray, weights: np.ndarray, chunk_rows: int
) -> np.ndarray:
    """``Σ_j weights[i, j] · matrix[source_ids[i, j]]`` per row, gathered in chunks."""
    out = np.zeros((len(source_ids), matrix.shape[1]), np.float32)
    for s in range(0, len(source_ids), chunk_rows):
        w = weights[s : s + chunk_rows].astype(np.float32)
        out[s : s + chunk_rows] = np.einsum("nk,nkh->nh", w, matrix[source_ids[s : s + chunk_rows]])
    return out


# --------------------------------------------------------------------------- alignment


def _variants(word: str, duplicates: bool = False) -> list[str]:
    # as WECHSEL: the word, lower case, title case; equal variants once unless `duplicates`
    variants = [word, word.lower(), word.title()]
    return variants if duplicates else list(dict.fromkeys(variants))


def _lookup(model: Any, word: str, vocab_only: bool, cache: dict[str, np.ndarray | None]) -> bool:
    """Whether ``word`` has a usable vector; the vector (or None) lands in ``cache``."""
    if word not in cache:
        vec: np.ndarray | None = None
        if word and (not vocab_only or model.get_word_id(word) != -1):
            v = np.asarray(model.get_word_vector(word), dtype=np.float32)
            if np.isfinite(v).all() and float(np.linalg.norm(v)) >= MIN_NORM:
                vec = v
        cache[word] = vec
    return cache[word] is not None


def align_from_dictionary(
    source_ft: Any,
    target_ft: Any,
    pairs: Iterable[tuple[str, str]],
    normalize: bool = False,
    in_vocab_only: bool = True,
    duplicate_variants: bool = False,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Fit the orthogonal map source -> target on a bilingual dictionary.

    ``pairs`` are (source word, target word). A pair is used when some case
    variant of each word has a vector (``in_vocab_only``: is a word of its
    model, as WECHSEL); all variant combinations found are correspondences.
    Other pairs are skipped and counted. ``duplicate_variants`` counts a case
    variant equal to another once more (WECHSEL 0.0.4 does).

    Stats: ``pairs``, ``pairs_used``, ``pairs_skipped``, ``correspondences``,
    ``precision_at_1`` (train precision: for each distinct source word of the
    used pairs, its mapped vector's cosine-nearest word among the distinct
    target words of the used pairs is one of its translations),
    ``p1_candidates`` (so chance is 1 / p1_candidates), ``dim``, ``normalize``,
    ``in_vocab_only``, ``direction``.
    """
    d_s, d_t = int(source_ft.get_dimension()), int(target_ft.get_dimension())
    if d_s != d_t:
        # WECHSEL reduces the larger model with fasttext.util.reduce_model; we refuse instead
        raise ValueError(f"fastText dimensions differ: source {d_s}, target {d_t}")
    found = _Correspondences.of(source_ft, target_ft, pairs, in_vocab_only, duplicate_variants)
    if not found.xs:
        raise ValueError(f"none of the {found.n_pairs} dictionary pairs has vectors in both models")
    W = procrustes(np.stack(found.xs), np.stack(found.ys), normalize=normalize)
    precision, n_queries, n_candidates = _train_precision(W, found)
    stats = {
        "direction": "source_to_target",
        "dim": d_s,
        "normalize": bool(normalize),
        "in_vocab_only": bool(in_vocab_only),
        "duplicate_variants": bool(duplicate_variants),
        "pairs": found.n_pairs,
        "pairs_used": found.used,
        "pairs_skipped": found.n_pairs - found.used,
        "correspondences": len(found.xs),
        "precision_at_1": precision,
        "p1_queries": n_queries,
        "p1_candidates": n_candidates,
    }
    return W.astype(np.float32), stats


@dataclass
class _Correspondences:
    """A dictionary's word pairs found in both fastText models, as vector pairs."""

    xs: list[np.ndarray] = field(default_factory=list)  # source vectors
    ys: list[np.ndarray] = field(default_factory=list)  # target vectors, row for row
    gold: dict[str, set[str]] = field(default_factory=dict)  # first source variant -> targets
    source_vectors: dict[str, np.ndarray | None] = field(default_factory=dict)
    target_vectors: dict[str, np.ndarray | None] = field(default_factory=dict)
    n_pairs: int = 0
    used: int = 0

    @classmethod
    def of(
        cls,
        source_ft: Any,
        target_ft: Any,
        pairs: Iterable[tuple[str, str]],
        vocab_only: bool,
        duplicate_variants: bool,
    ) -> _Correspondences:
        found = cls()
        s_cache, t_cache = found.source_vectors, found.target_vectors
        for src_word, tgt_word in pairs:
            found.n_pairs += 1
            found_s = [
                w
                for w in _variants(src_word, duplicate_variants)
                if _lookup(source_ft, w, vocab_only, s_cache)
            ]
            found_t = [
                w
                for w in _variants(tgt_word, duplicate_variants)
                if _lookup(target_ft, w, vocab_only, t_cache)
            ]
            if not found_s or not found_t:
                continue
            found.used += 1
            for ws in found_s:
                for wt in found_t:
                    found.xs.append(s_cache[ws])  # type: ignore[arg-type]
                    found.ys.append(t_cache[wt])  # type: ignore[arg-type]
            found.gold.setdefault(found_s[0], set()).update(found_t)
        return found


def _train_precision(W: np.ndarray, found: _Correspondences) -> tuple[float, int, int]:
    """(precision@1, queries, candidates): how often a used pair's source word, mapped by
    ``W``, has one of its translations as the cosine-nearest of the dictionary's target
    words."""
    cand_words = sorted({w for ts in found.gold.values() for w in ts})
    cand_index = {w: i for i, w in enumerate(cand_words)}
    cand = np.stack([found.target_vectors[w] for w in cand_words])  # type: ignore[misc]
    src_words = list(found.gold)
    src = np.stack([found.source_vectors[w] for w in src_words])  # type: ignore[misc]
    nearest, _ = topk_cosine(src.astype(np.float64) @ W, cand, 1)
    hits = sum(
        int(nearest[i, 0]) in {cand_index[w] for w in found.gold[s]}
        for i, s in enumerate(src_words)
    )
    return hits / len(src_words), len(src_words), len(cand_words)


TOKEN_STRINGS = ("text", "decode")


def decoded_vectors(model: Any, tokenizer: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """fastText vectors of ``tokenizer.decode(i).strip()`` for ids ``0..n-1`` (WECHSEL 0.0.4).

    Returns ``(vectors float32 [n, dim], missing bool [n])``; missing = a zero vector.
    """
    vectors = np.zeros((n, int(model.get_dimension())), np.float32)
    for i in range(n):
        vectors[i] = model.get_word_vector(tokenizer.decode(i).strip())
    if not np.isfinite(vectors).all():
        raise ValueError("fastText returned non-finite vectors")
    return vectors, ~vectors.any(axis=1)


def token_vectors_aligned(
    source_ft: Any,
    target_ft: Any,
    W: np.ndarray,
    source_vocab: pd.DataFrame,
    target_vocab: pd.DataFrame,
    token_strings: str = "text",
    tokenizers: tuple[Any, Any] | None = None,
) -> AlignedVectors:
    """fastText vectors of both vocabularies, the source side mapped by ``W``.

    ``token_strings="text"``: word-mode vectors (:mod:`embtransfer.fasttext.vectors`);
    ``"decode"``: :func:`decoded_vectors` with ``tokenizers`` = (source, target), as
    WECHSEL 0.0.4. Missing tokens keep zero rows.
    """
    if token_strings == "text":
        src, src_missing = token_vectors(source_ft, source_vocab, mode="word")
        tgt, tgt_missing = token_vectors(target_ft, target_vocab, mode="word")
    elif token_strings == "decode":
        if tokenizers is None:
            raise ValueError("token_strings='decode' needs the source and target tokenizers")
        n_s, n_t = (int(v["id"].max()) + 1 for v in (source_vocab, target_vocab))
        src, src_missing = decoded_vectors(source_ft, tokenizers[0], n_s)
        tgt, tgt_missing = decoded_vectors(target_ft, tokenizers[1], n_t)
    else:
        raise ValueError(f"token_strings must be one of {TOKEN_STRINGS}, got {token_strings!r}")
    W = np.asarray(W, dtype=np.float32)
    if W.shape != (src.shape[1], tgt.shape[1]):
        raise ValueError(f"W has shape {W.shape}, expected {(src.shape[1], tgt.shape[1])}")
    return AlignedVectors(
        source=(src @ W).astype(np.float32),
        source_missing=src_missing,
        target=tgt,
        target_missing=tgt_missing,
    )


# --------------------------------------------------------------------------- files

_KEYS: Sequence[str] = ("source", "source_missing", "target", "target_missing")


def write_aligned(
    path: str | os.PathLike, aligned: AlignedVectors, W: np.ndarray, stats: dict[str, Any]
) -> None:
    """Write vectors, masks and ``W`` as one safetensors file (stats in its metadata)."""

    arrays = {
        "source": np.ascontiguousarray(aligned.source, dtype=np.float32),
        "source_missing": np.ascontiguousarray(aligned.source_missing, dtype=bool),
        "target": np.ascontiguousarray(aligned.target, dtype=np.float32),
        "target_missing": np.ascontiguousarray(aligned.target_missing, dtype=bool),
        "W": np.ascontiguousarray(W, dtype=np.float32),
    }
    for name in ("source", "target"):
        if arrays[f"{name}_missing"].shape != (arrays[name].shape[0],):
            raise ValueError(f"{name}: vectors and missing mask differ in length")
    for name, array in arrays.items():
        if array.dtype != bool and not np.isfinite(array).all():
            raise ValueError(f"refusing to write non-finite values in {name!r}")
    with atomic_path(path) as tmp:
        save_file(arrays, str(tmp), metadata={"stats": json.dumps(stats, sort_keys=True)})


def read_aligned(path: str | os.PathLike) -> tuple[AlignedVectors, np.ndarray]:
    """The vectors and masks of :func:`write_aligned`'s file, and ``W``."""

    arrays = load_file(str(path))
    missing = [k for k in (*_KEYS, "W") if k not in arrays]
    if missing:
        raise ValueError(f"{path} is not an aligned-vectors file: lacks {missing}")
    aligned = AlignedVectors(**{k: arrays[k] for k in _KEYS})
    return aligned, arrays["W"]


def read_aligned_stats(path: str | os.PathLike) -> dict[str, Any]:
    """The statistics :func:`write_aligned` kept in an aligned-vectors file's metadata (with a
    world dictionary, ``dictionary_split``: the concepts and pairs the map was fitted on)."""
    with safe_open(str(path), framework="numpy") as fh:
        metadata = fh.metadata() or {}
    if "stats" not in metadata:
        raise ValueError(f"{path} is not an aligned-vectors file: no statistics in its metadata")
    return json.loads(metadata["stats"])


# --------------------------------------------------------------------------- shared search


def search_every_target(
    aligned: AlignedVectors, k: int, chunk_rows: int = 2048, chunk_cols: int = 4096
) -> int:
    """Search the ``k`` nearest source tokens of every target token with a vector, among all
    source tokens with one (the candidates of a source whose rows cover its vocabulary); the
    rows stay on ``aligned`` for :func:`write_search`. Returns how many rows were searched."""
    ids = np.nonzero(~aligned.target_missing)[0]
    softmax_neighbors(aligned, ids, k, 1.0, chunk_rows=chunk_rows, chunk_cols=chunk_cols)
    return int(ids.size)


def write_search(path: str | os.PathLike, aligned: AlignedVectors) -> None:
    """Write the rows :func:`search_every_target` searched on ``aligned`` (one safetensors file)."""
    limit = len(aligned.source)
    found = aligned._searched[limit]
    arrays = {"idx": found.idx, "sims": found.sims, "done": found.done}
    with atomic_path(path) as tmp:
        save_file(arrays, str(tmp), metadata={"limit": str(limit), "k": str(found.k)})


def read_search(path: str | os.PathLike, aligned: AlignedVectors) -> None:
    """Put :func:`write_search`'s rows on ``aligned``: :func:`softmax_neighbors` then reuses
    them (a method whose candidates differ, e.g. a source with fewer rows, searches anew)."""
    with safe_open(str(path), "np") as f:
        meta = f.metadata() or {}
        arrays = {name: f.get_tensor(name) for name in ("idx", "sims", "done")}
    if "limit" not in meta or arrays["done"].shape != (len(aligned.target),):
        raise ValueError(
            f"{path} is not the search of these aligned vectors ({len(aligned.target)} target rows)"
        )
    aligned._searched[int(meta["limit"])] = _TopK(int(meta["k"]), **arrays)
