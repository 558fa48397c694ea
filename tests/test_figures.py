"""The methods figure's layout (embtransfer.report.figures): only panels with data are drawn,
and the figure's title and legend stay clear of the panels."""

from __future__ import annotations

import io

import numpy as np
import pytest

from embtransfer.report.comparisons import (
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    compare_setting,
    decide,
    frame_of,
)
from embtransfer.report.figures import (
    VS_BEST_MARK,
    VS_RANDOM_MARK,
    MethodsFigure,
    Panel,
    draw_panels,
    drawn_panels,
    methods_panels,
)


def panel(title: str, bars: int = 3) -> Panel:
    """A panel of ``bars`` methods, the first the best and apart from Random, the others
    apart from the best; ``bars=0``: a panel without data, as methods_panels makes it for a
    setting a table has no lines of."""
    methods = [f"method_{i}" for i in range(bars)]
    return Panel(
        title=title, labels=methods, methods=methods,
        values=[1.0 + i for i in range(bars)], errors=[0.1] * bars,
        texts=[f"best {VS_RANDOM_MARK}"] + [VS_BEST_MARK] * (bars - 1),
        xlim=(0.0, bars + 2.0), empty="" if bars else "no results")


def setting(lang: str, aligned: int = 3, zeroshot: int = 3) -> tuple[Panel, Panel]:
    return (panel(f"{lang}: held-out P@10 (%)", aligned),
            panel(f"{lang}: zero-shot bits per byte", zeroshot))


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.texts] + [
        t.get_text() for ax in fig.axes for t in ax.texts]


def test_a_panel_without_data_is_not_drawn():
    """A real-text run's language without dictionary truth: zero-shot lines, no alignment
    lines. Its zero-shot panel is drawn in the zero-shot column; no empty axis stands for
    its alignment."""
    figure = MethodsFigure([setting("xx"), setting("yy", aligned=0)])
    fig = draw_panels(figure, dpi=40)
    assert [ax.get_title() for ax in fig.axes] == [
        "xx: held-out P@10 (%)", "xx: zero-shot bits per byte", "yy: zero-shot bits per byte"]
    for ax in fig.axes:
        assert len(ax.patches) == 3, ax.get_title()
    assert not any("no results" in text for text in _texts(fig))
    left, right, lone = (ax.get_position() for ax in fig.axes)
    assert lone.x0 == pytest.approx(right.x0) and lone.y1 < right.y0 and lone.x0 > left.x1
    # the marks are still written beside the bars
    assert [t.get_text().strip() for t in fig.axes[2].texts] == [
        f"best {VS_RANDOM_MARK}", VS_BEST_MARK, VS_BEST_MARK]


def test_a_row_or_a_column_without_data_is_dropped():
    figure = MethodsFigure([setting("xx", aligned=0), setting("yy", 0, 0),
                            setting("zz", aligned=0, zeroshot=2)])
    rows = drawn_panels(figure)
    assert [[p.title for p in row] for row in rows] == [
        ["xx: zero-shot bits per byte"], ["zz: zero-shot bits per byte"]]
    fig = draw_panels(figure, dpi=40)
    assert [len(ax.patches) for ax in fig.axes] == [3, 2]
    assert fig.get_figwidth() < 12  # one column, not two with an empty one
    assert not any("no results" in text for text in _texts(fig))


@pytest.mark.parametrize("rows", [[], [setting("xx", 0, 0)]])
def test_no_data_at_all_draws_no_axis(rows):
    fig = draw_panels(MethodsFigure(rows), dpi=40)
    assert fig.axes == []
    assert "no held-out alignment or zero-shot results" in _texts(fig)[0]
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


# one row of panels; a real-text run's nine (three languages times three target PLMs),
# where a title placed at a fraction of the figure's height came down over the first row
@pytest.mark.parametrize("settings", [1, 2, 9])
def test_the_title_and_the_legend_clear_every_panel(settings):
    """The figure's title sits above every panel with its title, the legend below every
    panel with its tick labels: nothing is drawn over a panel, however tall the figure."""
    figure = MethodsFigure([setting(f"l{i}", 3 + 5 * (i % 3), 16) for i in range(settings)])
    fig = draw_panels(figure, dpi=60)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    legend = fig.texts[-1].get_window_extent(renderer)
    assert fig.texts[-1].get_text().startswith("Bars:")
    assert len(fig.axes) == 2 * settings
    for ax in fig.axes:
        drawn = ax.get_tightbbox(renderer)  # the axis with its title and tick labels
        assert title.y0 > drawn.y1, ax.get_title()
        assert legend.y1 < drawn.y0, ax.get_title()
    assert title.y1 <= fig.bbox.y1 and title.x0 >= 0 and legend.y0 >= 0


@pytest.mark.parametrize("alpha", [0.5, 0.01])
def test_the_legend_states_the_alpha_the_marks_were_decided_at(alpha):
    """A run's ``report.family_alpha`` decides its comparisons (build.compare records it in
    the decided table's attrs); the legend beside the marks names that level."""
    rng = np.random.default_rng(0)
    n_docs = 50
    scores = {"focus": rng.normal(100, 5, n_docs), "salt": rng.normal(101, 5, n_docs),
              "random": rng.normal(130, 5, n_docs)}
    setting = {"family": "zeroshot", "stage": "transfer", "lang": "xx", "source": "src",
               "target": "gpt2_x", "metric": "bits_per_byte"}
    lines, made = compare_setting(setting, scores, 0, np.full(n_docs, 100.0))
    decided = decide(frame_of(made, TEST_COLUMNS), alpha)
    decided.attrs["alpha"] = alpha
    fig = draw_panels(methods_panels(frame_of(lines, SUMMARY_COLUMNS), decided), dpi=40)
    assert [ax.get_title() for ax in fig.axes] == ["xx, src, gpt2_x: zero-shot bits per byte"]
    legend = fig.texts[-1].get_text().replace("\n", " ")
    assert legend.startswith("Bars:")
    assert f"family-wise α = {alpha} " in legend


def test_figure2_keeps_a_far_start_off_the_axis_and_the_legend_off_the_curves():
    """A method that starts far above the others (CLP at 70 where the rest start near 8) is
    cut at the axis' top and named in the panel, so the others' differences fill the axis;
    the legend sits beside the panels, over no curve."""
    from embtransfer.report.figures import draw_figure2

    steps = list(range(1, 41))
    curves = {("de", "src"): {
        "clp": (steps, [70.0, 30.0, *[7.0 - 0.02 * s for s in steps[2:]]]),
        "salt": (steps, [8.0 - 0.05 * s for s in steps]),
        "focus": (steps, [8.2 - 0.05 * s for s in steps]),
    }, ("vi", "src"): {"salt": (steps, [9.0 - 0.05 * s for s in steps])}}
    fig = draw_figure2(curves, {"de": "gpt2_de", "vi": "gpt2_vi"}, ["salt", "focus", "clp"])
    fig.canvas.draw()
    de, vi = [ax for ax in fig.axes if ax.get_visible()]
    low, top = de.get_ylim()
    assert 8.2 <= top < 30.0 and low <= 8.2 - 0.05 * 40
    assert de.get_yscale() == "linear"
    assert any("clp" in t.get_text() and "70" in t.get_text() for t in de.texts)
    assert not any("salt" in t.get_text() for t in de.texts)
    assert de.get_legend() is None and vi.get_legend() is None
    (legend,) = fig.legends
    assert {t.get_text() for t in legend.get_texts()} == {"salt", "focus", "clp"}
    box = legend.get_window_extent()
    for ax in (de, vi):
        assert not box.overlaps(ax.get_window_extent())
