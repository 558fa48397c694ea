"""Top-k ties in index order (core/topk.py), in each place a top-k makes an artifact:
the neighbour tables (sparsemax), WECHSEL/OFA's neighbours (aligned.topk_cosine) and CLP.

torch.topk alone orders equal values as its kernel meets them (on this machine a row of
3,000 values in 5 levels came back out of index order in every row), so each test below
fails with a plain torch.topk in its place."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embtransfer.core.topk import topk_lowest_index
from embtransfer.neighbors import sparsemax
from embtransfer.transfer.aligned import topk_cosine


def reference(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Values descending, equal values by ascending index: a stable sort of -x."""
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(x, order, axis=1), order


def tied(rows: int, cols: int, levels: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, levels, (rows, cols)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 7, 64, 700, 3000])
def test_ties_in_index_order_and_lowest_indices_at_the_cut(k: int) -> None:
    x = tied(50, 3000, 5)
    v, i = topk_lowest_index(torch.from_numpy(x), k)
    want_v, want_i = reference(x, k)
    np.testing.assert_array_equal(i.numpy(), want_i)
    np.testing.assert_array_equal(v.numpy(), want_v)


def test_distinct_values_as_torch_topk() -> None:
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((20, 500)).astype(np.float32))
    v, i = topk_lowest_index(x, 30)
    tv, ti = torch.topk(x, 30, dim=1)
    assert torch.equal(i, ti) and torch.equal(v, tv)


def test_neighbour_table_top_k_is_canonical() -> None:
    x = tied(40, 300, 4)
    v, i = sparsemax._topk(torch.from_numpy(x), np.arange(40), 64)
    want_v, want_i = reference(x, 64)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(v, want_v)


def test_aligned_neighbours_of_tied_keys_are_the_lowest_keys() -> None:
    """A zero query ties with every key (similarity 0): its neighbours are keys 0..k-1,
    whatever the blocks. Keys twice over (unit vectors, exact similarities 1 and 0): the
    lower copy first, then the lowest keys of similarity 0."""
    keys = np.concatenate([np.eye(8), np.eye(8)]).astype(np.float32)
    queries = np.concatenate([np.zeros((1, 8)), np.eye(8)[:5]]).astype(np.float32)
    want = reference(queries @ keys.T, 6)[1]
    assert want[0].tolist() == [0, 1, 2, 3, 4, 5] and want[3, :3].tolist() == [2, 10, 0]
    for chunk_cols in (3, 7, 100):
        idx, _ = topk_cosine(queries, keys, 6, chunk_rows=4, chunk_cols=chunk_cols)
        np.testing.assert_array_equal(idx, want)
