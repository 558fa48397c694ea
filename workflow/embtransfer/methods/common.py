"""Helpers shared by several methods (label counts, sparse weighted sums, draws).

They live here rather than in one method's module so that editing a method
reruns only that method's jobs (each rule hashes the modules it imports).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from embtransfer.methods.base import TransferInputs


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
