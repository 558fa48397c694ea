"""Helpers shared by several methods: row copies, statistics and draws over the source
rows, label counts, sparse weighted sums, checks of the aligned vectors.

They live here rather than in one method's module so that editing a method
reruns only that method's jobs (each rule hashes the modules it imports).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import torch

from embtransfer.transfer.aligned import AlignedVectors
from embtransfer.transfer.methods.base import TransferInputs


def nonshared_ids(inputs: TransferInputs) -> np.ndarray:
    """Target ids that are not shared, ascending."""
    is_shared = np.zeros(inputs.n_target, bool)
    is_shared[inputs.overlap["target_id"].to_numpy(np.int64)] = True
    return np.flatnonzero(~is_shared)


def count_labels(how: np.ndarray) -> dict[str, int]:
    labels, counts = np.unique(how.astype(str), return_counts=True)
    return {str(label): int(n) for label, n in zip(labels, counts, strict=True)}


def sparse_combine(
    offsets: np.ndarray, columns: np.ndarray, weights: np.ndarray, matrix: np.ndarray
) -> np.ndarray:
    """Row i = sum_j weights[j] * matrix[columns[j]] over j in offsets[i] : offsets[i + 1].

    A CSR x dense product in float32 over only the distinct rows of ``matrix``
    that are used (the source matrix may be far larger than the shared set).
    """
    offsets = np.asarray(offsets, np.int64)
    columns = np.asarray(columns, np.int64)
    n = offsets.size - 1
    h = matrix.shape[1]
    if offsets[0] != 0 or offsets[-1] != columns.size or np.any(np.diff(offsets) < 0):
        raise ValueError("malformed CSR offsets")
    if columns.size != np.asarray(weights).size:
        raise ValueError("columns and weights differ in length")
    if columns.size == 0:
        return np.zeros((n, h), np.float32)
    if columns.min() < 0 or columns.max() >= matrix.shape[0]:
        raise ValueError(f"row ids outside 0..{matrix.shape[0] - 1}")
    used, local = np.unique(columns, return_inverse=True)
    dense = torch.from_numpy(np.ascontiguousarray(matrix[used], dtype=np.float32))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        csr = torch.sparse_csr_tensor(
            torch.from_numpy(offsets),
            torch.from_numpy(local.astype(np.int64)),
            torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32)),
            size=(n, used.size),
            check_invariants=False,  # checked above
        )
        with torch.inference_mode():
            return (csr @ dense).numpy()


def copy_shared(inputs: TransferInputs, side: str, rows: np.ndarray, how: np.ndarray) -> None:
    """Copy the source row of every shared token into ``rows`` (in place)."""
    target_ids, source_ids = inputs.shared()
    rows[target_ids] = inputs.source_matrix(side)[source_ids]
    how[target_ids] = "copied"


def row_blocks(
    matrix: np.ndarray, ids: np.ndarray | None = None, block_rows: int = 8192
) -> Iterator[np.ndarray]:
    """float64 blocks of ``matrix``'s rows (all, or ``ids``): no full-size temporary."""
    return (part.astype(np.float64) for part in _chosen_blocks(matrix, ids, block_rows))


def _moment_rows(matrix: np.ndarray, ddof: int, ids: np.ndarray | None) -> int:
    """How many rows the moments are taken over; refuses too few for a std."""
    n = matrix.shape[0] if ids is None else ids.size
    if n <= ddof:
        raise ValueError(f"need more than {ddof} rows for a standard deviation, got {n}")
    return n


def _chosen_blocks(
    matrix: np.ndarray, ids: np.ndarray | None, block_rows: int
) -> Iterator[np.ndarray]:
    """``matrix``'s rows (all, or ``ids``) in blocks, in their own dtype."""
    n = matrix.shape[0] if ids is None else ids.size
    for s in range(0, n, block_rows):
        yield matrix[s : s + block_rows] if ids is None else matrix[ids[s : s + block_rows]]


def column_sum(matrix: np.ndarray, ids: np.ndarray | None = None,
               block_rows: int = 8192) -> np.ndarray:
    """Per-dimension float64 sum of ``matrix``'s rows (all, or ``ids``), accumulated in
    float64 without a float64 copy of a block (4x faster than casting first: at Gemma 3's
    262k x 1,152 source, 0.2 s against 0.8 s a pass)."""
    total = np.zeros(matrix.shape[1])
    for part in _chosen_blocks(matrix, ids, block_rows):
        total += np.sum(part, axis=0, dtype=np.float64)
    return total


#: Above this ratio of a column's squared mean to its variance, the one-pass variance
#: (sum of squares minus n mean^2, float64) could lose digits: such columns are recomputed
#: centred.
_CANCELLATION = 1e4


def column_moments(
    matrix: np.ndarray, ddof: int = 0, ids: np.ndarray | None = None, block_rows: int = 8192
) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and std in float64 of ``matrix``'s rows (all, or ``ids``).

    One pass of float64 sums and sums of squares (a float32 value's square is exact in
    float64), then a centred second pass over only the columns whose mean dwarfs their
    spread, where the one-pass difference would cancel; 4-8x faster than two centred passes
    at real source sizes, as accurate (tests/test_transfer_runner.py)."""
    n = _moment_rows(matrix, ddof, ids)
    total, squares = np.zeros(matrix.shape[1]), np.zeros(matrix.shape[1])
    for part in _chosen_blocks(matrix, ids, block_rows):
        total += np.sum(part, axis=0, dtype=np.float64)
        squares += np.einsum("ij,ij->j", part, part, dtype=np.float64)
    mean = total / n
    spread = np.maximum(squares - n * np.square(mean), 0.0)
    unsafe = np.flatnonzero(n * np.square(mean) > _CANCELLATION * spread)
    if unsafe.size:
        spread[unsafe] = sum(
            np.square(part[:, unsafe].astype(np.float64) - mean[unsafe]).sum(axis=0)
            for part in _chosen_blocks(matrix, ids, block_rows))
    return mean, np.sqrt(spread / (n - ddof))


#: Rows drawn at a time by :func:`diagonal_normal`.
_DRAW_ROWS = 4096


def diagonal_normal(
    matrix: np.ndarray, rng: np.random.Generator, n: int, ddof: int = 0,
    ids: np.ndarray | None = None,
) -> np.ndarray:
    """``n`` rows from N(mean, std) of ``matrix``'s rows (all, or ``ids``), per dimension."""
    if n == 0:  # no rows to draw (CLP's usual fallbacks): no moments over the whole source
        _moment_rows(matrix, ddof, ids)  # the same refusal; drawing none moves no rng state
        return np.zeros((0, matrix.shape[1]), np.float32)
    mean, std = column_moments(matrix, ddof, ids)
    # in blocks of rows: the same stream and values as one draw, without its float64
    # temporaries (three of 460 MB for Gemma 3's width at 50,000 rows: 3.2 s against 1.0)
    rows = np.empty((n, matrix.shape[1]), np.float32)
    for s in range(0, n, _DRAW_ROWS):
        part = rows[s : s + _DRAW_ROWS]
        part[:] = mean + std * rng.standard_normal(part.shape)
    return rows


def source_mean(inputs: TransferInputs, side: str) -> np.ndarray:
    """The mean source row over :meth:`TransferInputs.statistic_ids` (float64)."""
    ids = inputs.statistic_ids()
    return column_sum(inputs.source_matrix(side), ids) / ids.size


def source_normal(
    inputs: TransferInputs, side: str, rng: np.random.Generator, n: int
) -> np.ndarray:
    """``n`` rows drawn from N(mean, std) of the source's text-token rows (per dimension)."""
    return diagonal_normal(inputs.source_matrix(side), rng, n, ids=inputs.statistic_ids())


def empty_result(inputs: TransferInputs, side: str) -> tuple[np.ndarray, np.ndarray]:
    """A zero matrix (V_t, h_s) and an all-"unset" label array to fill."""
    h = inputs.source_matrix(side).shape[1]
    return np.zeros((inputs.n_target, h), np.float32), np.full(inputs.n_target, "unset", object)


def check_aligned(inputs: TransferInputs, side: str,
                  name: str) -> tuple[np.ndarray, AlignedVectors]:
    """The aligned vectors' shapes against the vocabularies; returns the source matrix
    and the aligned vectors."""
    aligned = inputs.aligned
    if aligned is None:
        raise ValueError(f"{name} needs aligned vectors (inputs.aligned)")
    matrix = inputs.source_matrix(side)
    if aligned.target.shape[0] != inputs.n_target:
        raise ValueError(
            f"{name}: {aligned.target.shape[0]} aligned target vectors for "
            f"{inputs.n_target} target tokens"
        )
    if aligned.source.shape[0] > matrix.shape[0]:
        raise ValueError(
            f"{name}: {aligned.source.shape[0]} aligned source vectors but only "
            f"{matrix.shape[0]} source embedding rows"
        )
    return matrix, aligned
