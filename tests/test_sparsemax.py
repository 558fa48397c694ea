"""Exact sparsemax: reference and top-K versions against entmax.sparsemax."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embtransfer.neighbors.sparsemax import sparsemax, sparsemax_threshold, topk_sparsemax

entmax = pytest.importorskip("entmax")


def reference(z: np.ndarray) -> np.ndarray:
    return entmax.sparsemax(torch.from_numpy(np.asarray(z, np.float32)), dim=-1).numpy()


def rows(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [
        (rng.standard_normal((60, 400)) * scale).astype(np.float32)
        for scale in (1e-4, 1e-2, 0.1, 1.0, 10.0, 1e3)
    ]
    ties = rng.integers(0, 4, (40, 300)).astype(np.float32) * 0.01  # many exact ties
    out.append(ties)
    out.append(np.full((5, 50), 0.3, np.float32))  # constant rows: uniform weights
    out.append(rng.standard_normal((7, 1)).astype(np.float32))  # rows of length 1
    out.append(np.abs(rng.standard_normal((10, 2))).astype(np.float32))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_sparsemax_matches_entmax(seed: int) -> None:
    for z in rows(seed):
        got = sparsemax(z)
        assert got.dtype == np.float32 and got.shape == z.shape
        np.testing.assert_allclose(got, reference(z), atol=1e-6)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)


def test_sparsemax_handles_1d_and_float64() -> None:
    z = np.array([0.5, 0.2, 0.1, -1.0])
    out = sparsemax(z)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.5 + 0.2 / 3, 0.2 + 0.2 / 3, 0.1 + 0.2 / 3, 0.0], atol=1e-12)
    tau, support = sparsemax_threshold(z[None])
    assert support.tolist() == [3] and tau[0] == pytest.approx(-0.2 / 3)


@pytest.mark.parametrize("k", [1, 3, 16, 64, 256, 1000])
def test_topk_sparsemax_matches_entmax_including_fallback(k: int) -> None:
    fell_back = 0
    for z in rows(2):
        ref = reference(z)
        got = topk_sparsemax(z, k, chunk_rows=17, fallback_budget_bytes=20_000)
        dense = got.to_dense(z.shape[1])
        np.testing.assert_allclose(dense, ref, atol=1e-6)
        # support = positive weights, same set as entmax's
        assert np.array_equal(got.support, (ref > 0).sum(axis=1))
        assert np.array_equal(got.lengths, got.support)
        assert not got.truncated.any()
        # the top-k test must fire exactly when the support does not fit in k
        needs = got.support >= min(k, z.shape[1]) if k < z.shape[1] else np.zeros(len(z), bool)
        assert np.array_equal(got.fallback & ~needs, np.zeros(len(z), bool))
        assert got.fallback[got.support > k].all()
        fell_back += got.n_fallback
        # entries of a row listed by decreasing value
        for r in range(0, len(z), 7):
            vals = got.values[got.indptr[r] : got.indptr[r + 1]]
            assert np.all(np.diff(vals) <= 0)
    if k <= 64:
        assert fell_back > 0  # the fallback path was exercised


def test_topk_sparsemax_truncation_keeps_largest_and_renormalises() -> None:
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((20, 500)) * 1e-4).astype(np.float32)  # supports ~ all columns
    ref = reference(z)
    got = topk_sparsemax(z, 8, max_keep=10)
    assert got.truncated.all() and (got.lengths == 10).all()
    assert np.array_equal(got.support, (ref > 0).sum(axis=1))
    for r in range(len(z)):
        idx = got.indices[got.indptr[r] : got.indptr[r + 1]]
        assert set(idx) == set(np.argsort(-z[r], kind="stable")[:10])
        np.testing.assert_allclose(got.weights[got.indptr[r] : got.indptr[r + 1]].sum(), 1, 1e-5)


def test_topk_sparsemax_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        topk_sparsemax(np.array([[np.nan, 1.0]]), 1)
    with pytest.raises(ValueError):
        topk_sparsemax(np.zeros((2, 3)), 0)
