"""The report's zero-shot comparison: bits per byte with standard errors over the documents
and paired tests, from the records' per-document losses (embtransfer.report.zeroshot)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from embtransfer.core.paired import BOOTSTRAP_SAMPLES, paired_ratio, ratio_se
from embtransfer.report.records import MalformedResultError
from embtransfer.report.zeroshot import write_zeroshot_comparison, zeroshot_comparison


def _jackknife_se(y: np.ndarray, x: np.ndarray) -> float:
    """The leave-one-out jackknife's standard error of sum(y) / sum(x): a reference the
    delta method agrees with for many items."""
    n = y.size
    leave_one_out = (y.sum() - y) / (x.sum() - x)
    return math.sqrt((n - 1) / n * ((leave_one_out - leave_one_out.mean()) ** 2).sum())


def test_ratio_se_agrees_with_the_jackknife():
    rng = np.random.default_rng(0)
    x = rng.integers(20, 400, size=500).astype(float)
    y = x * rng.gamma(4.0, 0.8, size=500)
    assert ratio_se(y, x) == pytest.approx(_jackknife_se(y, x), rel=0.02)


def test_paired_ratio_difference_and_its_bootstrap_match_brute_force():
    rng = np.random.default_rng(1)
    x = rng.integers(20, 400, size=60).astype(float)
    a = x * rng.gamma(4.0, 0.8, size=60)
    b = a + x * rng.normal(0.05, 0.4, size=60)
    test = paired_ratio(a, b, x, seed=7)
    assert test.diff == pytest.approx(a.sum() / x.sum() - b.sum() / x.sum())
    assert test.se == pytest.approx(_jackknife_se(a - b, x), rel=0.1)
    # the bootstrap resamples documents and recomputes the ratio difference: draws made as
    # paired_bootstrap makes them (same seed, chunks of 256)
    draws = np.random.default_rng(7)
    diffs = []
    for start in range(0, BOOTSTRAP_SAMPLES, 256):
        idx = draws.integers(0, x.size, size=(min(256, BOOTSTRAP_SAMPLES - start), x.size))
        diffs += list((a[idx].sum(1) - b[idx].sum(1)) / x[idx].sum(1))
    far = np.mean(np.asarray(diffs) >= 0) if test.diff < 0 else np.mean(np.asarray(diffs) <= 0)
    assert test.p == pytest.approx(max(min(1.0, 2 * far), 1 / BOOTSTRAP_SAMPLES))


def record(method, nll, n_bytes, target="gpt2_x"):
    rec = {"lang": "xx", "source": "src", "method": method, "loss": 1.0,
           "bits_per_byte": sum(nll) / math.log(2) / sum(n_bytes),
           "document_nll_nats": [float(v) for v in nll],
           "document_bytes": [int(v) for v in n_bytes]}
    if target:
        rec["target"] = target
    return rec


@pytest.fixture
def records():
    rng = np.random.default_rng(2)
    n_bytes = rng.integers(30, 200, size=80)
    base = n_bytes * rng.gamma(6.0, 0.5, size=80)
    return [
        record("random", base * 1.5, n_bytes),
        record("salt", base * 1.0 + rng.normal(0, 1, 80), n_bytes),
        record("focus", base * 1.01 + rng.normal(0, 1, 80), n_bytes),
        record("world_oracle", base * 0.5, n_bytes),
        record("source_model", base * 0.9, n_bytes, target=None),
        record("salt", base * 2.0, n_bytes, target="bert_x"),
    ]


def test_comparison_lines_rank_and_compare_with_best_and_random(records):
    frame = zeroshot_comparison(records, seed=3)
    gpt = frame[frame["target"] == "gpt2_x"].set_index("method")
    assert list(gpt.index) == ["salt", "focus", "random", "world_oracle"]
    assert list(gpt["rank"].iloc[:3]) == [1, 2, 3] and math.isnan(gpt.loc["world_oracle", "rank"])
    assert (gpt["best"] == "salt").all()
    salt, rnd = records[1], records[0]
    nll = np.asarray(salt["document_nll_nats"]) / math.log(2)
    n_bytes = np.asarray(salt["document_bytes"], float)
    assert gpt.loc["salt", "bits_per_byte"] == salt["bits_per_byte"]
    assert gpt.loc["salt", "bits_per_byte_se"] == pytest.approx(ratio_se(nll, n_bytes))
    assert math.isnan(gpt.loc["salt", "vs_best"])
    assert gpt.loc["salt", "vs_random"] == pytest.approx(
        salt["bits_per_byte"] - rnd["bits_per_byte"])
    assert gpt.loc["random", "vs_random_p"] != gpt.loc["random", "vs_random_p"]  # NaN: itself
    # Random is 50 % worse on every document: far beyond noise
    assert gpt.loc["random", "vs_best_p"] < 0.05 and gpt.loc["random", "vs_best"] > 0
    # a setting with one competitor: shown, neither ranked nor compared
    bert = frame[frame["target"] == "bert_x"].iloc[0]
    assert math.isnan(bert["rank"]) and bert["best"] == "" and math.isnan(bert["vs_best"])
    own = frame[frame["method"] == "source_model"].iloc[0]
    assert own["target"] == "(source tokenizer)" and own["documents"] == 80
    # the same seed gives the same p-values
    pd.testing.assert_frame_equal(frame, zeroshot_comparison(records, seed=3))


def test_methods_scored_on_other_documents_are_refused(records):
    records[2]["document_bytes"] = records[2]["document_bytes"][::-1]
    with pytest.raises(MalformedResultError, match="other documents"):
        zeroshot_comparison(records, seed=0)


def test_written_comparison_marks_what_clears_the_test(records, tmp_path):
    files = []
    for i, rec in enumerate(records):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(rec))
    frame = write_zeroshot_comparison(files, tmp_path / "z.csv", tmp_path / "z.md", seed=3)
    text = (tmp_path / "z.md").read_text()
    assert "## xx, source src, target gpt2_x (80 documents," in text
    line = next(row for row in text.splitlines() if row.startswith("| random |"))
    assert line.endswith(" * |  |")  # differs from the best; not compared with itself
    assert pd.read_csv(tmp_path / "z.csv")["bits_per_byte_se"].notna().all()
    assert len(frame) == len(records)
    del records[0]["document_bytes"]
    (tmp_path / "0.json").write_text(json.dumps(records[0]))
    with pytest.raises(MalformedResultError, match="document_bytes"):
        write_zeroshot_comparison(files, tmp_path / "z.csv", tmp_path / "z.md", seed=3)


def test_methods_figure_draws_each_method_with_its_error_bar_and_marks(records, tmp_path):
    from embtransfer.report.figures import draw_methods, write_methods_figure

    zeroshot = zeroshot_comparison(records, seed=3)
    alignment = pd.DataFrame({
        "lang": "xx", "source": "src", "target": "gpt2_x", "stage": "transfer",
        "side": "input", "split": ["held_out"] * 3 + ["dictionary"],
        "method": ["salt", "random", "world_oracle", "salt"], "p_at_1": [30.0, 2.0, 90.0, 99.0],
        "p_at_1_se": [3.0, 1.0, 2.0, 1.0], "best": "salt",
        "p_at_1_vs_best_p": [float("nan"), 0.001, float("nan"), float("nan")],
    })
    fig = draw_methods(alignment, zeroshot, dpi=40)
    # a row per setting, sorted: bert_x (no alignment lines: "no results"), then gpt2_x
    assert [ax.get_title().split(":")[0] for ax in fig.axes[::2]] == [
        "xx, src, bert_x", "xx, src, gpt2_x"]
    assert fig.axes[0].texts[0].get_text() == "no results"
    left, right = fig.axes[2], fig.axes[3]
    # held-out lines only, highest P@1 first; bars of the values, error bars of the SEs
    assert [t.get_text() for t in left.get_yticklabels()] == ["world_oracle", "salt", "random"]
    assert [round(b.get_width(), 6) for b in left.patches] == [90.0, 30.0, 2.0]
    assert {t.get_text().strip() for t in left.texts} == {"best", "*"}
    gpt = zeroshot[zeroshot["target"] == "gpt2_x"].sort_values("bits_per_byte")
    assert [t.get_text() for t in right.get_yticklabels()] == list(gpt["method"])
    assert [b.get_width() for b in right.patches] == pytest.approx(list(gpt["bits_per_byte"]))
    # each bar carries its standard error: the error bar's segments span value ± SE
    (errors,) = [c for c in right.containers if hasattr(c, "lines")]
    segments = errors.lines[2][0].get_segments()
    assert [seg[1][0] - seg[0][0] for seg in segments] == pytest.approx(
        list(2 * gpt["bits_per_byte_se"]))
    # Random differs from the best (*); the oracle and focus from Random (†) at least
    marks = [t.get_text().strip() for t in right.texts]
    assert "best" in marks and "*" in marks and any("†" in m for m in marks)
    assert "differs from Random" in fig.texts[-1].get_text()
    write_methods_figure(tmp_path / "m.png", alignment, zeroshot, dpi=40)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_methods_figure_cuts_a_far_bits_per_byte_bar_and_writes_its_value(records):
    from embtransfer.report.figures import draw_methods

    records[2]["document_nll_nats"] = [v * 20 for v in records[2]["document_nll_nats"]]
    records[2]["bits_per_byte"] *= 20
    zeroshot = zeroshot_comparison(records, seed=3)
    empty = pd.DataFrame(columns=["lang", "source", "target", "method", "stage", "side",
                                  "split", "p_at_1", "p_at_1_se", "best", "p_at_1_vs_best_p"])
    right = draw_methods(empty, zeroshot, dpi=40).axes[3]
    focus = zeroshot[(zeroshot["method"] == "focus") & (zeroshot["target"] == "gpt2_x")]
    assert right.get_xlim()[1] < float(focus["bits_per_byte"].iloc[0])
    assert any(t.get_text().strip().startswith(f"{focus['bits_per_byte'].iloc[0]:.2f} →")
               for t in right.texts)
