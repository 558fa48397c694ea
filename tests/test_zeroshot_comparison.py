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
    # the bootstrap resamples documents and recomputes the mean of a - b: draws made as
    # paired_bootstrap makes them (same seed, chunks of 256); p is the normal tail of the
    # mean over the resampled means' spread
    draws = np.random.default_rng(7)
    means = []
    for start in range(0, BOOTSTRAP_SAMPLES, 256):
        idx = draws.integers(0, x.size, size=(min(256, BOOTSTRAP_SAMPLES - start), x.size))
        means += list((a[idx] - b[idx]).mean(1))
    z = (a - b).mean() / np.std(means, ddof=1)
    assert test.p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))


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


def alignment_scores(n: int = 300) -> pd.DataFrame:
    """Per-token alignment scores of the fixture's methods: the oracle retrieves every
    translation, focus a third of them at depth 10, salt a few, Random none; salt alone with
    bert_x retrieves none (an all-zero panel)."""
    rng = np.random.default_rng(8)
    hits = {"world_oracle": np.ones(n, int), "focus": (rng.random(n) < 0.3).astype(int),
            "salt": (rng.random(n) < 0.02).astype(int), "random": np.zeros(n, int)}
    parts = []
    for method, hit in hits.items():
        parts.append(pd.DataFrame({
            "stage": "transfer", "lang": "xx", "source": "src", "target": "gpt2_x",
            "side": "input", "method": method, "target_id": np.arange(n), "split": "held_out",
            "hit_1": hit * (rng.random(n) < 0.1), "hit_10": hit,
            "cos_oracle": hit * 0.5 + rng.random(n) * 0.1,
            "cos_centred": hit * 0.3 + rng.random(n) * 0.1}))
    parts.append(parts[2].assign(target="bert_x", hit_1=0, hit_10=0))
    return pd.concat(parts, ignore_index=True)


def test_methods_panels_order_mark_and_scale_as_the_tables(records):
    from embtransfer.report.alignment_table import alignment_clears, alignment_frame
    from embtransfer.report.figures import MIN_P_AXIS, methods_panels
    from embtransfer.report.zeroshot import zeroshot_clears

    alignment = alignment_frame(alignment_scores(), seed=1)
    zeroshot = zeroshot_comparison(records, seed=3)
    figure = methods_panels(alignment, zeroshot)
    # one row for the setting where methods compete, one for salt across its target PLMs
    assert [left.title for left, _ in figure.rows] == [
        "xx, src, gpt2_x: held-out P@10 (%)", "xx, src: salt across target PLMs: held-out "
        "P@10 (%)"]
    (left, right), (across, across_bpb) = figure.rows
    gpt = alignment[alignment["target"] == "gpt2_x"]
    # alignment.md's order (by rank), the oracle written in the note, not drawn
    ranked = gpt[gpt["method"] != "world_oracle"].sort_values("rank")
    assert left.labels == list(ranked["method"]) == ["focus", "salt", "random"]
    assert left.values == pytest.approx(list(ranked["p_at_10"]))
    assert left.errors == pytest.approx(list(ranked["p_at_10_se"]))
    assert "world_oracle: 100.0 (not drawn)" in left.note
    # the marks are the table's own decisions: † where the test against Random clears
    clears = alignment_clears(alignment)
    for label, text in zip(left.labels, left.texts, strict=True):
        line = ranked.index[ranked["method"] == label][0]
        assert ("†" in text) == bool(clears.loc[line, "p_at_10_vs_random_p"]), label
        assert ("*" in text) == bool(clears.loc[line, "p_at_10_vs_best_p"]), label
    assert left.texts[0].startswith("best") and "†" in left.texts[0]  # 30 % vs 0: apart
    # an axis the methods can be read on: past every error bar, far below the oracle's 100
    assert max(v + e for v, e in zip(left.values, left.errors, strict=True)) < left.xlim[1]
    assert left.xlim[1] < 100
    # bits per byte in zeroshot.md's order (ranked, then the oracle), marks from its tests
    table = zeroshot[zeroshot["target"] == "gpt2_x"]
    assert right.labels == list(table["method"])
    marks = zeroshot_clears(zeroshot).loc[table.index]
    assert [("†" in t) for t in right.texts] == list(marks["vs_random_p"])
    # salt across target PLMs in one panel, the competing setting's first; its all-zero
    # bert_x bar keeps a readable axis (not matplotlib's -0.04 to 0.04)
    assert across.labels == ["salt, gpt2_x", "salt, bert_x"]
    assert across.values[1] == 0 and across.xlim[0] == 0 and across.xlim[1] >= MIN_P_AXIS
    alone = methods_panels(alignment[alignment["target"] == "bert_x"], zeroshot).rows[-1][0]
    assert alone.values == [0] and alone.xlim == (0.0, MIN_P_AXIS)
    assert across_bpb.labels == ["salt, gpt2_x", "salt, bert_x"]
    assert across_bpb.values == pytest.approx([
        float(zeroshot[(zeroshot["method"] == "salt") & (zeroshot["target"] == t)]
              ["bits_per_byte"].iloc[0]) for t in ("gpt2_x", "bert_x")])


def test_methods_figure_draws_the_panels(records, tmp_path):
    from embtransfer.report.alignment_table import alignment_frame
    from embtransfer.report.figures import draw_methods, methods_panels, write_methods_figure

    alignment = alignment_frame(alignment_scores(), seed=1)
    zeroshot = zeroshot_comparison(records, seed=3)
    figure = methods_panels(alignment, zeroshot)
    fig = draw_methods(alignment, zeroshot, dpi=40)
    assert len(fig.axes) == 2 * len(figure.rows)
    for ax, panel in zip(fig.axes, [p for row in figure.rows for p in row], strict=True):
        assert [t.get_text() for t in ax.get_yticklabels()] == panel.labels
        assert [b.get_width() for b in ax.patches] == pytest.approx(panel.values)
        assert ax.get_xlim() == pytest.approx(panel.xlim)
    right = fig.axes[1]
    (errors,) = [c for c in right.containers if hasattr(c, "lines")]
    segments = errors.lines[2][0].get_segments()
    assert [seg[1][0] - seg[0][0] for seg in segments] == pytest.approx(
        [2 * e for e in figure.rows[0][1].errors])
    legend = fig.texts[-1].get_text().replace("\n", " ")
    assert "Holm-Bonferroni" in legend and "upper bound" in legend
    write_methods_figure(tmp_path / "m.png", alignment, zeroshot, dpi=40)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_methods_figure_cuts_a_far_bits_per_byte_bar_and_writes_its_value(records):
    from embtransfer.report.alignment_table import alignment_frame
    from embtransfer.report.figures import methods_panels

    records[2]["document_nll_nats"] = [v * 20 for v in records[2]["document_nll_nats"]]
    records[2]["bits_per_byte"] *= 20
    zeroshot = zeroshot_comparison(records, seed=3)
    right = methods_panels(alignment_frame(alignment_scores(), seed=1), zeroshot).rows[0][1]
    focus = float(zeroshot[(zeroshot["method"] == "focus")
                           & (zeroshot["target"] == "gpt2_x")]["bits_per_byte"].iloc[0])
    assert right.xlim[1] < focus
    assert right.texts[right.labels.index("focus")].startswith(f"{focus:.2f} →")
