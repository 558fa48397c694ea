"""The salt and lstsq transfer methods."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer.methods import lstsq as lstsq_module
from embtransfer.transfer.methods import salt as salt_module  # noqa: F401  (registers "salt")
from embtransfer.transfer.methods.base import TransferInputs, get_method
from embtransfer.transfer.regression import read_coefficients, salt_project, write_coefficients

V_T, V_S, H_T, H_S = 120, 90, 8, 16
SHARED = 50


def make_inputs(seed: int = 0, tied: bool = False, overlap_order=None) -> TransferInputs:
    rng = np.random.default_rng(seed)
    shared_t = rng.choice(V_T, SHARED, replace=False)
    shared_s = rng.choice(V_S, SHARED, replace=False)
    overlap = pd.DataFrame({"target_id": shared_t, "source_id": shared_s, "how": "exact"})
    if overlap_order is not None:
        overlap = overlap.iloc[overlap_order].reset_index(drop=True)
    return TransferInputs(
        source_input=rng.standard_normal((V_S, H_S)).astype(np.float32),
        source_output=None if tied else rng.standard_normal((V_S, H_S)).astype(np.float32),
        source_vocab=pd.DataFrame({"id": np.arange(V_S)}),
        target_vocab=pd.DataFrame({"id": np.arange(V_T)}),
        overlap=overlap,
        seed=seed,
        plm_input=rng.standard_normal((V_T, H_T)).astype(np.float32),
    )


def neighbor_table(inputs: TransferInputs, seed: int = 1) -> Neighbors:
    """Random neighbour sets over the shared tokens; a few missing / tiny rows."""
    rng = np.random.default_rng(seed)
    shared_t, shared_s = inputs.shared()
    source_of = dict(zip(shared_t.tolist(), shared_s.tolist(), strict=True))
    others = np.setdiff1d(np.arange(V_T), shared_t)
    sets, missing = [], []
    for i, _ in enumerate(others):
        if i % 9 == 0:
            sets.append(np.zeros(0, np.int64))
            missing.append(True)
            continue
        k = 1 if i % 7 == 0 else int(rng.integers(2, 12))
        sets.append(rng.choice(shared_t, k, replace=False))
        missing.append(False)
    flat = np.concatenate(sets).astype(np.int64)
    return Neighbors(
        target_ids=others.astype(np.int64),
        offsets=np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64),
        neighbor_target_ids=flat,
        neighbor_source_ids=np.array([source_of[t] for t in flat.tolist()], np.int64),
        similarities=rng.random(flat.size).astype(np.float32),
        weights=np.full(flat.size, 0.1, np.float32),
        missing=np.array(missing),
    )


def project(inputs: TransferInputs, **options) -> dict:
    matrices = {"input": inputs.source_input}
    if inputs.source_output is not None:
        matrices["output"] = inputs.source_output
    return salt_project(inputs.plm_input, matrices, neighbor_table(inputs), device="cpu", **options)


def run(name: str, inputs: TransferInputs, side: str, **params):
    spec = get_method(name)
    return spec.fn(inputs, {**spec.defaults, **params}, side)


# -- salt -----------------------------------------------------------------------------


def test_salt_assembles_copied_projected_and_fallback_rows(tmp_path):
    inputs = make_inputs()
    result = project(inputs, min_neighbors=2)
    write_coefficients(result, tmp_path / "p.safetensors", tmp_path / "p.json")
    # as the transfer job reads it
    inputs.projected = read_coefficients(tmp_path / "p.safetensors", n_source_rows=V_S)
    shared_t, shared_s = inputs.shared()
    for side in ("input", "output"):
        out = run("salt", inputs, side)
        np.testing.assert_array_equal(out.rows[shared_t], inputs.source_matrix(side)[shared_s])
        assert (out.how[shared_t] == "copied").all()
        done = result["status"] == "projected"
        ids = result["target_ids"]
        np.testing.assert_array_equal(out.rows[ids[done]], result[side][done])
        assert (out.how[ids[done]] == "projected").all()
        for label in ("missing_vector", "too_few_neighbors"):
            sel = ids[result["status"] == label]
            assert sel.size and (out.how[sel] == label).all()
            assert (np.abs(out.rows[sel]).sum(axis=1) > 0).all()  # drawn, not left zero
        counts = out.stats["counts"]
        assert counts["copied"] == SHARED
        assert counts["projected"] == int(done.sum())
        assert counts["missing_vector"] == int((result["status"] == "missing_vector").sum())
        assert sum(counts.values()) == V_T and "unset" not in counts


def test_salt_fallbacks_are_reproducible_and_per_side():
    inputs = make_inputs(3)
    inputs.projected = project(inputs, min_neighbors=3)
    fallback = np.isin(run("salt", inputs, "input").how, ["missing_vector", "too_few_neighbors"])
    assert fallback.sum() >= 5
    a = run("salt", inputs, "input").rows[fallback]
    b = run("salt", inputs, "input").rows[fallback]
    c = run("salt", inputs, "output").rows[fallback]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).min() > 0  # a different stream, not the same draws
    other = make_inputs(3)
    other.seed = 4
    other.projected = inputs.projected
    assert not np.allclose(run("salt", other, "input").rows[fallback], a)
    # drawn around the source rows' per-dimension mean and spread
    assert np.abs(a.mean() - inputs.source_input.mean()) < 0.5
    assert 0.5 < a.std() / inputs.source_input.std() < 2.0


def test_salt_labels_tokens_missing_from_the_table():
    inputs = make_inputs(5)
    proj = project(inputs)
    keep = np.arange(proj["target_ids"].size) != 3
    entries = np.repeat(keep, proj["k_used"])  # the token's coefficients go with it
    inputs.projected = {k: proj[k][keep] for k in ("target_ids", "k_used", "status")}
    inputs.projected.update({k: proj[k][entries] for k in ("source_ids", "coefficients")})
    out = run("salt", inputs, "input")
    assert out.how[proj["target_ids"][3]] == "not_in_table"
    assert out.stats["counts"]["not_in_table"] == 1


def test_salt_refuses_stale_projections():
    inputs = make_inputs(6)
    proj = project(inputs)
    stale = dict(proj)
    stale["target_ids"] = proj["target_ids"].copy()
    stale["target_ids"][0] = inputs.shared()[0][0]
    inputs.projected = stale
    with pytest.raises(ValueError, match="stale"):
        run("salt", inputs, "input")
    other_source = dict(proj, source_ids=proj["source_ids"] + V_S)  # made for a larger source
    inputs.projected = other_source
    with pytest.raises(ValueError, match="outside the embedding matrix"):
        run("salt", inputs, "output")
    inputs.projected = None
    with pytest.raises(ValueError, match="coefficients"):
        run("salt", inputs, "input")


def test_salt_applies_the_coefficients_to_either_side_of_a_tied_or_untied_source():
    for tied in (False, True):
        inputs = make_inputs(9, tied=tied)
        proj = project(inputs)
        inputs.projected = {k: v for k, v in proj.items() if k not in ("input", "output")}
        done = proj["target_ids"][proj["status"] == "projected"]
        for side in ("input",) + (() if tied else ("output",)):
            out = run("salt", inputs, side)
            np.testing.assert_array_equal(
                out.rows[done], proj[side][proj["status"] == "projected"]
            )


# -- lstsq ----------------------------------------------------------------------------


def reference_lstsq(inputs: TransferInputs, side: str) -> np.ndarray:
    shared_t, shared_s = inputs.shared()
    x = np.hstack([inputs.plm_input[shared_t].astype(np.float64), np.ones((SHARED, 1))])
    y = inputs.source_matrix(side)[shared_s].astype(np.float64)
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    others = np.setdiff1d(np.arange(V_T), shared_t)
    return others, np.hstack([inputs.plm_input[others], np.ones((others.size, 1))]) @ coef


@pytest.mark.parametrize("side", ["input", "output"])
def test_lstsq_equals_numpy_on_the_augmented_problem(side):
    inputs = make_inputs(7)
    out = run("lstsq", inputs, side)
    others, want = reference_lstsq(inputs, side)
    np.testing.assert_allclose(out.rows[others], want, rtol=1e-5, atol=1e-5)
    assert (out.how[others] == "projected").all()
    shared_t, shared_s = inputs.shared()
    np.testing.assert_array_equal(out.rows[shared_t], inputs.source_matrix(side)[shared_s])
    assert (out.how[shared_t] == "copied").all()
    assert out.stats["rank"] == H_T + 1 and out.stats["n_fit"] == SHARED
    assert out.stats["counts"] == {"copied": SHARED, "projected": V_T - SHARED}


def test_lstsq_sides_are_fitted_separately():
    inputs = make_inputs(8)
    a = run("lstsq", inputs, "input").rows
    b = run("lstsq", inputs, "output").rows
    assert not np.allclose(a, b)


def test_lstsq_bias_matters():
    inputs = make_inputs(9)
    inputs.source_input = inputs.source_input + 5.0  # a large offset only the bias can fit
    with_bias = run("lstsq", inputs, "input")
    without = run("lstsq", inputs, "input", bias=False)
    assert with_bias.stats["relative_residual"] < without.stats["relative_residual"]


def test_lstsq_ridge_matches_the_closed_form():
    inputs = make_inputs(10)
    ridge = 3.0
    shared_t, shared_s = inputs.shared()
    x = np.hstack([inputs.plm_input[shared_t].astype(np.float64), np.ones((SHARED, 1))])
    y = inputs.source_input[shared_s].astype(np.float64)
    penalty = np.diag([ridge] * H_T + [0.0])  # the bias is not penalised
    coef = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    others = np.setdiff1d(np.arange(V_T), shared_t)
    want = np.hstack([inputs.plm_input[others], np.ones((others.size, 1))]) @ coef
    out = run("lstsq", inputs, "input", ridge=ridge)
    np.testing.assert_allclose(out.rows[others], want, rtol=1e-5, atol=1e-5)
    plain = run("lstsq", inputs, "input")
    assert not np.allclose(plain.rows[others], out.rows[others], atol=1e-3)


def test_lstsq_overlap_order_changes_nothing():
    base = run("lstsq", make_inputs(11), "input")
    perm = np.random.default_rng(0).permutation(SHARED)
    shuffled = run("lstsq", make_inputs(11, overlap_order=perm), "input")
    np.testing.assert_array_equal(shuffled.rows, base.rows)
    np.testing.assert_array_equal(shuffled.how, base.how)


def test_lstsq_underdetermined_fit_is_min_norm():
    x = np.random.default_rng(12).standard_normal((4, 6))
    y = np.random.default_rng(13).standard_normal((4, 3))
    coef, stats = lstsq_module.fit_lstsq(x, y)
    want = np.linalg.pinv(np.hstack([x, np.ones((4, 1))])) @ y
    np.testing.assert_allclose(coef, want, atol=1e-10)
    assert stats["rank"] == 4


def test_lstsq_needs_the_plm():
    inputs = make_inputs(14)
    inputs.plm_input = None
    with pytest.raises(ValueError, match="plm_input"):
        run("lstsq", inputs, "input")
