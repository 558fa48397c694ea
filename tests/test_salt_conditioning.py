"""SALT's conditioning: per token (k, numerical rank, amplification |c|_2) against a brute
force per token, its summary in the regression record, and the report's table of it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_regression import make_neighbors

from embtransfer.core import paths
from embtransfer.report.diagnostics import (
    conditioning_frame,
    write_salt_conditioning,
)
from embtransfer.report.records import MalformedResultError
from embtransfer.transfer.regression import (
    DEFAULT_RCOND,
    salt_coefficients,
    salt_project,
    write_coefficients,
)

H = 8
V = 120


def plm_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PLM rows (V, H) with exact dependencies (row 1 == row 0, row 2 == row 3 + row 4), a
    near one (row 5 - row 6: singular value ~1e-4 relative, above rcond: full rank) and a
    source id for the 60 shared ones."""
    rng = np.random.default_rng(seed)
    plm = rng.standard_normal((V, H))
    plm[1] = plm[0]
    plm[2] = plm[3] + plm[4]
    plm[5] = plm[6] + 1e-4 * rng.standard_normal(H)
    return plm, rng.permutation(V)


def neighbour_sets(seed: int) -> tuple[list[int], list[np.ndarray]]:
    """Sets over the shared tokens 0..59 for the tokens 60..: k = 1, k < h with a duplicate
    row, k = h, k > h (always rank-deficient), a linear combination, a near one, then
    random sizes up to 2h."""
    rng = np.random.default_rng(seed)
    sets = [np.array([7]), np.array([0, 1, 9]), np.arange(10, 10 + H),
            np.arange(20, 20 + H + 5), np.array([2, 3, 4, 30, 31]), np.array([5, 6, 32])]
    sets += [rng.choice(60, int(rng.integers(1, 2 * H)), replace=False) for _ in range(25)]
    return list(range(60, 60 + len(sets))), sets


def brute_force(plm: np.ndarray, t: int, nbrs: np.ndarray, ridge: float = 0.0
                ) -> tuple[int, int, float]:
    """(k, the numerical rank of the neighbour rows at rcond, |c|_2), by numpy per token."""
    a, e = plm[nbrs], plm[t]
    sigma = np.linalg.svd(a, compute_uv=False)
    rank = int((sigma > DEFAULT_RCOND * sigma[0]).sum())
    if ridge > 0:
        c = e @ a.T @ np.linalg.inv(a @ a.T + ridge * np.eye(len(nbrs)))
    else:
        c = e @ np.linalg.pinv(a, rcond=DEFAULT_RCOND)
    return len(nbrs), rank, float(np.linalg.norm(c))


@pytest.mark.parametrize("ridge", [0.0, 0.5])
def test_per_token_conditioning_matches_a_brute_force(ridge):
    plm, source_of = plm_rows(0)
    ids, sets = neighbour_sets(1)
    res = salt_coefficients(plm, make_neighbors(ids, sets, source_of), ridge=ridge,
                            device="cpu", batch_tokens=4)
    want = np.array([brute_force(plm, t, s, ridge) for t, s in zip(ids, sets, strict=True)])
    np.testing.assert_array_equal(res["target_ids"], ids)
    np.testing.assert_array_equal(res["k_used"], want[:, 0])
    np.testing.assert_array_equal(res["rank"], want[:, 1])  # the rank ignores the ridge
    np.testing.assert_allclose(res["amplification"], want[:, 2], rtol=1e-6)
    # the cases the sets were built for: a duplicate, k = h, k > h, a linear combination
    assert res["k_used"][1] - res["rank"][1] == 1
    assert res["rank"][2] == H and res["rank"][3] == H and res["k_used"][3] == H + 5
    assert res["k_used"][4] - res["rank"][4] == 1
    assert res["rank"][5] == 3


def test_amplification_grows_as_k_nears_h_and_the_ridge_damps_it():
    """Random rows: |c|_2 is small for k << h and large at k = h (the near-singular Gram
    matrix); a ridge brings it back down."""
    h, n = 32, 200
    rng = np.random.default_rng(2)
    plm = rng.standard_normal((n + 60, h))
    source_of = np.arange(n + 60)
    ids = list(range(n, n + 60))
    sets = [rng.choice(n, h // 8 if i < 30 else h, replace=False) for i in range(60)]
    nb = make_neighbors(ids, sets, source_of)
    amp = salt_coefficients(plm, nb, device="cpu")["amplification"]
    damped = salt_coefficients(plm, nb, ridge=float(h), device="cpu")["amplification"]
    assert np.median(amp[30:]) > 5 * np.median(amp[:30])
    assert np.median(damped[30:]) < np.median(amp[30:]) / 3


def test_the_record_summarises_the_projected_tokens(tmp_path):
    plm, source_of = plm_rows(3)
    ids, sets = neighbour_sets(4)
    missing = [i % 7 == 3 for i in range(len(sets))]
    nb = make_neighbors(ids, sets, source_of, missing=missing)
    res = salt_coefficients(plm, nb, min_neighbors=2, device="cpu")
    projected = [(t, s) for t, s, m in zip(ids, sets, missing, strict=True)
                 if not m and len(s) >= 2]
    assert 0 < len(projected) < len(sets)  # some tokens are left out of the summary
    want = np.array([brute_force(plm, t, s) for t, s in projected])
    deficient = want[:, 0] > want[:, 1]
    write_coefficients(res, tmp_path / "p.safetensors", tmp_path / "p.json")
    cond = json.loads((tmp_path / "p.json").read_text())["stats"]["conditioning"]
    assert cond["h_t"] == H
    assert cond["n_rank_deficient"] == deficient.sum() >= 3
    assert cond["rank_deficient_share"] == pytest.approx(deficient.mean())
    assert cond["max_rank_deficiency"] == int((want[:, 0] - want[:, 1]).max()) > 0
    for key, values in (("k_over_h", want[:, 0] / H), ("amplification", want[:, 2])):
        median, p90, p99 = np.percentile(values, [50, 90, 99])
        np.testing.assert_allclose(
            [cond[key][q] for q in ("median", "p90", "p99", "max")],
            [median, p90, p99, values.max()], rtol=1e-6)


def test_a_record_without_projected_tokens_has_empty_figures():
    plm, source_of = plm_rows(5)
    nb = make_neighbors([70], [np.array([1])], source_of)
    cond = salt_coefficients(plm, nb, min_neighbors=2, device="cpu")["stats"]["conditioning"]
    assert cond["n_rank_deficient"] == 0 and cond["rank_deficient_share"] is None
    assert cond["k_over_h"]["max"] is None and cond["amplification"]["median"] is None


def regression_record(root, lang: str, target: str, seed: int) -> str:
    plm, source_of = plm_rows(seed)
    ids, sets = neighbour_sets(seed + 1)
    res = salt_project(plm, {"input": np.random.default_rng(seed).standard_normal((V, 5))},
                       make_neighbors(ids, sets, source_of), device="cpu")
    meta = paths.REGRESSION_META.at(str(root)).fill(lang=lang, source="src", target=target)
    tensors = paths.REGRESSION.at(str(root)).fill(lang=lang, source="src", target=target)
    write_coefficients(res, tensors, meta)
    return meta


def test_the_report_table_has_one_row_per_record_equal_to_it(tmp_path):
    files = [regression_record(tmp_path / "results", "vi", "plm_vi", 6),
             regression_record(tmp_path / "results", "de", "plm_de", 8)]
    frame = write_salt_conditioning(files, tmp_path / "c.csv", tmp_path / "c.md")
    assert frame[["lang", "target"]].values.tolist() == [["de", "plm_de"], ["vi", "plm_vi"]]
    for line, path in zip(frame.itertuples(), files[::-1], strict=True):
        stats = json.loads(open(path).read())["stats"]
        cond = stats["conditioning"]
        assert (line.h_t, line.projected) == (H, stats["counts"]["projected"])
        assert line.n_rank_deficient == cond["n_rank_deficient"]
        assert line.rank_deficient_share == cond["rank_deficient_share"]
        for q in ("median", "p90", "p99", "max"):
            assert getattr(line, f"k_over_h_{q}") == cond["k_over_h"][q]
            assert getattr(line, f"amplification_{q}") == cond["amplification"][q]
    markdown = (tmp_path / "c.md").read_text()
    first = frame.iloc[0]
    assert f"| de | src | plm_de | {H} | {first['projected']} |" in markdown
    assert f"{first['amplification_max']:.2f}" in markdown
    empty = write_salt_conditioning([], tmp_path / "e.csv", tmp_path / "e.md")
    assert empty.empty and "(no setting runs SALT)" in (tmp_path / "e.md").read_text()


def test_a_record_without_conditioning_is_refused_naming_it(tmp_path):
    path = regression_record(tmp_path / "results", "vi", "plm_vi", 9)
    record = json.loads(open(path).read())
    del record["stats"]["conditioning"]
    with open(path, "w") as handle:
        json.dump(record, handle)
    with pytest.raises(MalformedResultError, match=r"projected\.json.*salt_regression"):
        conditioning_frame([path])
