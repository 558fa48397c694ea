"""SALT against OMP in the report: the comparisons table's lines with versus ``salt`` of
``omp`` and ``omp_salt_k`` (embtransfer.report.comparisons), for the zero-shot, post-LAPT and
alignment families, on made-up records; the findings' line reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.core import paths
from embtransfer.report.comparisons import TEST_COLUMNS, decide, frame_of, holm
from embtransfer.report.findings import OMP_METHODS, salt_omp_lines
from embtransfer.report.records import MalformedResultError
from embtransfer.report.setting_tables import alignment_lines, zeroshot_lines

SETTING = {"lang": "ar_mini", "source": "llama_mini", "target": "gpt2_ar_mini"}


def zeroshot(root: Path, stage: str, method: str, nll: np.ndarray, n_bytes: np.ndarray) -> str:
    template = paths.ZEROSHOT if stage == "transfer" else paths.LAPT_ZEROSHOT
    path = root / template.fill(method=method, **SETTING)
    path.parent.mkdir(parents=True, exist_ok=True)
    bpb = float(nll.sum() / np.log(2) / n_bytes.sum())
    path.write_text(json.dumps(SETTING | {
        "method": method, "loss": 1.0, "bits_per_byte": bpb,
        "document_nll_nats": nll.tolist(), "document_bytes": n_bytes.tolist()}))
    return str(path)


def alignment(root: Path, hits: dict[str, np.ndarray]) -> str:
    path = root / paths.ALIGNMENT.fill(stage="transfer", **SETTING)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    frames = []
    for method, hit in hits.items():
        n = hit.size
        frames.append(pd.DataFrame({
            "method": method, "target_id": np.arange(n), "side": "input", "split": "held_out",
            "hit_1": hit.astype(int), "hit_10": hit.astype(int),
            "cos_oracle": hit * 0.5 + rng.normal(0, 0.01, n),
            "cos_centred": hit * 0.5 + rng.normal(0, 0.01, n),
            "contrast": hit * 0.5 + rng.normal(0, 0.01, n)}))
    pd.concat(frames).to_parquet(path)
    return str(path)


def salt_lines(decided: pd.DataFrame) -> pd.DataFrame:
    """The SALT-against-OMP lines of a comparisons table."""
    return decided[(decided["versus"] == "salt") & decided["method"].isin(OMP_METHODS)]


@pytest.fixture
def decided(tmp_path: Path) -> pd.DataFrame:
    """OMP 5 % below SALT's bits per byte on every document before and after LAPT,
    omp_salt_k 5 % above; OMP retrieves half the tokens SALT misses, omp_salt_k none."""
    rng = np.random.default_rng(1)
    n_bytes = rng.integers(200, 400, 40).astype(float)
    salt = n_bytes * rng.uniform(1.0, 1.2, 40)
    tests = []
    for stage in ("transfer", "lapt"):
        files = [zeroshot(tmp_path, stage, "salt", salt, n_bytes),
                 zeroshot(tmp_path, stage, "omp", salt * 0.95, n_bytes),
                 zeroshot(tmp_path, stage, "omp_salt_k", salt * 1.05, n_bytes),
                 zeroshot(tmp_path, stage, "random", salt * 2, n_bytes)]
        tests += zeroshot_lines(files, 0, stage)[1]
    hits = {"salt": np.zeros(60), "omp": np.r_[np.ones(30), np.zeros(30)],
            "omp_salt_k": np.zeros(60), "random": np.zeros(60)}
    tests += alignment_lines([alignment(tmp_path, hits)], 0)[1]
    return decide(frame_of(tests, TEST_COLUMNS))


def test_omp_and_omp_salt_k_each_have_a_line_against_salt_in_every_family(decided):
    lines = salt_lines(decided)
    per = lines.groupby(["family", "metric"])["method"].apply(sorted).to_dict()
    assert per == {("zeroshot", "bits_per_byte"): ["omp", "omp_salt_k"],
                   ("lapt_zeroshot", "bits_per_byte"): ["omp", "omp_salt_k"],
                   **{("alignment", m): ["omp", "omp_salt_k"]
                      for m in ("p_at_10", "p_at_1", "contrast")}}
    assert (lines["other"] == "salt").all()
    assert set(lines[lines["family"] == "lapt_zeroshot"]["stage"]) == {"lapt"}


def test_the_difference_is_omp_minus_salt(decided):
    lines = salt_lines(decided).set_index(["family", "metric", "method"])
    for family in ("zeroshot", "lapt_zeroshot"):
        omp = lines.loc[(family, "bits_per_byte", "omp")]
        # OMP reads 5 % fewer bits per byte: a negative difference, better (lower is better)
        assert omp["diff"] < 0 and omp["clears"] and omp["relation"] == "better"
        k = lines.loc[(family, "bits_per_byte", "omp_salt_k")]
        assert k["diff"] > 0 and k["relation"] == "worse"
    p1 = lines.loc[("alignment", "p_at_1", "omp")]
    assert p1["diff"] == pytest.approx(50.0) and p1["n"] == 60 and p1["relation"] == "better"
    cos = lines.loc[("alignment", "contrast", "omp")]
    assert cos["diff"] == pytest.approx(0.25, abs=0.01) and cos["relation"] == "better"
    same = lines.loc[("alignment", "p_at_1", "omp_salt_k")]
    assert same["diff"] == 0 and same["relation"] == "not apart"


def test_the_findings_lines_say_it_from_salts_side(decided):
    """One line per OMP (at SALT's k, at the tool's default k), each stage's counts apart."""
    lines = salt_lines(decided)
    text = dict(zip(("omp_salt_k", "omp"), salt_omp_lines(decided), strict=True))
    for method, line in text.items():
        for stage, words in (("transfer", "transfer stage"), ("lapt", "after LAPT")):
            mine = lines[(lines["method"] == method) & (lines["stage"] == stage)]
            better = int((mine["relation"] == "worse").sum())  # SALT better where OMP worse
            worse = int((mine["relation"] == "better").sum())
            apart = int((mine["relation"] == "not apart").sum())
            assert re.search(rf"{words}, {len(mine)} paired tests?: SALT better in {better}"
                             rf"( \([^)]*\))?, worse in {worse}( \([^)]*\))?, not apart in "
                             rf"{apart}[;.]", line), line
    assert text["omp"].startswith("**SALT against OMP at the tool's default k** (`omp`: k = 64")
    # OMP reads 5 % fewer bits per byte after LAPT: SALT worse, and the line says in what
    assert text["omp"].endswith("after LAPT, 1 paired test: SALT better in 0, worse in 1 (1 in "
                                "bits per byte of the whole model), not apart in 0.")


def test_no_difference_does_not_clear(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n_bytes = rng.integers(200, 400, 40).astype(float)
    salt = n_bytes * rng.uniform(1.0, 1.2, 40)
    noise = rng.normal(0, 0.01, 40) * n_bytes
    files = [zeroshot(tmp_path, "transfer", "salt", salt, n_bytes),
             zeroshot(tmp_path, "transfer", "omp_salt_k", salt + noise - noise.mean(), n_bytes)]
    line = salt_lines(decide(frame_of(zeroshot_lines(files, 0)[1], TEST_COLUMNS))).iloc[0]
    assert line["method"] == "omp_salt_k" and not line["clears"]
    assert line["relation"] == "not apart"


def test_other_documents_are_refused(tmp_path: Path) -> None:
    n_bytes = np.full(10, 100.0)
    files = [zeroshot(tmp_path, "transfer", "salt", n_bytes, n_bytes),
             zeroshot(tmp_path, "transfer", "omp", n_bytes, n_bytes + 1)]
    with pytest.raises(MalformedResultError, match="other documents"):
        zeroshot_lines(files, 0)


def test_the_lines_follow_the_reports_one_rule(tmp_path: Path) -> None:
    """A p-value below 0.05 but not below Holm's bound at family-wise 0.001 is not apart:
    the SALT-against-OMP lines are decided with the rest of their family."""
    hits = {"salt": np.zeros(60), "omp": np.r_[np.ones(7), np.zeros(53)]}  # 7 to 0: p 0.016
    decided = decide(frame_of(alignment_lines([alignment(tmp_path, hits)], 0)[1],
                              TEST_COLUMNS))
    p1 = salt_lines(decided).set_index("metric").loc["p_at_1"]
    assert 0.001 < p1["p"] < 0.05 and not p1["clears"] and p1["relation"] == "not apart"
    np.testing.assert_array_equal(decided["clears"].to_numpy(), holm(decided["p"].to_numpy()))
