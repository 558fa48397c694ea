"""OMP (embtransfer.transfer.omp_solver and the ``omp`` methods) against a slow, obviously
correct OMP written out here; the comparison with mergekit's own ``batch_omp`` is in
tests/test_reference_packages.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from embtransfer.transfer import omp_solver
from embtransfer.transfer.methods.base import TransferInputs, get_method
from embtransfer.transfer.omp_solver import (
    _nonnegative_max,
    _residuals,
    _Screen,
    omp_coefficients,
    omp_select,
    omp_select_at,
)


def slow_omp(x: np.ndarray, d: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
    """Textbook OMP: pick argmax |d_j . r| among rows not yet picked, refit x by
    least squares on all picked rows, recompute the residual."""
    picked: list[int] = []
    r = x.copy()
    c = np.zeros(0)
    for _ in range(min(k, d.shape[0])):
        score = np.abs(d @ r)
        score[picked] = -1
        picked.append(int(np.argmax(score)))
        c, *_ = np.linalg.lstsq(d[picked].T, x, rcond=None)
        r = x - d[picked].T @ c
    return picked, c


def cosine_topk_lstsq(x: np.ndarray, d: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
    """The stand-in the tests must reject: least squares on the k most cosine-similar rows."""
    cos = (d @ x) / np.linalg.norm(d, axis=1) / np.linalg.norm(x)
    picked = [int(i) for i in np.argsort(-cos)[:k]]
    c, *_ = np.linalg.lstsq(d[picked].T, x, rcond=None)
    return picked, c


def correlated_rows(rng: np.random.Generator, n: int, h: int) -> np.ndarray:
    """Rows in clusters of near-duplicates with spread norms: the most cosine-similar rows
    of a target are redundant, so OMP's greedy residual choice picks others."""
    centres = rng.standard_normal((n // 4, h))
    rows = np.repeat(centres, 4, axis=0) + 0.15 * rng.standard_normal((n // 4 * 4, h))
    return rows * rng.uniform(0.3, 3.0, (rows.shape[0], 1))


def test_omp_equals_slow_omp_on_random_rows() -> None:
    rng = np.random.default_rng(0)
    d = rng.standard_normal((300, 48)) * rng.uniform(0.2, 2.0, (300, 1))
    x = rng.standard_normal((40, 48))
    picked, coef, used = omp_select(x, d, 16)
    assert (used == 16).all()
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, 16)
        assert picked[i].tolist() == ref_picked  # the same rows in the same order
        np.testing.assert_allclose(coef[i], ref_c, rtol=1e-8, atol=1e-10)


def test_omp_is_not_cosine_topk() -> None:
    """Where the top-k cosine neighbours are not OMP's picks, the fit must be OMP's:
    a least-squares fit over the cosine top k fails this test."""
    rng = np.random.default_rng(1)
    d = correlated_rows(rng, 400, 32)
    x = d[rng.choice(400, (30, 3))].sum(axis=1) + 0.3 * rng.standard_normal((30, 32))
    k = 8
    picked, coef, _ = omp_select(x, d, k)
    differ = 0
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, k)
        cos_picked, _ = cosine_topk_lstsq(x[i], d, k)
        differ += set(cos_picked) != set(ref_picked)
        assert set(picked[i].tolist()) == set(ref_picked)
        ours = coef[i] @ d[picked[i]]
        np.testing.assert_allclose(ours, np.asarray(ref_c) @ d[ref_picked], rtol=1e-8)
    # the inputs do tell the two apart (otherwise the test above proves nothing)
    assert differ >= x.shape[0] // 2


def test_float32_scores_take_the_float64_choice_on_near_ties() -> None:
    """Two candidates whose scores tie to float32 precision: the float64 winner is picked."""
    rng = np.random.default_rng(2)
    h = 64
    a = rng.standard_normal(h)
    a[0] = abs(a[0]) + 0.5  # so b's larger first entry makes its score the larger one
    b = a.copy()
    # Below half a float32 ulp of a[0] (6e-8): a and b are the same float32 row, so their
    # float32 scores tie exactly whatever order a BLAS kernel sums in, and |x . b| exceeds
    # |x . a| by ~1e-11 relative, which float64 tells apart.
    b[0] += 1e-9
    d = np.vstack([a, b, rng.standard_normal((20, h)) * 0.01])
    x = a + 1e-3 * np.eye(h)[0]
    assert np.array_equal(np.float32(a), np.float32(b))  # a float32 tie
    assert abs(x @ b) > abs(x @ a)
    picked, _, _ = omp_select(x[None], d, 1)
    assert picked[0, 0] == int(np.argmax(np.abs(d @ x))) == 1


def test_early_stop_when_k_exceeds_the_width() -> None:
    rng = np.random.default_rng(3)
    d = rng.standard_normal((50, 6))
    x = rng.standard_normal((5, 6))
    picked, coef, used = omp_select(x, d, 20)
    assert (used == 6).all() and (picked[:, 6:] == -1).all() and (coef[:, 6:] == 0).all()
    for i in range(5):  # six independent rows in six dimensions reproduce x exactly
        np.testing.assert_allclose(coef[i, :6] @ d[picked[i, :6]], x[i], rtol=1e-9, atol=1e-9)


def test_cholesky_path_near_the_width() -> None:
    """k close to the width h: the Cholesky factor of G[I, I] grows to 30 x 30 over nearly
    dependent picks; picks and coefficients are still the textbook's."""
    rng = np.random.default_rng(5)
    d = rng.standard_normal((200, 32)) * rng.uniform(0.1, 3.0, (200, 1))
    x = rng.standard_normal((12, 32)) * 5.0
    picked, coef, used = omp_select(x, d, 30)
    assert (used == 30).all()
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, 30)
        assert picked[i].tolist() == ref_picked
        np.testing.assert_allclose(coef[i], ref_c, rtol=1e-7, atol=1e-9)


def test_picks_up_to_the_width_are_the_textbooks_scored_densely(monkeypatch) -> None:
    """k = h over many candidates: near the width every score is within the screen's bound,
    so the last steps score every candidate in float64 (Screen.dense_pick); the picks and
    coefficients are still the textbook's."""
    rng = np.random.default_rng(8)
    d = rng.standard_normal((600, 24))
    x = rng.standard_normal((10, 24))
    dense = []
    original = _Screen.dense_pick
    monkeypatch.setattr(_Screen, "dense_pick",
                        lambda self, *a: dense.append(1) or original(self, *a))
    picked, coef, used = omp_select(x, d, 24)
    assert dense  # the dense path ran
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, int(used[i]))
        assert picked[i, : used[i]].tolist() == ref_picked
        np.testing.assert_allclose(coef[i, : used[i]], ref_c, rtol=1e-6, atol=1e-8)


def test_dependent_candidates_stop_early() -> None:
    """Candidates spanning 3 of 8 dimensions: after 3 picks every candidate is dependent on
    the picks (scores 0 to rounding), so the token stops with the least-squares fit on the
    span, as the textbook's first 3 picks, though its residual is not zero."""
    rng = np.random.default_rng(6)
    basis = rng.standard_normal((3, 8))
    d = rng.standard_normal((40, 3)) @ basis
    x = rng.standard_normal((6, 8))
    picked, coef, used = omp_select(x, d, 10)
    assert (used == 3).all() and (picked[:, 3:] == -1).all() and (coef[:, 3:] == 0).all()
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, 3)
        assert picked[i, :3].tolist() == ref_picked
        np.testing.assert_allclose(coef[i, :3], ref_c, rtol=1e-8, atol=1e-10)


def test_exact_fit_stops_at_a_vanishing_residual() -> None:
    """A token equal to a candidate is fitted by that one row; batches of one token give
    the same result as one batch of all."""
    rng = np.random.default_rng(7)
    d = rng.standard_normal((60, 16))
    x = np.vstack([d[7] * 2.0, rng.standard_normal((3, 16))])
    picked, coef, used = omp_select(x, d, 8)
    assert used[0] == 1 and picked[0, 0] == 7 and coef[0, 0] == pytest.approx(2.0)
    assert (used[1:] == 8).all()
    one = omp_select(x, d, 8, batch_bytes=1)
    np.testing.assert_array_equal(one[0], picked)
    np.testing.assert_allclose(one[1], coef, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("ks", [(5, 12), (12, 5, 12), (30, 4)])
def test_one_solve_gives_each_supports_omp(ks) -> None:
    """The solve to the largest k, read after fewer steps, is the solve to that k: the same
    picks in the same order, the same least-squares coefficients, the same stops (a token
    equal to a candidate stops after it; k beyond the 24 candidates is capped), and the
    textbook OMP's."""
    rng = np.random.default_rng(3)
    d = rng.standard_normal((24, 40)) * rng.uniform(0.5, 2.0, (24, 1))
    x = np.vstack([rng.standard_normal((9, 40)), 2.0 * d[17]])
    shared = omp_select_at(x, d, ks)
    assert set(shared) == set(ks)
    for k in ks:
        picked, coef, used = shared[k]
        alone = omp_select(x, d, k)
        np.testing.assert_array_equal(picked, alone[0])
        np.testing.assert_allclose(coef, alone[1], rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(used, alone[2])
        assert used[-1] == 1 and picked.shape[1] == min(k, 24)
        ref_picked, ref_c = slow_omp(x[0], d, k)
        assert picked[0].tolist() == ref_picked
        np.testing.assert_allclose(coef[0], ref_c, rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- the method


def vocab(n: int, special: tuple[int, ...] = ()) -> pd.DataFrame:
    kind = ["special" if i in special else "text" for i in range(n)]
    return pd.DataFrame({"id": np.arange(n), "kind": kind})


def make_inputs(h_t: int = 16, untied_plm: bool = False) -> TransferInputs:
    rng = np.random.default_rng(4)
    n_t, n_s, n_shared = 60, 80, 40
    shared_t = np.arange(n_shared)
    shared_s = rng.permutation(n_s)[:n_shared]
    plm = rng.standard_normal((n_t, h_t)).astype(np.float32)
    plm[45] = 0  # a token with a zero PLM row: SALT's fallback
    head = rng.standard_normal((n_t, h_t)).astype(np.float32)
    head[45] = 0
    return TransferInputs(
        source_input=rng.standard_normal((n_s, 12)).astype(np.float32),
        source_output=rng.standard_normal((n_s, 12)).astype(np.float32),
        source_vocab=vocab(n_s),
        target_vocab=vocab(n_t, special=(0,)),
        overlap=pd.DataFrame({"target_id": shared_t, "source_id": shared_s, "how": "exact"}),
        seed=0,
        plm_input=plm,
        plm_output=head if untied_plm else None,
    )


def expected_row(
    inputs: TransferInputs, donor: np.ndarray, side: str, t: int, k: int
) -> np.ndarray:
    """The slow OMP's row of token t: its coefficients on the candidates' source rows."""
    cand_t = np.arange(1, 40)  # shared minus the special token 0
    cand_s = inputs.overlap["source_id"].to_numpy()[1:40]
    picked, c = slow_omp(donor[t].astype(np.float64), donor[cand_t].astype(np.float64), k)
    return np.asarray(c) @ inputs.source_matrix(side)[cand_s[picked]].astype(np.float64)


@pytest.mark.parametrize("untied_plm", [False, True])
def test_method_rows(untied_plm: bool) -> None:
    inputs = make_inputs(untied_plm=untied_plm)
    method = get_method("omp")
    params = {**method.defaults, "k": 5}
    for side in ("input", "output"):
        result = method.fn(inputs, params, side)
        source = inputs.source_matrix(side)
        shared_t, shared_s = inputs.shared()
        np.testing.assert_array_equal(result.rows[shared_t], source[shared_s])
        assert result.stats["counts"] == {"copied": 40, "projected": 19, "zero_row": 1}
        donor = inputs.plm_output if side == "output" and untied_plm else inputs.plm_input
        for t in (40, 50, 59):
            np.testing.assert_allclose(
                result.rows[t], expected_row(inputs, donor, side, t, 5), rtol=1e-5, atol=1e-5
            )
        # the zero row is drawn, not fitted: not the zero combination
        assert result.how[45] == "zero_row" and np.abs(result.rows[45]).sum() > 0


def test_special_tokens_are_no_candidates() -> None:
    inputs = make_inputs()
    inputs.plm_input[41] = inputs.plm_input[0]  # only the special token 0 fits it at once
    result = get_method("omp").fn(inputs, {"k": 1, "centered": False}, "input")
    row = expected_row(inputs, inputs.plm_input, "input", 41, 1)
    np.testing.assert_allclose(result.rows[41], row, rtol=1e-5, atol=1e-6)


def test_centered_fit_is_affine() -> None:
    """Source = donor: with k >= width + 1 the centred (affine) fit reproduces the row."""
    inputs = make_inputs(h_t=12)
    plm = inputs.plm_input
    source = np.zeros((80, 12), np.float32)
    shared_t, shared_s = inputs.shared()
    source[shared_s] = plm[shared_t]
    inputs.source_input = source
    result = get_method("omp").fn(inputs, {"k": 20, "centered": True}, "input")
    np.testing.assert_allclose(result.rows[40:45], plm[40:45], rtol=1e-4, atol=1e-4)


def test_omp_salt_k_reads_salts_median() -> None:
    inputs = make_inputs()
    inputs.projected = {
        "k_used": np.array([2, 3, 3, 9, 0]),
        "status": np.array(["projected"] * 4 + ["missing_vector"], object),
    }
    result = get_method("omp_salt_k").fn(inputs, {"centered": False}, "input")
    assert result.stats["k"] == 3


@pytest.mark.parametrize("tied_source", [False, True])
def test_the_shared_solve_fits_what_the_transfer_reads(tied_source, tmp_path) -> None:
    """rule omp_solve's fits: omp's k and SALT's median for the input side, and for the
    PLM's untied head only where the source's output side is transferred (a tied source
    has none); written and read back, each method's rows are those of its own solve."""
    from embtransfer.transfer.methods.omp import read_fits, solve_shared, write_fits

    def inputs() -> TransferInputs:
        made = make_inputs(untied_plm=True)
        made.projected = {"k_used": np.array([2, 3, 3, 9]),
                          "status": np.array(["projected"] * 4, object)}
        if tied_source:
            made.source_output = None
        return made

    fits = solve_shared(inputs(), 5, False)
    donors = ["plm_input"] + ([] if tied_source else ["plm_output"])
    assert sorted(fits) == sorted(("omp", d, k, False) for d in donors for k in (3, 5))
    write_fits(tmp_path / "fits.safetensors", fits)
    for method, params in (("omp", {"k": 5, "centered": False}),
                           ("omp_salt_k", {"centered": False})):
        shared = inputs()
        read_fits(tmp_path / "fits.safetensors", shared)
        for side in ["input"] + ([] if tied_source else ["output"]):
            alone = get_method(method).fn(inputs(), params, side)
            got = get_method(method).fn(shared, params, side)
            np.testing.assert_array_equal(got.how, alone.how)
            np.testing.assert_allclose(got.rows, alone.rows, rtol=1e-6, atol=1e-7)


def test_coefficients_keep_salts_format() -> None:
    inputs = make_inputs()
    fit = omp_coefficients(
        inputs.plm_input,
        np.arange(40, 60),
        np.arange(1, 40),
        inputs.overlap["source_id"].to_numpy()[1:40],
        k=4,
    )
    assert fit["k_used"].sum() == fit["coefficients"].size == fit["source_ids"].size
    assert fit["k_used"].tolist() == [4] * 5 + [0] + [4] * 14
    assert fit["stats"]["n_zero_row"] == 1


# ----------------------------------------------------------------------------- screening


@pytest.mark.parametrize("score_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("gram_bytes", [2**30, 0])
def test_screened_picks_equal_float64_omp_on_near_ties(score_dtype, gram_bytes) -> None:
    """Candidates in near-duplicate pairs (scores equal to ~1e-9, far below bfloat16's
    resolution) and exact duplicates: the low-precision screen still yields the float64
    textbook's picks, in order, with or without the Gram matrix."""
    rng = np.random.default_rng(8)
    base = rng.standard_normal((150, 64)) * rng.uniform(0.3, 2.0, (150, 1))
    d = np.vstack([base, base * (1 + 1e-9), base[:10]])  # 310 rows
    d[150:300] += 1e-9 * rng.standard_normal((150, 64))
    x = np.vstack([rng.standard_normal((20, 64)), base[:5] + 1e-3 * rng.standard_normal((5, 64))])
    picked, coef, used = omp_select(x, d, 12, score_dtype=score_dtype, gram_bytes=gram_bytes)
    assert (used == 12).all()
    for i in range(x.shape[0]):
        ref_picked, ref_c = slow_omp(x[i], d, 12)
        assert picked[i].tolist() == ref_picked
        np.testing.assert_allclose(coef[i], ref_c, rtol=1e-6, atol=1e-8)


def test_screen_error_bound_holds() -> None:
    """The bfloat16 product's scores against float64's: every error within the bound
    the screen's cut assumes (rho |d_j| + delta_j + ... + u' |s~_j|)."""
    rng = np.random.default_rng(9)
    d = torch.from_numpy(rng.standard_normal((2000, 768)) * rng.uniform(0.5, 1.5, (2000, 1)))
    screen = _Screen(d, torch.bfloat16)
    r = torch.from_numpy(rng.standard_normal((64, 768)))
    r32 = r.to(torch.float32)
    eps = (r32.double() - r).norm(dim=1)
    scores, rho, _ = screen.scores(r32, eps)
    exact = (r / r.norm(dim=1, keepdim=True)) @ (d / d.norm(dim=1).max()).T
    err = (scores[:, :2000].double() - exact.abs()).abs()
    bound = rho[:, None] * screen.per_rho + screen.fixed + screen.u * scores[:, :2000].double()
    assert (err <= bound).all()
    assert (err / bound).max() < 0.5  # the bound is loose, not tight to the last digit


# ------------------------------------------------------------- incremental factor, residual


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sparse_residuals_equal_dense(dtype) -> None:
    """``_residuals`` (a CSR product over the candidates) against gathered rows, with the
    stopped slots (-1, coefficient 0) a stopped token has, within the float32 bound the
    screen assumes ((t + 6) roundings of |x| + sum |c_i| |d_i|)."""
    rng = np.random.default_rng(10)
    d = torch.from_numpy(rng.standard_normal((500, 96)))
    x = torch.from_numpy(rng.standard_normal((30, 96)))
    picked = torch.stack([torch.randperm(500)[:7] for _ in range(30)])
    coef = torch.from_numpy(rng.standard_normal((30, 7)))
    picked[3:6, 4:] = -1  # stopped after 4 picks
    coef[3:6, 4:] = 0.0
    got = _residuals(x, coef, picked, d.to(dtype)).double()
    want = x - torch.einsum("bt,bth->bh", coef, d[picked.clamp(min=0)])
    mass = x.norm(dim=1) + (coef.abs() * d.norm(dim=1)[picked.clamp(min=0)]).sum(dim=1)
    unit = 2.0**-24 if dtype == torch.float32 else 2.0**-53
    assert ((got - want).norm(dim=1) <= 13 * unit * mass).all()


@pytest.mark.parametrize("gram_bytes", [2**30, 0])
def test_incremental_inverse_factor_equals_a_fresh_solve(gram_bytes) -> None:
    """The coefficients from L^{-1} grown a row per pick (rank-1 updates of c = L^{-T} y)
    against a fresh least-squares solve on the same picks, on correlated rows (near-
    duplicates, spread norms: a worse-conditioned G[I, I] than random rows give)."""
    rng = np.random.default_rng(11)
    d = correlated_rows(rng, 400, 64)
    x = rng.standard_normal((25, 64))
    picked, coef, used = omp_select(x, d, 40, gram_bytes=gram_bytes)
    for i in range(x.shape[0]):
        rows = d[picked[i, : used[i]]]
        fresh = np.linalg.solve(rows @ rows.T, rows @ x[i])
        np.testing.assert_allclose(coef[i, : used[i]], fresh, rtol=1e-7, atol=1e-9)


def test_threads_run_batches_side_by_side_with_the_same_results() -> None:
    """With torch at 2 threads the batches run in 2 single-threaded worker threads: the
    same picks and coefficients as one thread, and torch's thread count restored."""
    rng = np.random.default_rng(12)
    d = rng.standard_normal((900, 80)) * rng.uniform(0.5, 1.5, (900, 1))
    x = rng.standard_normal((300, 80))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = omp_select(x, d, 20)
        torch.set_num_threads(2)
        two = omp_select(x, d, 20, batch_bytes=60 * 900 * 3)  # several batches a thread
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_maximum_on_bits_is_the_float_maximum(dtype) -> None:
    """The screen's block maxima, taken on the scores' bits, equal the float maximum: on
    values over many binades, with zeros, subnormals and exact ties among them."""
    rng = np.random.default_rng(3)
    shape = (64, 32, 50)
    scale = 10.0 ** rng.integers(-45, 5, shape)
    values = torch.from_numpy(rng.uniform(0, 1, shape) * scale).to(dtype)
    values[0] = 0.0
    values[1, :, :5] = torch.finfo(dtype).tiny / 4  # subnormal
    values[2] = values[2, :1]  # every row of the block equal
    expected = values.float().amax(dim=1)
    assert torch.equal(_nonnegative_max(values, dim=1).float(), expected)
    assert torch.equal(_nonnegative_max(values, dim=1), values.amax(dim=1))


@pytest.mark.parametrize(("bf16_seconds", "expected"), [(1.0, torch.bfloat16),
                                                         (3.0, torch.float32)])
def test_the_screen_runs_in_the_faster_precision_here(monkeypatch, bf16_seconds,
                                                       expected) -> None:
    """bfloat16 only where its products beat float32's (AMX), not wherever oneDNN runs it
    natively: on AVX-512 BF16 without AMX it is ~0.7x float32's rate. The choice changes the
    time only (the test above: the same picks in either precision)."""
    timed = {torch.bfloat16: bf16_seconds, torch.float32: 2.0}
    monkeypatch.setattr(omp_solver, "bfloat16_native", lambda: True)
    monkeypatch.setattr(omp_solver, "_product_seconds", lambda dtype: timed[dtype])
    omp_solver.default_score_dtype.cache_clear()
    try:
        assert omp_solver.default_score_dtype() == expected
        monkeypatch.setattr(omp_solver, "bfloat16_native", lambda: False)
        omp_solver.default_score_dtype.cache_clear()
        assert omp_solver.default_score_dtype() == torch.float32
    finally:
        omp_solver.default_score_dtype.cache_clear()
