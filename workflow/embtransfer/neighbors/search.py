"""Sparsemax neighbour sets of non-shared target tokens (SALT steps 1-3, FOCUS).

For every non-shared target token with a fastText vector: cosine similarity to
the vector of every shared target token, exact sparsemax over that row
(:mod:`embtransfer.neighbors.sparsemax`); the support is the token's neighbour set, of
dynamic size ``k``. Rows are processed ``chunk_rows`` at a time (one float32
matmul per chunk), so the full similarity matrix never exists.

Candidates are the shared pairs sorted by target id, so the result does not
depend on the order the overlap table lists them in. Shared tokens whose vector
is missing are left out of the candidate set (and counted).

Degenerate rows. Near-constant fastText vectors give near-constant similarity
rows and sparsemax supports of up to every shared token. Such rows fail the
top-``prefilter_k`` test and are recomputed exactly on the full row (in blocks
bounded by ``fallback_budget_bytes``); the exact support size is always
recorded (``support``). Storing them is the problem: 20k rows x 30k neighbours
is 6e8 list entries (about 14 GB over the four list columns). Policy: rows are
stored in full up to ``max_neighbors`` entries (default 1024, far above any
informative sparsemax neighbourhood); a row with a larger support stores its
``max_neighbors`` most similar neighbours with their sparsemax weights
renormalised to sum to 1 and is flagged ``truncated``. Its exact weights are
nearly uniform anyway (the row carries almost no neighbour information). Pass
``max_neighbors=None`` to store every support exactly (unbounded output).
Rows whose support exceeds ``prefilter_k`` are counted as ``degenerate`` and
reported with a warning.

Output columns (one row per non-shared target token, by ``target_id``):
``target_id`` int64, ``neighbor_target_ids`` list<int64>,
``neighbor_source_ids`` list<int64>, ``similarities`` list<float32> (cosine),
``weights`` list<float32> (sparsemax, sum to 1), ``k`` int32 (stored
neighbours), ``support`` int32 (exact sparsemax support size), ``truncated``
bool, ``missing`` bool (no vector: empty lists, ``k`` 0; later stages initialise
these from N(mean, std) and count them). Neighbours are listed by decreasing
similarity.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from embtransfer.core.atomic import read_parquet_metadata, write_parquet
from embtransfer.core.logs import without_run_values
from embtransfer.core.threads import torch_threads
from embtransfer.core.workspace import Workspace
from embtransfer.neighbors.sparsemax import FALLBACK_BUDGET_BYTES, SparseRows, sparsemax_block

#: Vectors with a smaller norm have no direction; they count as missing.
MIN_NORM = 1e-8


@dataclass
class Neighbors:
    """A neighbour table in CSR form, as methods read it (columns: the module docstring)."""

    target_ids: np.ndarray  # (n,) int64, non-shared target tokens
    offsets: np.ndarray  # (n + 1,) int64 into the flat arrays below
    neighbor_target_ids: np.ndarray  # (nnz,) int64
    neighbor_source_ids: np.ndarray  # (nnz,) int64
    similarities: np.ndarray  # (nnz,) float32
    weights: np.ndarray  # (nnz,) float32, each row sums to 1
    missing: np.ndarray  # (n,) bool: no fastText vector, empty row

    @classmethod
    def from_table(cls, table: Any) -> Neighbors:
        """From the pyarrow table (or DataFrame) written by the neighbours stage."""
        if not isinstance(table, pa.Table):
            table = pa.Table.from_pandas(table, preserve_index=False)

        def flat(name: str, dtype: Any) -> np.ndarray:
            column = table.column(name).combine_chunks()
            return column.values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)

        lists = table.column("neighbor_target_ids").combine_chunks()
        return cls(
            target_ids=table.column("target_id").to_numpy().astype(np.int64),
            offsets=lists.offsets.to_numpy().astype(np.int64),
            neighbor_target_ids=flat("neighbor_target_ids", np.int64),
            neighbor_source_ids=flat("neighbor_source_ids", np.int64),
            similarities=flat("similarities", np.float32),
            weights=flat("weights", np.float32),
            missing=table.column("missing").to_numpy().astype(bool),
        )

    def row(self, i: int) -> slice:
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    @property
    def k(self) -> np.ndarray:
        return np.diff(self.offsets)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


#: Schema of the neighbour table (list offsets are per record batch, so int32 suffices).
SCHEMA = pa.schema(
    [
        ("target_id", pa.int64()),
        ("neighbor_target_ids", pa.list_(pa.int64())),
        ("neighbor_source_ids", pa.list_(pa.int64())),
        ("similarities", pa.list_(pa.float32())),
        ("weights", pa.list_(pa.float32())),
        ("k", pa.int32()),
        ("support", pa.int32()),
        ("truncated", pa.bool_()),
        ("missing", pa.bool_()),
    ]
)


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


def count_summary(values: np.ndarray) -> dict[str, float | int | None]:
    """min, mean, median and max of per-token counts (None each when there are none)."""
    if values.size == 0:
        return {"min": None, "mean": None, "median": None, "max": None}
    return {
        "min": int(values.min()),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "max": int(values.max()),
    }


def _checked_inputs(
    target_vectors: np.ndarray,
    missing: np.ndarray,
    shared_target_ids: np.ndarray,
    shared_source_ids: np.ndarray,
    chunk_rows: int,
    prefilter_k: int,
    max_neighbors: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(float32 vectors, missing, shared target ids, shared source ids), checked."""
    vectors = np.asarray(target_vectors)
    if vectors.ndim != 2:
        raise ValueError(f"target_vectors must be 2-D, got shape {vectors.shape}")
    n_vocab = vectors.shape[0]
    missing = np.asarray(missing, dtype=bool)
    if missing.shape != (n_vocab,):
        raise ValueError(f"missing has shape {missing.shape}, expected ({n_vocab},)")
    shared_t = np.asarray(shared_target_ids, dtype=np.int64)
    shared_s = np.asarray(shared_source_ids, dtype=np.int64)
    if shared_t.shape != shared_s.shape or shared_t.ndim != 1:
        raise ValueError("shared_target_ids and shared_source_ids must be 1-D of equal length")
    if shared_t.size and (shared_t.min() < 0 or shared_t.max() >= n_vocab):
        raise ValueError(f"shared_target_ids outside 0..{n_vocab - 1}")
    if np.unique(shared_t).size != shared_t.size:
        raise ValueError("shared_target_ids contains duplicates (one row per shared token)")
    if chunk_rows < 1 or prefilter_k < 1:
        raise ValueError("chunk_rows and prefilter_k must be >= 1")
    if max_neighbors is not None and max_neighbors < 1:
        raise ValueError("max_neighbors must be >= 1 or None")
    vectors = vectors.astype(np.float32, copy=False)
    if not np.isfinite(vectors).all():
        raise ValueError("target_vectors contains NaN or Inf")
    return vectors, missing, shared_t, shared_s


@dataclass
class _Search:
    """What is searched: candidates (shared tokens with a vector, by target id) and output
    rows (the non-shared tokens, by target id)."""

    n_shared: int
    cand_t: np.ndarray  # candidates' target ids
    cand_s: np.ndarray  # candidates' source ids
    rows: np.ndarray  # output rows' target ids
    row_missing: np.ndarray  # output rows without a vector

    @classmethod
    def of(
        cls, vectors: np.ndarray, missing: np.ndarray, shared_t: np.ndarray, shared_s: np.ndarray
    ) -> _Search:
        # a zero vector has no cosine: treat it as missing even when not flagged
        no_vector = missing | (np.linalg.norm(vectors, axis=1) <= MIN_NORM)
        # sorted by target id: the overlap table's order cannot matter
        order = np.argsort(shared_t, kind="stable")
        shared_t, shared_s = shared_t[order], shared_s[order]
        cand = ~no_vector[shared_t]
        if not cand.any():
            raise ValueError("no shared target token has a vector: no neighbour candidates")
        is_shared = np.zeros(vectors.shape[0], bool)
        is_shared[shared_t] = True
        rows = np.nonzero(~is_shared)[0]
        return cls(int(shared_t.size), shared_t[cand], shared_s[cand], rows, no_vector[rows])


@dataclass
class _RowResults:
    """Per output row: stored neighbours, exact support size, truncated, fell back."""

    lengths: np.ndarray
    support: np.ndarray
    truncated: np.ndarray
    fallback: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> _RowResults:
        return cls(
            np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool)
        )


def _record_batch(
    search: _Search, per_row: _RowResults, chunk: slice, part: SparseRows
) -> pa.RecordBatch:
    """One chunk of output rows as a record batch of :data:`SCHEMA`."""
    lengths = per_row.lengths[chunk]
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    columns = {
        "target_id": pa.array(search.rows[chunk]),
        "neighbor_target_ids": _list_array(offsets, search.cand_t[part.indices]),
        "neighbor_source_ids": _list_array(offsets, search.cand_s[part.indices]),
        "similarities": _list_array(offsets, part.values),
        "weights": _list_array(offsets, part.weights),
        "k": pa.array(lengths.astype(np.int32)),
        "support": pa.array(per_row.support[chunk].astype(np.int32)),
        "truncated": pa.array(per_row.truncated[chunk]),
        "missing": pa.array(search.row_missing[chunk]),
    }
    return pa.record_batch(columns, schema=SCHEMA)


def _search_chunks(
    vectors: np.ndarray,
    search: _Search,
    per_row: _RowResults,
    chunk_rows: int,
    prefilter_k: int,
    max_neighbors: int | None,
    fallback_budget_bytes: int,
    timings: dict[str, float],
) -> list[pa.RecordBatch]:
    """Similarities and sparsemax of ``chunk_rows`` output rows at a time (one float32
    matmul each); missing rows in a chunk just get empty lists."""
    batches = []
    workspace = Workspace()
    cands = torch.from_numpy(np.ascontiguousarray(_normalise(vectors[search.cand_t])))
    for s in range(0, search.rows.size, chunk_rows):
        chunk = slice(s, min(s + chunk_rows, search.rows.size))
        have = np.nonzero(~search.row_missing[chunk])[0]
        t0 = time.perf_counter()
        query = torch.from_numpy(_normalise(vectors[search.rows[chunk][have]]))
        sims = (query @ cands.T).numpy()
        t1 = time.perf_counter()
        part = sparsemax_block(sims, prefilter_k, max_neighbors, workspace, fallback_budget_bytes)
        del sims
        t2 = time.perf_counter()
        pos = have + s
        per_row.lengths[pos] = part.lengths
        per_row.support[pos] = part.support
        per_row.truncated[pos] = part.truncated
        per_row.fallback[pos] = part.fallback
        batches.append(_record_batch(search, per_row, chunk, part))
        timings["matmul"] += t1 - t0
        timings["sparsemax"] += t2 - t1
        timings["assemble"] += time.perf_counter() - t2
    return batches


def compute_neighbors(
    target_vectors: np.ndarray,
    missing: np.ndarray,
    shared_target_ids: np.ndarray,
    shared_source_ids: np.ndarray,
    chunk_rows: int = 1024,
    prefilter_k: int = 256,
    threads: int | None = None,
    max_neighbors: int | None = 1024,
    fallback_budget_bytes: int = FALLBACK_BUDGET_BYTES,
) -> tuple[pa.Table, dict[str, Any]]:
    """Sparsemax neighbours of every non-shared target token (see the module docstring).

    ``target_vectors`` [V, dim] and ``missing`` [V] are indexed by target id;
    ``shared_target_ids`` / ``shared_source_ids`` are the overlap pairs (unique
    target ids). ``threads`` sets torch's CPU threads for the call (matmul,
    top-k). Returns the table and a stats dict (JSON-serialisable).
    """
    t_start = time.perf_counter()
    vectors, missing, shared_t, shared_s = _checked_inputs(
        target_vectors,
        missing,
        shared_target_ids,
        shared_source_ids,
        chunk_rows,
        prefilter_k,
        max_neighbors,
    )
    search = _Search.of(vectors, missing, shared_t, shared_s)
    per_row = _RowResults.zeros(search.rows.size)
    timings = {"matmul": 0.0, "sparsemax": 0.0, "assemble": 0.0}
    with torch_threads(threads), torch.inference_mode():
        batches = _search_chunks(
            vectors,
            search,
            per_row,
            chunk_rows,
            prefilter_k,
            max_neighbors,
            fallback_budget_bytes,
            timings,
        )
    table = pa.Table.from_batches(batches, schema=SCHEMA)
    seconds = {k: round(v, 4) for k, v in timings.items()}
    seconds["total"] = round(time.perf_counter() - t_start, 4)
    options = {
        "chunk_rows": chunk_rows,
        "prefilter_k": prefilter_k,
        "max_neighbors": max_neighbors,
        "threads": threads,
    }
    stats = _neighbor_stats(vectors.shape[0], search, per_row, table, options, seconds)
    if stats["degenerate"]:
        warnings.warn(
            f"{stats['degenerate']} of {stats['n_with_neighbors']} rows have a sparsemax "
            f"support larger than prefilter_k={prefilter_k} (near-constant similarities: "
            f"degenerate fastText vectors?); {stats['truncated']} rows stored truncated to "
            f"max_neighbors={max_neighbors}",
            RuntimeWarning,
            stacklevel=2,
        )
    return table, stats


def _neighbor_stats(
    n_vocab: int,
    search: _Search,
    per_row: _RowResults,
    table: pa.Table,
    options: dict[str, Any],
    seconds: dict[str, float],
) -> dict[str, Any]:
    """The neighbour table's statistics (its parquet metadata, less the run values)."""
    with_rows = ~search.row_missing
    max_neighbors, threads = options["max_neighbors"], options["threads"]
    return {
        "n_vocab": int(n_vocab),
        "n_shared": search.n_shared,
        "n_shared_candidates": int(search.cand_t.size),
        "n_shared_missing": int(search.n_shared - search.cand_t.size),
        "n_nonshared": int(search.rows.size),
        "n_missing": int(search.row_missing.sum()),
        "n_with_neighbors": int(with_rows.sum()),
        "fallback_rows": int(per_row.fallback.sum()),
        "degenerate": int((per_row.support[with_rows] > options["prefilter_k"]).sum()),
        "truncated": int(per_row.truncated.sum()),
        "support": count_summary(per_row.support[with_rows]),
        "k": count_summary(per_row.lengths[with_rows]),
        "entries": int(per_row.lengths.sum()),
        "entries_exact": int(per_row.support.sum()),
        "table_bytes": int(table.nbytes),
        "chunk_rows": int(options["chunk_rows"]),
        "prefilter_k": int(options["prefilter_k"]),
        "max_neighbors": None if max_neighbors is None else int(max_neighbors),
        "threads": int(threads) if threads is not None else torch.get_num_threads(),
        "seconds": seconds,
    }


def write_neighbors(table: pa.Table, stats: dict[str, Any], path: str | os.PathLike) -> None:
    """Write the neighbour table as parquet (atomically) with ``stats`` in its metadata.

    Timings and thread counts are left out (they belong in the job's log): the same
    inputs give the same bytes.
    """
    write_parquet(path, table, metadata=without_run_values(stats))


def read_neighbors(path: str | os.PathLike) -> tuple[pa.Table, dict[str, Any]]:
    """Read a neighbour table and its stats."""

    return pq.read_table(path), read_parquet_metadata(path)
