"""Neighbour tables against a naive per-row implementation."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from embtransfer.core.atomic import read_parquet_metadata
from embtransfer.neighbors.search import compute_neighbors, read_neighbors, write_neighbors

entmax = pytest.importorskip("entmax")

V, DIM = 300, 12


def make_inputs(seed: int = 0, noise: float = 0.5):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((15, DIM))
    vectors = (centers[rng.integers(0, 15, V)] + noise * rng.standard_normal((V, DIM))).astype(
        np.float32
    )
    missing = np.zeros(V, bool)
    missing[[3, 50, 77, 120, 121]] = True  # 50 and 121 are shared: not candidates
    vectors[missing] = 0.0
    shared_t = rng.choice(np.arange(V), 180, replace=False)
    shared_t = np.union1d(shared_t, [50, 121])
    shared_t = shared_t[~np.isin(shared_t, [3, 77, 120])]
    shared_s = rng.permutation(1000)[: shared_t.size] + 5000
    return vectors, missing, rng.permutation(shared_t), None, shared_s


def naive(vectors, missing, shared_t, shared_s):
    """Full cosine row + entmax sparsemax per non-shared token."""
    src = dict(zip(shared_t.tolist(), shared_s.tolist(), strict=True))
    cand = [t for t in shared_t.tolist() if not missing[t]]
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-30)
    out = {}
    for t in range(V):
        if t in src or missing[t]:
            continue
        sims = unit[cand] @ unit[t]
        w = entmax.sparsemax(torch.from_numpy(sims.astype(np.float32)), dim=-1).numpy()
        out[t] = {cand[i]: (float(sims[i]), float(w[i])) for i in np.nonzero(w > 0)[0]}
        out[t] = dict(sorted(out[t].items()))
        out[t]["_src"] = {cand[i]: src[cand[i]] for i in np.nonzero(w > 0)[0]}
    return out


def as_dict(table):
    rows = {}
    for r in table.to_pylist():
        rows[r["target_id"]] = r
    return rows


@pytest.mark.parametrize("chunk_rows,prefilter_k", [(1, 2), (7, 4), (64, 256), (1000, 1)])
def test_matches_naive_and_chunking(chunk_rows: int, prefilter_k: int) -> None:
    vectors, missing, shared_t, _, shared_s = make_inputs()
    expected = naive(vectors, missing, shared_t, shared_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        table, stats = compute_neighbors(
            vectors, missing, shared_t, shared_s, chunk_rows=chunk_rows, prefilter_k=prefilter_k
        )
    rows = as_dict(table)
    nonshared = sorted(set(range(V)) - set(shared_t.tolist()))
    assert table.column("target_id").to_pylist() == nonshared  # shared tokens are no rows
    for t in nonshared:
        r = rows[t]
        if missing[t]:
            assert r["missing"] and r["k"] == 0 and r["neighbor_target_ids"] == []
            continue
        exp = expected[t]
        src = exp.pop("_src")
        assert not r["missing"]
        assert sorted(r["neighbor_target_ids"]) == sorted(exp)
        assert r["k"] == r["support"] == len(exp)
        got_src = dict(zip(r["neighbor_target_ids"], r["neighbor_source_ids"], strict=True))
        assert got_src == src  # source ids map through the overlap pairs
        pairs = zip(r["similarities"], r["weights"], strict=True)
        got = dict(zip(r["neighbor_target_ids"], pairs, strict=True))
        for nid, (sim, w) in exp.items():
            assert got[nid][0] == pytest.approx(sim, abs=1e-5)
            assert got[nid][1] == pytest.approx(w, abs=1e-5)
        assert sum(r["weights"]) == pytest.approx(1.0, abs=1e-5)
        assert list(r["similarities"]) == sorted(r["similarities"], reverse=True)
    assert stats["n_missing"] == 3 and stats["n_shared_missing"] == 2
    assert stats["n_shared_candidates"] == shared_t.size - 2
    assert stats["n_nonshared"] == len(nonshared)
    assert stats["n_with_neighbors"] == len(nonshared) - 3
    if prefilter_k <= 2:
        assert stats["fallback_rows"] > 0  # the fallback path ran


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_shared_order_does_not_matter() -> None:
    vectors, missing, shared_t, _, shared_s = make_inputs(1)
    a, _ = compute_neighbors(vectors, missing, shared_t, shared_s, prefilter_k=8)
    perm = np.random.default_rng(5).permutation(shared_t.size)
    b, _ = compute_neighbors(vectors, missing, shared_t[perm], shared_s[perm], prefilter_k=8)
    for ra, rb in zip(a.to_pylist(), b.to_pylist(), strict=True):
        key = ("neighbor_target_ids", "neighbor_source_ids", "similarities", "weights")
        assert set(zip(*(ra[k] for k in key), strict=True)) == set(
            zip(*(rb[k] for k in key), strict=True)
        )


def test_degenerate_rows_warn_truncate_and_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    common = rng.standard_normal(DIM)
    vectors = (common + 1e-4 * rng.standard_normal((V, DIM))).astype(np.float32)
    missing = np.zeros(V, bool)
    shared_t = np.arange(100, 300)
    shared_s = shared_t + 7
    with pytest.warns(RuntimeWarning, match="100 of 100 rows"):
        table, stats = compute_neighbors(
            vectors, missing, shared_t, shared_s, chunk_rows=33, prefilter_k=16, max_neighbors=50
        )
    assert stats["degenerate"] == 100 and stats["fallback_rows"] == 100
    assert stats["truncated"] == table.column("truncated").to_numpy().sum() > 0
    rows = table.to_pylist()
    for r in rows:
        assert r["k"] == min(r["support"], 50) and r["support"] > 16
        assert sum(r["weights"]) == pytest.approx(1.0, abs=1e-5)
    # uncapped: the stored rows are the exact sparsemax
    with pytest.warns(RuntimeWarning):
        full, st = compute_neighbors(
            vectors, missing, shared_t, shared_s, prefilter_k=16, max_neighbors=None
        )
    assert st["truncated"] == 0 and st["entries"] == st["entries_exact"]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    r0 = full.to_pylist()[0]
    sims = unit[shared_t] @ unit[0]
    w = entmax.sparsemax(torch.from_numpy(sims.astype(np.float32)), dim=-1).numpy()
    assert r0["support"] == (w > 0).sum()
    path = tmp_path / "n" / "nb.parquet"
    write_neighbors(table, stats, path)
    back, meta = read_neighbors(path)
    assert back.equals(table)
    assert meta == read_parquet_metadata(path) and meta["degenerate"] == 100


def test_input_validation() -> None:
    vectors, missing, shared_t, _, shared_s = make_inputs()
    with pytest.raises(ValueError, match="duplicates"):
        compute_neighbors(vectors, missing, np.r_[shared_t, shared_t[:1]], np.r_[shared_s, 1])
    with pytest.raises(ValueError, match="no shared"):
        compute_neighbors(vectors, np.ones(V, bool), shared_t, shared_s)
    with pytest.raises(ValueError, match="missing has shape"):
        compute_neighbors(vectors, missing[:-1], shared_t, shared_s)


def test_unflagged_zero_vector_counts_as_missing() -> None:
    vectors, missing, shared_t, _, shared_s = make_inputs()
    nonshared = sorted(set(range(V)) - set(shared_t.tolist()) - {3, 77, 120})
    vectors[nonshared[0]] = 0.0
    table, stats = compute_neighbors(vectors, missing, shared_t, shared_s)
    assert stats["n_missing"] == 4
    assert as_dict(table)[nonshared[0]]["missing"]
