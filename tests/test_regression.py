"""SALT's batched regression against the naive per-token numpy.linalg.pinv computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer import regression
from embtransfer.transfer.methods.base import SIDES as METHOD_SIDES
from embtransfer.transfer.regression import (
    DEFAULT_RCOND,
    STATUSES,
    apply_coefficients,
    read_coefficients,
    salt_coefficients,
    salt_project,
    status_labels,
    write_coefficients,
)

V_T, V_S, H_T, H_S = 260, 220, 12, 20
TOL = 1e-5


def make_neighbors(
    target_ids: list[int], sets: list[np.ndarray], source_of: np.ndarray,
    missing: list[bool] | None = None, seed: int = 0,
) -> Neighbors:
    rng = np.random.default_rng(seed)
    k = np.array([len(s) for s in sets], np.int64)
    flat_t = np.concatenate(sets).astype(np.int64) if k.sum() else np.zeros(0, np.int64)
    sim = rng.random(flat_t.size).astype(np.float32)
    return Neighbors(
        target_ids=np.asarray(target_ids, np.int64),
        offsets=np.concatenate([[0], np.cumsum(k)]).astype(np.int64),
        neighbor_target_ids=flat_t,
        neighbor_source_ids=source_of[flat_t],
        similarities=sim,
        weights=np.full(flat_t.size, 0.1, np.float32),
        missing=np.zeros(len(sets), bool) if missing is None else np.asarray(missing),
    )


def world(seed: int = 0, dtype=np.float64):
    """PLM and source matrices; shared target ids 0..149 with a permuted source id each.

    Rank deficiency is built in: PLM rows 5 == 6 (duplicate), 7 == 8 + 9 and
    10 == 2 * 11 - 12 (linear combinations; exact in float64 up to rounding).
    """
    rng = np.random.default_rng(seed)
    plm = rng.standard_normal((V_T, H_T))
    plm[5] = plm[6]
    plm[7] = plm[8] + plm[9]
    plm[10] = 2 * plm[11] - plm[12]
    source_of = np.full(V_T, -1, np.int64)
    source_of[:150] = rng.permutation(V_S)[:150]
    sources = {
        "input": rng.standard_normal((V_S, H_S)).astype(dtype),
        "output": rng.standard_normal((V_S, H_S)).astype(dtype),
    }
    return plm.astype(dtype), sources, source_of


def mixed_sets(rng: np.random.Generator) -> tuple[list[int], list[np.ndarray]]:
    """Neighbour sets of every awkward kind, for target tokens 150.."""
    sets = [
        np.array([3]),  # k = 1
        np.array([5]),
        np.arange(20, 20 + H_T + 9),  # k > h_t
        np.arange(30, 30 + H_T),  # k == h_t
        np.array([5, 6, 40]),  # duplicate PLM rows
        np.array([7, 8, 9, 41, 42]),  # a linear combination
        np.array([10, 11, 12, 5, 6, 7, 8, 9]),  # several dependencies at once
        np.array([43, 43, 44]),  # the same neighbour twice
        np.concatenate([np.arange(50, 50 + H_T + 3), [5, 6]]),  # k > h_t and duplicates
    ]
    for _ in range(40):  # random sizes, some with repeats
        k = int(rng.integers(1, 2 * H_T))
        sets.append(rng.choice(150, k, replace=bool(rng.random() < 0.3)))
    return list(range(150, 150 + len(sets))), sets


def naive(plm, source, source_of, t, nbrs, rcond=DEFAULT_RCOND, ridge=0.0):
    a = plm[nbrs].astype(np.float64)
    s = source[source_of[nbrs]].astype(np.float64)
    e = plm[t].astype(np.float64)
    if ridge > 0:
        return e @ a.T @ np.linalg.inv(a @ a.T + ridge * np.eye(len(nbrs))) @ s
    return e @ (np.linalg.pinv(a, rcond=rcond) @ s)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def check_against_naive(result, plm, sources, source_of, ids, sets, **kw) -> float:
    worst = 0.0
    for t, nbrs in zip(ids, sets, strict=True):
        j = int(np.searchsorted(result["target_ids"], t))
        assert result["target_ids"][j] == t
        for side in sources:
            want = naive(plm, sources[side], source_of, t, nbrs, **kw)
            worst = max(worst, rel_err(result[side][j], want))
    return worst


@pytest.mark.parametrize("batch_tokens", [4096, 5, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_naive_pinv(batch_tokens, dtype):
    plm, sources, source_of = world(1, dtype)
    ids, sets = mixed_sets(np.random.default_rng(2))
    nb = make_neighbors(ids, sets, source_of)
    res = salt_project(plm, sources, nb, device="cpu", batch_tokens=batch_tokens)
    assert (res["status"] == "projected").all()
    np.testing.assert_array_equal(res["k_used"], [len(s) for s in sets])
    assert res["stats"]["conditioning"]["n_rank_deficient"] >= 9  # exercises the cut-off
    assert res["stats"]["batches"] >= (len(sets) + batch_tokens - 1) // batch_tokens
    assert res["input"].dtype == np.float32 and res["output"].shape == (len(sets), H_S)
    assert check_against_naive(res, plm, sources, source_of, ids, sets) < TOL


def test_k1_is_a_scaled_copy():
    plm, sources, source_of = world(3)
    nb = make_neighbors([200, 201], [np.array([4]), np.array([5])], source_of)
    res = salt_project(plm, {"input": sources["input"]}, nb, device="cpu")
    for j, (t, n) in enumerate([(200, 4), (201, 5)]):
        scale = plm[t] @ plm[n] / (plm[n] @ plm[n])
        np.testing.assert_allclose(res["input"][j], scale * sources["input"][source_of[n]],
                                   rtol=1e-5, atol=1e-6)
    assert "output" not in res


def test_rcond_is_numpy_semantics_on_singular_values():
    """sigma = (1, 1e-3): rcond 1e-2 drops the second direction, 1e-4 keeps it, as numpy."""
    rng = np.random.default_rng(4)
    plm = rng.standard_normal((V_T, H_T))
    u, _ = np.linalg.qr(rng.standard_normal((2, 2)))
    v, _ = np.linalg.qr(rng.standard_normal((H_T, 2)))
    plm[[0, 1]] = u @ np.diag([1.0, 1e-3]) @ v.T
    _, sources, source_of = world(4)
    nb = make_neighbors([200], [np.array([0, 1])], source_of)
    outs = {}
    for rcond in (1e-2, 1e-4):
        res = salt_project(plm, sources, nb, rcond=rcond, device="cpu")
        want = naive(plm, sources["input"], source_of, 200, np.array([0, 1]), rcond=rcond)
        assert rel_err(res["input"][0], want) < TOL
        outs[rcond] = res["input"][0]
    assert rel_err(outs[1e-2], outs[1e-4]) > 1e-2  # the cut-off really changed the row


def test_rcond_below_what_the_gram_route_resolves_is_refused():
    plm, sources, source_of = world(5)
    nb = make_neighbors([200], [np.arange(10)], source_of)
    with pytest.raises(ValueError, match="rcond"):
        salt_project(plm, sources, nb, rcond=1e-15, device="cpu")
    with pytest.raises(ValueError, match="rcond"):
        salt_project(plm, sources, nb, dtype="float32", device="cpu")  # 1e-6 too small in f32
    res = salt_project(plm, sources, nb, dtype="float32", rcond=1e-2, device="cpu")
    assert res["stats"]["options"]["dtype"] == "float32"


def test_float32_rounded_dependencies_are_cut_like_numpy():
    """A row that is a sum computed in float32 is dependent only to ~1e-8: cut at 1e-6."""
    rng = np.random.default_rng(6)
    plm = rng.standard_normal((V_T, H_T)).astype(np.float32)
    plm[7] = plm[8] / 3 + plm[9] * np.float32(0.7)
    _, sources, source_of = world(6, np.float32)
    sets = [np.array([7, 8, 9]), np.array([7, 8, 9, 30, 31])]
    nb = make_neighbors([200, 201], sets, source_of)
    res = salt_project(plm, sources, nb, device="cpu")
    assert res["stats"]["conditioning"]["n_rank_deficient"] == 2
    assert check_against_naive(res, plm, sources, source_of, [200, 201], sets) < TOL


def test_ridge_matches_the_closed_form():
    plm, sources, source_of = world(7)
    ids, sets = mixed_sets(np.random.default_rng(8))
    nb = make_neighbors(ids, sets, source_of)
    for ridge in (1e-3, 0.5, 10.0):
        res = salt_project(plm, sources, nb, ridge=ridge, device="cpu", batch_tokens=8)
        assert check_against_naive(res, plm, sources, source_of, ids, sets, ridge=ridge) < TOL
    plain = salt_project(plm, sources, nb, device="cpu")
    assert rel_err(res["input"], plain["input"]) > 1e-3


def test_min_neighbors_and_missing_rows():
    plm, sources, source_of = world(9)
    sets = [np.array([1]), np.array([1, 2]), np.array([1, 2, 3]), np.array([], np.int64),
            np.array([4, 5, 6, 7])]
    ids = [210, 205, 220, 200, 230]
    nb = make_neighbors(ids, sets, source_of, missing=[False, False, False, True, False])
    res = salt_project(plm, sources, nb, min_neighbors=3, device="cpu")
    np.testing.assert_array_equal(res["target_ids"], [200, 205, 210, 220, 230])
    assert res["status"].tolist() == [
        "missing_vector", "too_few_neighbors", "too_few_neighbors", "projected", "projected"
    ]
    np.testing.assert_array_equal(res["k_used"], [0, 0, 0, 3, 4])
    for side in sources:
        assert not res[side][:3].any()
    assert check_against_naive(res, plm, sources, source_of, [220, 230], sets[2::2]) < TOL
    assert res["stats"]["counts"] == {
        "projected": 2, "missing_vector": 1, "too_few_neighbors": 2
    }
    default = salt_project(plm, sources, nb, device="cpu")
    assert default["status"].tolist().count("projected") == 4  # paper: any k >= 1


def test_max_neighbors_keeps_the_most_similar():
    plm, sources, source_of = world(10)
    rng = np.random.default_rng(11)
    ids, sets = mixed_sets(rng)
    nb = make_neighbors(ids, sets, source_of, seed=12)  # similarities in random order
    res = salt_project(plm, sources, nb, max_neighbors=4, device="cpu", batch_tokens=6)
    kept = []
    for i in range(len(sets)):
        row = nb.row(i)
        order = np.lexsort((nb.neighbor_target_ids[row], -nb.similarities[row]))[:4]
        kept.append(nb.neighbor_target_ids[row][np.sort(order)])
    np.testing.assert_array_equal(res["k_used"], [len(s) for s in kept])
    assert res["stats"]["n_capped"] == sum(len(s) > 4 for s in sets)
    assert check_against_naive(res, plm, sources, source_of, ids, kept) < TOL
    full = salt_project(plm, sources, nb, device="cpu")
    assert rel_err(full["input"], res["input"]) > 1e-2


def test_table_and_row_order_change_nothing():
    plm, sources, source_of = world(13)
    ids, sets = mixed_sets(np.random.default_rng(14))
    nb = make_neighbors(ids, sets, source_of)
    base = salt_project(plm, sources, nb, device="cpu", batch_tokens=7)
    perm = np.random.default_rng(15).permutation(len(sets))
    shuffled = make_neighbors([ids[i] for i in perm], [sets[i] for i in perm], source_of)
    res = salt_project(plm, sources, shuffled, device="cpu", batch_tokens=7)
    for key in ("target_ids", "input", "output", "k_used", "status"):
        np.testing.assert_array_equal(res[key], base[key])  # bit for bit
    rng = np.random.default_rng(16)
    inner = make_neighbors(ids, [rng.permutation(s) for s in sets], source_of)
    res = salt_project(plm, sources, inner, device="cpu", batch_tokens=7)
    for side in sources:
        assert rel_err(res[side], base[side]) < TOL


def test_padding_is_inert():
    """A token solved alone equals the same token padded inside a batch of larger k."""
    plm, sources, source_of = world(17)
    ids, sets = mixed_sets(np.random.default_rng(18))
    nb = make_neighbors(ids, sets, source_of)
    together = salt_project(plm, sources, nb, device="cpu", batch_tokens=len(sets))
    alone = salt_project(plm, sources, nb, device="cpu", batch_tokens=1)
    assert together["stats"]["padding_fraction"] > 0.3
    for side in sources:
        assert rel_err(together[side], alone[side]) < 1e-6


def test_errors_name_the_problem():
    plm, sources, source_of = world(19)
    nb = make_neighbors([200], [np.array([1, 2])], source_of)
    with pytest.raises(ValueError, match="outside the embedding matrix"):
        salt_project(plm[:2], sources, nb, device="cpu")
    with pytest.raises(ValueError, match="max_neighbors"):
        salt_project(plm, sources, nb, min_neighbors=3, max_neighbors=2, device="cpu")
    with pytest.raises(ValueError, match="keys"):
        salt_project(plm, {"lm_head": sources["input"]}, nb, device="cpu")


def test_write_coefficients_roundtrip(tmp_path):
    plm, sources, source_of = world(20)
    nb = make_neighbors([201, 200], [np.array([1, 2]), np.array([3])], source_of,
                        missing=[False, False])
    res = salt_coefficients(plm, nb, min_neighbors=2, device="cpu")
    write_coefficients(res, tmp_path / "p.safetensors", tmp_path / "p.json")
    back = load_file(tmp_path / "p.safetensors")
    assert back["status"].dtype == np.int8 and back["coefficients"].dtype == np.float64
    assert status_labels(back["status"]).tolist() == ["too_few_neighbors", "projected"]
    assert set(back) == {"target_ids", "k_used", "status", "source_ids", "coefficients", "rank",
                         "amplification"}
    np.testing.assert_array_equal(back["source_ids"], source_of[[1, 2]])  # table order
    np.testing.assert_array_equal(back["coefficients"], res["coefficients"])
    assert STATUSES[0] == "projected"


def old_rows(coefficients: dict, source: np.ndarray, batch_tokens: int) -> np.ndarray:
    """The rows as the fused solve-and-project code computed them, batch by batch: tokens
    sorted by (k, target id), padded to the batch's k with zero coefficients over the
    row's first neighbour, one float64 batched product, then float32."""
    k = coefficients["k_used"].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(k)])
    todo = np.flatnonzero(k > 0)
    todo = todo[np.lexsort((coefficients["target_ids"][todo], k[todo]))]
    rows = np.zeros((k.size, source.shape[1]), np.float32)
    for b in range(0, todo.size, batch_tokens):
        batch = todo[b : b + batch_tokens]
        k_max = int(k[batch].max())
        coef = np.zeros((batch.size, 1, k_max))
        ids = np.empty((batch.size, k_max), np.int64)
        for j, t in enumerate(batch):
            entries = slice(starts[t], starts[t + 1])
            coef[j, 0, : k[t]] = coefficients["coefficients"][entries]
            ids[j] = coefficients["source_ids"][starts[t]]
            ids[j, : k[t]] = coefficients["source_ids"][entries]
        gathered = torch.from_numpy(source[ids.reshape(-1)].astype(np.float64))
        out = torch.from_numpy(coef) @ gathered.view(batch.size, k_max, -1)
        rows[batch] = out.squeeze(1).to(torch.float32).numpy()
    return rows


@pytest.mark.parametrize("batch_tokens", [4096, 7, 1])
def test_coefficients_then_apply_is_the_old_arithmetic(tmp_path, batch_tokens):
    """Written, read back and applied as the transfer job does, the coefficients give the
    fused computation's rows bit for bit, and numpy's pinv rows to tolerance."""
    plm, sources, source_of = world(24, np.float32)
    ids, sets = mixed_sets(np.random.default_rng(25))
    nb = make_neighbors(ids, sets, source_of, missing=[i % 11 == 0 for i in range(len(sets))])
    coefs = salt_coefficients(plm, nb, min_neighbors=2, device="cpu", batch_tokens=batch_tokens)
    write_coefficients(coefs, tmp_path / "p.safetensors", tmp_path / "p.json")
    back = read_coefficients(tmp_path / "p.safetensors", n_source_rows=V_S)
    projected = coefs["status"] == "projected"
    assert 0 < projected.sum() < len(sets)
    together = salt_project(plm, sources, nb, min_neighbors=2, device="cpu",
                            batch_tokens=batch_tokens)
    for side, source in sources.items():
        rows = apply_coefficients(back, source, batch_tokens=batch_tokens, batch_bytes=2**40)
        np.testing.assert_array_equal(rows, old_rows(back, source, batch_tokens))
        np.testing.assert_array_equal(rows, apply_coefficients(coefs, source))
        np.testing.assert_array_equal(rows, together[side])
        assert not rows[~projected].any()
    kept = [s for s, p in zip(sets, nb.missing, strict=True) if not p and len(s) >= 2]
    kept_ids = [t for t, s, p in zip(ids, sets, nb.missing, strict=True) if not p and len(s) >= 2]
    assert check_against_naive(together, plm, sources, source_of, kept_ids, kept) < TOL


def test_stale_coefficients_are_refused_naming_the_file(tmp_path):
    plm, sources, source_of = world(26)
    nb = make_neighbors([200, 201], [np.array([1, 2]), np.array([3, 4, 5])], source_of)
    write_coefficients(salt_coefficients(plm, nb, device="cpu"), tmp_path / "p.safetensors",
                       tmp_path / "p.json")
    n_rows = int(source_of[[1, 2, 3, 4, 5]].max())  # one row too few for the largest id
    with pytest.raises(ValueError, match=r"p\.safetensors.*stale.*salt_regression"):
        read_coefficients(tmp_path / "p.safetensors", n_source_rows=n_rows)
    back = read_coefficients(tmp_path / "p.safetensors")
    with pytest.raises(ValueError, match="outside the embedding matrix"):
        apply_coefficients(back, sources["input"][:n_rows])


def test_auto_device():
    plm, sources, source_of = world(21)
    nb = make_neighbors([200], [np.array([1, 2, 3])], source_of)
    res = salt_project(plm, sources, nb)
    assert res["stats"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    plm, sources, source_of = world(22, np.float32)
    ids, sets = mixed_sets(np.random.default_rng(23))
    nb = make_neighbors(ids, sets, source_of)
    cpu = salt_project(plm, sources, nb, device="cpu", batch_tokens=9)
    gpu = salt_project(plm, sources, nb, device="cuda", batch_tokens=9)
    assert gpu["stats"]["device"].startswith("cuda")
    for side in sources:
        assert rel_err(gpu[side], cpu[side]) < TOL
    assert check_against_naive(gpu, plm, sources, source_of, ids, sets) < TOL


def test_sides_are_the_methods_sides():
    assert regression.SIDES == METHOD_SIDES
