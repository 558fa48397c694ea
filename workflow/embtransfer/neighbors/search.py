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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from embtransfer.core.atomic import read_parquet_metadata, write_parquet
from embtransfer.core.logs import without_run_values
from embtransfer.neighbors.sparsemax import FALLBACK_BUDGET_BYTES, Workspace, sparsemax_block

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


@contextmanager
def _torch_threads(threads: int | None):
    if threads is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(old)


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
    # a zero vector has no cosine: treat it as missing even when not flagged
    norms = np.linalg.norm(vectors, axis=1)
    no_vector = missing | (norms <= MIN_NORM)

    order = np.argsort(shared_t, kind="stable")
    shared_t, shared_s = shared_t[order], shared_s[order]
    cand = ~no_vector[shared_t]
    cand_t, cand_s = shared_t[cand], shared_s[cand]
    if cand_t.size == 0:
        raise ValueError("no shared target token has a vector: no neighbour candidates")

    is_shared = np.zeros(n_vocab, bool)
    is_shared[shared_t] = True
    rows = np.nonzero(~is_shared)[0]
    row_missing = no_vector[rows]

    timings = {"matmul": 0.0, "sparsemax": 0.0, "assemble": 0.0}
    lengths_all = np.zeros(rows.size, np.int64)
    support_all = np.zeros(rows.size, np.int64)
    truncated_all = np.zeros(rows.size, bool)
    fallback_all = np.zeros(rows.size, bool)
    batches: list[pa.RecordBatch] = []
    workspace = Workspace(fallback_budget_bytes)
    with _torch_threads(threads), torch.inference_mode():
        cands = torch.from_numpy(np.ascontiguousarray(_normalise(vectors[cand_t])))
        # chunks of output rows; missing rows in a chunk just get empty lists
        for s in range(0, rows.size, chunk_rows):
            chunk = slice(s, min(s + chunk_rows, rows.size))
            have = np.nonzero(~row_missing[chunk])[0]
            t0 = time.perf_counter()
            query = torch.from_numpy(_normalise(vectors[rows[chunk][have]]))
            sims = (query @ cands.T).numpy()
            t1 = time.perf_counter()
            part = sparsemax_block(sims, prefilter_k, max_neighbors, workspace)
            del sims
            t2 = time.perf_counter()
            pos = have + s
            lengths_all[pos] = part.lengths
            support_all[pos] = part.support
            truncated_all[pos] = part.truncated
            fallback_all[pos] = part.fallback
            offsets = np.zeros(chunk.stop - s + 1, np.int64)
            np.cumsum(lengths_all[chunk], out=offsets[1:])
            batches.append(
                pa.record_batch(
                    {
                        "target_id": pa.array(rows[chunk]),
                        "neighbor_target_ids": _list_array(offsets, cand_t[part.indices]),
                        "neighbor_source_ids": _list_array(offsets, cand_s[part.indices]),
                        "similarities": _list_array(offsets, part.values),
                        "weights": _list_array(offsets, part.weights),
                        "k": pa.array(lengths_all[chunk].astype(np.int32)),
                        "support": pa.array(support_all[chunk].astype(np.int32)),
                        "truncated": pa.array(truncated_all[chunk]),
                        "missing": pa.array(row_missing[chunk]),
                    },
                    schema=SCHEMA,
                )
            )
            timings["matmul"] += t1 - t0
            timings["sparsemax"] += t2 - t1
            timings["assemble"] += time.perf_counter() - t2
    table = pa.Table.from_batches(batches, schema=SCHEMA)

    with_rows = ~row_missing
    degenerate = int((support_all[with_rows] > prefilter_k).sum())
    truncated = int(truncated_all.sum())
    stats: dict[str, Any] = {
        "n_vocab": int(n_vocab),
        "n_shared": int(shared_t.size),
        "n_shared_candidates": int(cand_t.size),
        "n_shared_missing": int(shared_t.size - cand_t.size),
        "n_nonshared": int(rows.size),
        "n_missing": int(row_missing.sum()),
        "n_with_neighbors": int(with_rows.sum()),
        "fallback_rows": int(fallback_all.sum()),
        "degenerate": degenerate,
        "truncated": truncated,
        "support": count_summary(support_all[with_rows]),
        "k": count_summary(lengths_all[with_rows]),
        "entries": int(lengths_all.sum()),
        "entries_exact": int(support_all.sum()),
        "table_bytes": int(table.nbytes),
        "chunk_rows": int(chunk_rows),
        "prefilter_k": int(prefilter_k),
        "max_neighbors": None if max_neighbors is None else int(max_neighbors),
        "threads": int(threads) if threads is not None else torch.get_num_threads(),
        "seconds": {k: round(v, 4) for k, v in timings.items()}
        | {"total": round(time.perf_counter() - t_start, 4)},
    }
    if degenerate:
        warnings.warn(
            f"{degenerate} of {int(with_rows.sum())} rows have a sparsemax support larger than "
            f"prefilter_k={prefilter_k} (near-constant similarities: degenerate fastText "
            f"vectors?); {truncated} rows stored truncated to max_neighbors={max_neighbors}",
            RuntimeWarning,
            stacklevel=2,
        )
    return table, stats


def write_neighbors(table: pa.Table, stats: dict[str, Any], path: str | os.PathLike) -> None:
    """Write the neighbour table as parquet (atomically) with ``stats`` in its metadata.

    Timings and thread counts are left out (they belong in the job's log): the same
    inputs give the same bytes.
    """
    write_parquet(path, table, metadata=without_run_values(stats))


def read_neighbors(path: str | os.PathLike) -> tuple[pa.Table, dict[str, Any]]:
    """Read a neighbour table and its stats."""

    return pq.read_table(path), read_parquet_metadata(path)
