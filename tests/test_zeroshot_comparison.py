"""The report's zero-shot comparison: bits per byte with standard errors over the documents
and paired tests, from the records' per-document losses (embtransfer.report.setting_tables), the
zero-shot tables drawn from them, and the methods figure that draws both the zero-shot and the
alignment lines."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from embtransfer.core import paths
from embtransfer.core.paired import BOOTSTRAP_SAMPLES, paired_ratio, ratio_se
from embtransfer.report.comparisons import (
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    decide,
    frame_of,
    lookup,
)
from embtransfer.report.records import MalformedResultError
from embtransfer.report.setting_tables import (
    MARKS,
    OWN_TOKENIZER,
    alignment_lines,
    setting_sections,
    setting_table,
    zeroshot_lines,
)


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
    # the bootstrap resamples documents and recomputes the same difference of ratios:
    # draws made 256 resamples at a time from the seed; p is the normal tail of the
    # difference over the resampled differences' spread
    draws = np.random.default_rng(7)
    resampled = []
    for start in range(0, BOOTSTRAP_SAMPLES, 256):
        idx = draws.integers(0, x.size, size=(min(256, BOOTSTRAP_SAMPLES - start), x.size))
        resampled += list((a[idx] - b[idx]).sum(1) / x[idx].sum(1))
    z = test.diff / np.std(resampled, ddof=1)
    assert test.p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))


def record(method, nll, n_bytes, target="gpt2_x"):
    rec = {"lang": "xx", "source": "src", "method": method, "loss": 1.0,
           "bits_per_byte": sum(nll) / math.log(2) / sum(n_bytes),
           "document_nll_nats": [float(v) for v in nll],
           "document_bytes": [int(v) for v in n_bytes]}
    if target:
        rec["target"] = target
    return rec


def write_records(root, records) -> list[str]:
    """Each record in a file of its own, as the zero-shot rules write them."""
    files = []
    for i, rec in enumerate(records):
        path = root / f"{i}.json"
        path.write_text(json.dumps(rec))
        files.append(str(path))
    return files


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


def zeroshot(tmp_path, records, seed=3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summaries, decided comparisons) of the records."""
    summaries, tests = zeroshot_lines(write_records(tmp_path, records), seed)
    return frame_of(summaries, SUMMARY_COLUMNS), decide(frame_of(tests, TEST_COLUMNS))


def test_comparison_lines_rank_and_compare_with_best_and_random(records, tmp_path):
    summaries, decided = zeroshot(tmp_path, records)
    assert set(summaries["family"]) == {"zeroshot"} and set(summaries["stage"]) == {"transfer"}
    assert set(summaries["metric"]) == {"bits_per_byte"}
    gpt = summaries[summaries["target"] == "gpt2_x"].set_index("method")
    assert list(gpt.index) == ["random", "salt", "focus", "world_oracle"]
    assert [gpt.loc[m, "rank"] for m in ("salt", "focus", "random")] == [1, 2, 3]
    assert math.isnan(gpt.loc["world_oracle", "rank"])
    salt, rnd = records[1], records[0]
    nll = np.asarray(salt["document_nll_nats"]) / math.log(2)
    n_bytes = np.asarray(salt["document_bytes"], float)
    assert gpt.loc["salt", "value"] == pytest.approx(salt["bits_per_byte"], rel=1e-12)
    assert gpt.loc["salt", "se"] == pytest.approx(ratio_se(nll, n_bytes))
    assert (gpt["n"] == 80).all()
    tests = decided[decided["target"] == "gpt2_x"].set_index(["method", "versus"])
    assert ("salt", "best") not in tests.index  # the best: not with itself
    assert tests.loc[("salt", "random"), "diff"] == pytest.approx(
        salt["bits_per_byte"] - rnd["bits_per_byte"])
    assert ("random", "random") not in tests.index
    # Random is 50 % worse on every document: far beyond noise
    assert tests.loc[("random", "best"), "relation"] == "worse"
    assert tests.loc[("random", "best"), "diff"] > 0 and tests.loc[("random", "best"), "other"] \
        == "salt"
    assert not [m for m, _ in tests.index if m == "world_oracle"]
    # a setting with one competitor: shown, neither ranked nor compared
    bert = summaries[summaries["target"] == "bert_x"].iloc[0]
    assert math.isnan(bert["rank"]) and not (decided["target"] == "bert_x").any()
    own = summaries[summaries["method"] == "source_model"].iloc[0]
    assert own["target"] == OWN_TOKENIZER and own["n"] == 80 and own["role"] == "reference"
    assert own["value"] == pytest.approx(records[4]["bits_per_byte"], rel=1e-12)
    # the same seed gives the same p-values
    again = zeroshot(tmp_path, records)
    pd.testing.assert_frame_equal(again[1], decided)
    pd.testing.assert_frame_equal(again[0], summaries)


def test_the_lapt_stage_is_a_family_of_its_own(records, tmp_path):
    lines, tests = zeroshot_lines(write_records(tmp_path, records), 3, "lapt")
    assert {line["family"] for line in lines} == {"lapt_zeroshot"}
    assert {t["stage"] for t in tests} == {"lapt"}


def test_methods_scored_on_other_documents_are_refused(records, tmp_path):
    records[2]["document_bytes"] = records[2]["document_bytes"][::-1]
    with pytest.raises(MalformedResultError, match="other documents"):
        zeroshot(tmp_path, records)


def test_the_zeroshot_table_marks_what_clears_the_test(records, tmp_path):
    summaries, decided = zeroshot(tmp_path, records)
    text = "\n".join(setting_sections(summaries, lookup(decided), details=True))
    assert "## transfer: xx, source src, target gpt2_x (n = 80)" in text
    assert f"## transfer: xx, source src, target {OWN_TOKENIZER} (n = 80)" in text
    table = setting_table(summaries[summaries["target"] == "gpt2_x"], lookup(decided))
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    random_cell = rows["random"].split("|")[2].strip()
    # Random: third, apart from the best (worse); the best marked best
    assert random_cell.endswith(f"(3) {MARKS['vs_best']}")
    assert rows["salt"].split("|")[2].strip().endswith(MARKS["best"] + MARKS["better_random"])
    assert list(rows) == ["world_oracle", "salt", "focus", "random"]
    # a record without its per-document lists is named
    del records[0]["document_bytes"]
    with pytest.raises(MalformedResultError, match="document_bytes"):
        zeroshot(tmp_path, records)


# -- the methods figure --------------------------------------------------------------------


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
            "target": "gpt2_x", "side": "input", "method": method, "target_id": np.arange(n),
            "split": "held_out", "hit_1": hit * (rng.random(n) < 0.1), "hit_10": hit,
            "cos_oracle": hit * 0.5 + rng.random(n) * 0.1,
            "cos_centred": hit * 0.3 + rng.random(n) * 0.1,
            "contrast": hit * 0.2 + rng.random(n) * 0.1}))
    parts.append(parts[2].assign(target="bert_x", hit_1=0, hit_10=0))
    return pd.concat(parts, ignore_index=True)


def spine(tmp_path, records) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summaries, decided) of the records' zero-shot lines and the alignment scores, as the
    report decides them together."""
    files = []
    for target, part in alignment_scores().groupby("target"):
        path = tmp_path / paths.ALIGNMENT.fill(stage="transfer", lang="xx", source="src",
                                               target=target)
        path.parent.mkdir(parents=True, exist_ok=True)
        part.drop(columns="target").to_parquet(path)
        files.append(str(path))
    parts = [zeroshot_lines(write_records(tmp_path, records), 3), alignment_lines(files, 1)]
    summaries = frame_of([s for lines, _ in parts for s in lines], SUMMARY_COLUMNS)
    return summaries, decide(frame_of([t for _, made in parts for t in made], TEST_COLUMNS))


def test_methods_panels_order_mark_and_scale_as_the_tables(records, tmp_path):
    from embtransfer.report.figures import MIN_P_AXIS, methods_panels

    summaries, decided = spine(tmp_path, records)
    figure = methods_panels(summaries, decided)
    # one row for the setting where methods compete, one for salt across its target PLMs
    assert [left.title for left, _ in figure.rows] == [
        "xx, src, gpt2_x: held-out P@10 (%)", "xx, src: salt across target PLMs: held-out "
        "P@10 (%)"]
    (left, right), (across, across_bpb) = figure.rows
    aligned = summaries[(summaries["family"] == "alignment")
                        & (summaries["metric"] == "p_at_10")]
    gpt = aligned[aligned["target"] == "gpt2_x"]
    # the alignment table's order (by rank), the oracle written in the note, not drawn
    ranked = gpt[gpt["method"] != "world_oracle"].sort_values("rank")
    assert left.labels == list(ranked["method"]) == ["focus", "salt", "random"]
    assert left.values == pytest.approx(list(ranked["value"]))
    assert left.errors == pytest.approx(list(ranked["se"]))
    assert "world_oracle: 100.0 (not drawn)" in left.note
    # the marks are the decided comparisons': † where the test against Random clears, *
    # where the test against the best does
    clears = {(t.family, t.target, t.metric, t.method, t.versus): t.clears
              for t in decided.itertuples()}
    for label, text in zip(left.labels, left.texts, strict=True):
        key = ("alignment", "gpt2_x", "p_at_10", label)
        assert ("†" in text) == clears.get((*key, "random"), False), label
        assert ("*" in text) == clears.get((*key, "best"), False), label
    assert left.texts[0].startswith("best") and "†" in left.texts[0]  # 30 % vs 0: apart
    # an axis the methods can be read on: past every error bar, far below the oracle's 100
    assert max(v + e for v, e in zip(left.values, left.errors, strict=True)) < left.xlim[1]
    assert left.xlim[1] < 100
    # bits per byte, marks from the decided zero-shot tests
    for label, text in zip(right.labels, right.texts, strict=True):
        key = ("zeroshot", "gpt2_x", "bits_per_byte", label)
        assert ("†" in text) == clears.get((*key, "random"), False), label
        assert ("*" in text) == clears.get((*key, "best"), False), label
    assert set(right.labels) == {"salt", "focus", "random", "world_oracle"}
    # salt across target PLMs in one panel, the competing setting's first; its all-zero
    # bert_x bar keeps a readable axis (not matplotlib's -0.04 to 0.04)
    assert across.labels == ["salt, gpt2_x", "salt, bert_x"]
    assert across.values[1] == 0 and across.xlim[0] == 0 and across.xlim[1] >= MIN_P_AXIS
    alone = methods_panels(summaries[summaries["target"] == "bert_x"], decided).rows[-1][0]
    assert alone.values == [0] and alone.xlim == (0.0, MIN_P_AXIS)
    assert across_bpb.labels == ["salt, gpt2_x", "salt, bert_x"]
    bpb = summaries[(summaries["family"] == "zeroshot") & (summaries["method"] == "salt")]
    assert across_bpb.values == pytest.approx([
        float(bpb[bpb["target"] == t]["value"].iloc[0]) for t in ("gpt2_x", "bert_x")])


def test_the_zeroshot_bars_are_in_the_zeroshot_tables_order(records, tmp_path):
    from embtransfer.report.figures import methods_panels

    summaries, decided = spine(tmp_path, records)
    right = methods_panels(summaries, decided).rows[0][1]
    table = setting_table(summaries[(summaries["family"] == "zeroshot")
                                    & (summaries["target"] == "gpt2_x")], lookup(decided))
    order = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert right.labels == order


def test_methods_figure_draws_the_panels(records, tmp_path):
    from embtransfer.report.figures import draw_panels, methods_panels, write_methods_figure

    summaries, decided = spine(tmp_path, records)
    figure = methods_panels(summaries, decided)
    fig = draw_panels(figure, dpi=40)
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
    write_methods_figure(tmp_path / "m.png", summaries, decided, dpi=40)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_methods_figure_cuts_a_far_bits_per_byte_bar_and_writes_its_value(records, tmp_path):
    from embtransfer.report.figures import methods_panels

    records[2]["document_nll_nats"] = [v * 20 for v in records[2]["document_nll_nats"]]
    records[2]["bits_per_byte"] *= 20
    summaries, decided = spine(tmp_path, records)
    right = methods_panels(summaries, decided).rows[0][1]
    focus = float(summaries[(summaries["family"] == "zeroshot") & (summaries["method"] == "focus")
                            & (summaries["target"] == "gpt2_x")]["value"].iloc[0])
    assert right.xlim[1] < focus
    assert right.texts[right.labels.index("focus")].startswith(f"{focus:.2f} →")
