"""Exact sparsemax (Martins & Astudillo 2016), rowwise, with an exact top-K shortcut.

Definitions (row ``z`` of length ``n``, ``z_(1) >= z_(2) >= ...`` sorted):

* support size ``k(z) = max{j : 1 + j z_(j) > z_(1) + ... + z_(j)}``;
* threshold ``tau = (z_(1) + ... + z_(k) - 1) / k``;
* ``sparsemax(z) = max(z - tau, 0)``; ``tau`` is the unique solution of
  ``sum_i max(z_i - tau, 0) = 1``.

:func:`sparsemax` is the sort-based reference. :func:`topk_sparsemax` applies the
same formula to the ``K`` largest values of each row only. The ``tau`` of any
subset of a row is a lower bound of the row's ``tau``, and the prefix ``tau``
solves the full-row equation iff every value left out is at or below it, i.e.
iff ``z_(K) <= tau_K`` (the threshold test): then the result is exact. Rows
that fail the test are recomputed exactly on the full row by the threshold
iteration of Michelot (1986), started from ``tau_K``: ``tau <- (sum of z > tau
minus 1) / count``. Started from any lower bound it increases monotonically and
stops, in finitely many steps, on the exact support (the set can only shrink,
and an unchanged set is the fixed point); it costs a few passes over the row
instead of a full sort. Rows still unsettled after ``max_iter`` passes (never
seen in practice) fall back to the sort.

Thresholds are computed in float64 from the given (float32) values, so the
support decision is exact for float32 inputs up to float64 rounding of the
sums; values that equal ``tau`` get weight 0 either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from embtransfer.core.topk import topk_lowest_index
from embtransfer.core.workspace import Workspace

#: Default memory for one block of fallback rows (float64 copy + masks).
FALLBACK_BUDGET_BYTES = 64 * 2**20
_MAX_ITER = 64


def sparsemax_threshold(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort-based ``(tau, support size)`` of each row of a 2-D array (float64 tau)."""
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"expected a 2-D array with at least one column, got shape {z.shape}")
    srt = -np.sort(-z, axis=1)
    csum = np.cumsum(srt, axis=1)
    ranks = np.arange(1, z.shape[1] + 1, dtype=np.float64)
    # 1 + j z_(j) - S_j is non-increasing in j, so the condition holds on a prefix
    support = np.count_nonzero(1.0 + ranks * srt > csum, axis=1)
    tau = (csum[np.arange(z.shape[0]), support - 1] - 1.0) / support
    return tau, support


def sparsemax(z: np.ndarray) -> np.ndarray:
    """Exact sparsemax along the last axis (sort-based reference definition).

    Float32 input gives float32 output (the threshold is computed in float64);
    other input gives float64.
    """
    arr = np.asarray(z)
    if arr.ndim == 0:
        raise ValueError("sparsemax needs at least one axis")
    out_dtype = np.float32 if arr.dtype == np.float32 else np.float64
    flat = arr.reshape(-1, arr.shape[-1]).astype(np.float64)
    if flat.shape[0] == 0:
        return np.zeros(arr.shape, dtype=out_dtype)
    tau, _ = sparsemax_threshold(flat)
    out = np.maximum(flat - tau[:, None], 0.0)
    return out.astype(out_dtype).reshape(arr.shape)


@dataclass
class SparseRows:
    """Sparsemax of many rows in CSR form, entries of a row by decreasing value.

    ``support`` is the exact sparsemax support size of each row. ``indptr`` /
    ``indices`` / ``values`` / ``weights`` hold the stored entries (all of the
    support, or its ``max_keep`` largest values for ``truncated`` rows, whose
    stored weights are renormalised to sum to 1).
    """

    indptr: np.ndarray  # int64 [n_rows + 1]
    indices: np.ndarray  # int64 column indices
    values: np.ndarray  # float32 input values z_i of the stored entries
    weights: np.ndarray  # float32 sparsemax weights
    support: np.ndarray  # int64 [n_rows]
    tau: np.ndarray  # float64 [n_rows]
    fallback: np.ndarray  # bool [n_rows]: failed the top-K test, recomputed on the full row
    truncated: np.ndarray  # bool [n_rows]: support larger than max_keep

    @property
    def n_rows(self) -> int:
        return int(self.support.shape[0])

    @property
    def n_fallback(self) -> int:
        return int(self.fallback.sum())

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def to_dense(self, n_cols: int) -> np.ndarray:
        out = np.zeros((self.n_rows, n_cols), dtype=np.float32)
        rows = np.repeat(np.arange(self.n_rows), self.lengths)
        out[rows, self.indices] = self.weights
        return out

    @staticmethod
    def concat(parts: list[SparseRows]) -> SparseRows:
        if not parts:
            return _empty_rows(0)
        offsets = np.cumsum([0] + [p.indptr[-1] for p in parts[:-1]])
        indptr = np.concatenate(
            [np.zeros(1, np.int64)]
            + [p.indptr[1:] + off for p, off in zip(parts, offsets, strict=True)]
        )
        cat = np.concatenate
        return SparseRows(
            indptr=indptr.astype(np.int64),
            indices=cat([p.indices for p in parts]),
            values=cat([p.values for p in parts]),
            weights=cat([p.weights for p in parts]),
            support=cat([p.support for p in parts]),
            tau=cat([p.tau for p in parts]),
            fallback=cat([p.fallback for p in parts]),
            truncated=cat([p.truncated for p in parts]),
        )


def _empty_rows(n: int) -> SparseRows:
    return SparseRows(
        indptr=np.zeros(n + 1, np.int64),
        indices=np.zeros(0, np.int64),
        values=np.zeros(0, np.float32),
        weights=np.zeros(0, np.float32),
        support=np.zeros(n, np.int64),
        tau=np.zeros(n, np.float64),
        fallback=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
    )


def _prefix_threshold(top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tau, support) of rows already sorted in decreasing order (float64)."""
    top = top.astype(np.float64)
    csum = np.cumsum(top, axis=1)
    ranks = np.arange(1, top.shape[1] + 1, dtype=np.float64)
    support = np.count_nonzero(1.0 + ranks * top > csum, axis=1)
    tau = (csum[np.arange(top.shape[0]), support - 1] - 1.0) / support
    return tau, support


def _threshold_iteration(z64: np.ndarray, tau0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact full-row (tau, support) by Michelot's iteration from lower bounds ``tau0``."""
    tau = tau0.astype(np.float64).copy()
    count = np.zeros(z64.shape[0], np.int64)
    active = np.arange(z64.shape[0])
    block = z64
    for _ in range(_MAX_ITER):
        mask = block > tau[active, None]
        cnt = np.count_nonzero(mask, axis=1)
        new_tau = (np.einsum("ij,ij->i", block, mask) - 1.0) / cnt
        new_cnt = np.count_nonzero(block > new_tau[:, None], axis=1)
        tau[active] = new_tau
        count[active] = new_cnt
        # an unchanged support set is the fixed point (">=" also stops on rounding noise)
        moving = new_cnt < cnt
        if not moving.any():
            return tau, count
        if moving.mean() < 0.5:
            # compact when most rows settled; settled rows kept in the block just repeat
            block, active = block[moving], active[moving]
    # not settled after _MAX_ITER passes (not seen in practice): exact sort on those rows
    tau[active], count[active] = sparsemax_threshold(block)
    return tau, count


def _rows_per_block(budget_bytes: int, n_cols: int) -> int:
    """Fallback rows per block: a float64 copy plus two bool masks per row in the budget."""
    return max(1, int(budget_bytes) // max(1, n_cols * 10))


#: Width of the first, cheaper top-k pass (most rows have small supports).
FIRST_K = 64


def _topk(tz: torch.Tensor, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    # all rows (``rows`` only ever holds distinct rows in order): no copy
    block = tz if rows.size == tz.shape[0] else tz[torch.from_numpy(rows)]
    v, i = topk_lowest_index(block, k)  # ties in index order: the table's rows, everywhere
    return v.numpy(), i.numpy()


@dataclass
class _BlockRows:
    """One block's per-row results, filled pass by pass."""

    tau: np.ndarray  # float64: the row's threshold, or a lower bound while it is pending
    support: np.ndarray  # int64: exact support size
    lengths: np.ndarray  # int64: stored entries
    # each group: rows, column indices, values, weights of its stored entries (row-major)
    groups: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

    @classmethod
    def zeros(cls, m: int) -> _BlockRows:
        return cls(np.zeros(m, np.float64), np.zeros(m, np.int64), np.zeros(m, np.int64), [])

    def store(
        self, rows: np.ndarray, top_v: np.ndarray, top_i: np.ndarray, tau: np.ndarray, keep_cap: int
    ) -> np.ndarray:
        """Store the positive weights of ``rows`` (top values sorted, so the support is a
        prefix), at most ``keep_cap`` a row; returns the support size in the prefix."""
        w = top_v.astype(np.float64) - tau[:, None]
        pos = w > 0
        support = np.count_nonzero(pos, axis=1)
        pos[:, keep_cap:] = False
        self.lengths[rows] = np.count_nonzero(pos, axis=1)
        self.groups.append((rows, top_i[pos], top_v[pos], w[pos]))
        return support


def _prefix_passes(tz: torch.Tensor, k: int, keep_cap: int, found: _BlockRows) -> np.ndarray:
    """Passes over each row's top ``min(FIRST_K, k)`` then top ``k`` values (the second
    only for the rows the first could not settle); returns the rows the threshold test
    fails at width ``k``, their ``tau`` a lower bound."""
    m, n = tz.shape
    pending = np.arange(m)
    for width in sorted({min(FIRST_K, k, n), min(k, n)}):
        rows = pending
        top_v, top_i = _topk(tz, rows, width)
        t, _ = _prefix_threshold(top_v)
        # threshold test: the prefix tau is the row's tau iff z_(K) <= tau
        fail = top_v[:, -1].astype(np.float64) > t if width < n else np.zeros(rows.size, bool)
        done = ~fail
        d_rows = rows[done]
        found.tau[d_rows] = t[done]
        found.support[d_rows] = found.store(d_rows, top_v[done], top_i[done], t[done], keep_cap)
        pending = rows[fail]
        found.tau[pending] = t[fail]  # lower bound for the full-row iteration
        if pending.size == 0:
            break
    return pending


def _full_rows(
    z: np.ndarray,
    tz: torch.Tensor,
    pending: np.ndarray,
    keep_cap: int,
    found: _BlockRows,
    workspace: Workspace,
    budget_bytes: int,
) -> None:
    """Exact thresholds of the ``pending`` rows on the full row, in blocks of float64
    copies within ``budget_bytes``."""
    n = z.shape[1]
    step = _rows_per_block(budget_bytes, n)
    for s in range(0, pending.size, step):
        rows = pending[s : s + step]
        z64 = workspace.matrix("fallback", torch.float64, rows.size, n).numpy()
        for j, r in enumerate(rows):  # float32 -> float64 into the reused buffer
            z64[j] = z[r]
        t, cnt = _threshold_iteration(z64, found.tau[rows])
        found.tau[rows], found.support[rows] = t, cnt
        top_v, top_i = _topk(tz, rows, int(min(cnt.max(), keep_cap)))
        found.store(rows, top_v, top_i, t, keep_cap)


def _sparse_rows(found: _BlockRows, fallback: np.ndarray) -> SparseRows:
    """The stored groups laid out row by row; truncated rows' weights renormalised."""
    m = found.lengths.size
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(found.lengths, out=indptr[1:])
    total = int(indptr[-1])
    indices = np.empty(total, np.int64)
    values = np.empty(total, np.float32)
    weights = np.empty(total, np.float64)
    for rows, idx, val, wt in found.groups:
        # a group's entries are row-major: row r's come contiguously, in order
        lens = found.lengths[rows]
        skip = np.concatenate([[0], np.cumsum(lens)[:-1]])
        dest = np.repeat(indptr[rows] - skip, lens) + np.arange(int(lens.sum()))
        indices[dest], values[dest], weights[dest] = idx, val, wt

    truncated = found.support > found.lengths
    if truncated.any():
        # renormalise the stored part of rows whose support exceeds max_keep
        row_of = np.repeat(np.arange(m), found.lengths)
        sums = np.bincount(row_of, weights=weights, minlength=m)
        scale = np.where(truncated, 1.0 / np.where(sums > 0, sums, 1.0), 1.0)
        weights *= scale[row_of]
    return SparseRows(
        indptr=indptr,
        indices=indices,
        values=values,
        weights=weights.astype(np.float32),
        support=found.support,
        tau=found.tau,
        fallback=fallback,
        truncated=truncated,
    )


def sparsemax_block(
    z: np.ndarray,
    k: int,
    max_keep: int | None = None,
    workspace: Workspace | None = None,
    budget_bytes: int = FALLBACK_BUDGET_BYTES,
) -> SparseRows:
    """Sparsemax of the rows of one C-contiguous float32 block (see :func:`topk_sparsemax`).

    Prefix passes of width ``min(FIRST_K, k)`` then ``k`` (only rows whose
    support may not fit), then the exact full-row threshold iteration for the
    rows that fail the threshold test at width ``k``, in blocks of at most
    ``budget_bytes`` copied into ``workspace``.
    """
    m, n = z.shape
    if m == 0:
        return _empty_rows(0)
    keep_cap = n if max_keep is None else max(1, min(max_keep, n))
    tz = torch.from_numpy(z)
    found = _BlockRows.zeros(m)
    pending = _prefix_passes(tz, k, keep_cap, found)
    fallback = np.zeros(m, bool)
    if pending.size:
        fallback[pending] = True
        _full_rows(z, tz, pending, keep_cap, found, workspace or Workspace(), budget_bytes)
    return _sparse_rows(found, fallback)


def topk_sparsemax(
    z: np.ndarray,
    k: int,
    chunk_rows: int = 1024,
    max_keep: int | None = None,
    fallback_budget_bytes: int = FALLBACK_BUDGET_BYTES,
) -> SparseRows:
    """Exact rowwise sparsemax of ``z`` computed from the top-``k`` of each row.

    Rows whose support does not fit in the top-``k`` prefix (threshold test,
    see the module docstring) are recomputed exactly on the full row
    (``SparseRows.fallback``, ``n_fallback``), in blocks of at most
    ``fallback_budget_bytes``. ``max_keep`` caps the number of stored entries
    per row (the largest ones, renormalised, row flagged ``truncated``); the
    default ``None`` stores the whole support. Input is processed in float32.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    z = np.asarray(z)
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"expected a 2-D array with at least one column, got shape {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError("sparsemax input contains NaN or Inf")
    z32 = np.ascontiguousarray(z, dtype=np.float32)
    workspace = Workspace()
    parts = [
        sparsemax_block(z32[s : s + chunk_rows], k, max_keep, workspace, fallback_budget_bytes)
        for s in range(0, z32.shape[0], max(1, chunk_rows))
    ]
    return SparseRows.concat(parts) if parts else _empty_rows(0)
