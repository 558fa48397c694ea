"""The report's figures, Figure 2 (LAPT training loss) and the methods figure, drawn on a
bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot, no global backend
state, no display needed."""

from __future__ import annotations

import math
import os
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from embtransfer.core.atomic import atomic_path
from embtransfer.core.grid import Grid
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.comparisons import with_decisions
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import LaptRun
from embtransfer.report.setting_tables import OWN_TOKENIZER, table_order
from embtransfer.report.tables import ORACLE
from embtransfer.report.texts import prose
from embtransfer.transfer.method_catalog import COMPETING_ROLES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Curves = dict[tuple[str, str], dict[str, tuple[list[int], list[float]]]]


def loss_curves(runs: list[LaptRun], grid: Grid, names: PaperNames,
                config: dict[str, Any]) -> Curves:
    """(lang, source) -> method -> (steps, train losses), the language's GPT target PLM, in
    the config's order; a method without a run is left out (:func:`write_figure2` lists it)."""
    curves: Curves = {}
    by_key = {(r.lang, r.source, r.target, r.method): r for r in runs}
    for lang in grid.langs:
        target = primary_target(config, names, lang)
        for source in grid.sources:
            if not any(grid.wants_lapt(lang, source, target, m) for m in grid.methods):
                continue
            panel = curves[(lang, source)] = {}
            for method in grid.methods:
                run = by_key.get((lang, source, target, method))
                if run is not None and run.train:
                    steps, losses = zip(*sorted(run.train), strict=True)  # in step order
                    panel[method] = (list(steps), list(losses))
    return curves


def _figure(width: float, height: float, dpi: int) -> Figure:
    """A bare figure (inches) on the Agg canvas."""
    # matplotlib is imported here, not at module level: the Snakefile imports this module
    # (through report.build) and a dry run should not pay for matplotlib.
    from matplotlib.backends import backend_agg  # noqa: PLC0415 (Snakefile start-up)
    from matplotlib.figure import Figure  # noqa: PLC0415 (Snakefile start-up)

    fig = Figure(figsize=(width, height), dpi=dpi)
    backend_agg.FigureCanvasAgg(fig)
    return fig


def loss_axis(panel: dict[str, tuple[list[int], list[float]]]) -> tuple[float, float]:
    """A panel's loss axis: from the lowest loss to the highest start among the methods whose
    start lies within three times the median start's height above that lowest loss, so that
    one method starting far off (CLP on small PLMs) is cut at the top instead of squeezing
    every other curve into a band."""
    low = min(min(losses) for _, losses in panel.values())
    starts = sorted(max(losses) for _, losses in panel.values())
    limit = low + 3 * (starts[(len(starts) - 1) // 2] - low)
    top = max(s for s in starts if s <= limit)
    pad = 0.05 * (top - low) or 0.05 * abs(top) or 0.05
    return low - pad, top + pad


def draw_figure2(curves: Curves, targets: dict[str, str | None], methods: list[str],
                 dpi: int = 120) -> Figure:
    """Figure 2 (not saved): a panel per (lang, source), a line per method, one legend beside
    them. A method keeps its colour and style in every panel (ten colours times two styles
    tell twenty methods apart); a curve above the axis (:func:`loss_axis`) is named in its
    panel with its first and last loss."""
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    styles = {m: ("-", "--")[(i // 10) % 2] for i, m in enumerate(methods)}
    panels = list(curves) or [("", "")]
    ncols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / ncols)
    fig = _figure(6 * ncols + 1.6, 4 * nrows, dpi)
    fig.set_layout_engine("constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    handles: dict[str, Any] = {}
    for ax, (lang, source) in zip(axes.flat, panels, strict=False):
        panel = curves.get((lang, source), {})
        for method, (steps, losses) in panel.items():
            (handles[method],) = ax.plot(steps, losses, label=method, linewidth=1.2,
                                         color=colours.get(method),
                                         linestyle=styles.get(method, "-"))
        if panel:
            low, top = loss_axis(panel)
            ax.set_ylim(low, top)
            cut = [f"{m} {losses[0]:.1f} → {losses[-1]:.1f}"
                   for m, (_, losses) in panel.items() if max(losses) > top]
            if cut:
                ax.text(0.99, 0.98, "above the axis: " + "; ".join(cut), ha="right",
                        va="top", fontsize="small", transform=ax.transAxes, color="0.35")
        else:
            ax.text(0.5, 0.5, "missing: no LAPT metrics", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_title(f"{lang}, {source}, target {targets.get(lang) or '?'}" if lang else "")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
    if handles:
        ordered = [m for m in methods if m in handles]
        fig.legend([handles[m] for m in ordered], ordered, loc="outside right upper",
                   fontsize="small")
    fig.suptitle("Figure 2: LAPT training loss")
    return fig


def write_figure2(path: str | os.PathLike, runs: list[LaptRun], grid: Grid, names: PaperNames,
                  config: dict[str, Any], dpi: int = 120) -> tuple[Curves, list[str]]:
    """Draw and write Figure 2 as PNG, atomically; returns the plotted curves and the planned
    ones (method x panel) that have no training-loss points."""
    curves = loss_curves(runs, grid, names, config)
    targets = {lang: primary_target(config, names, lang) for lang in grid.langs}
    with atomic_path(path) as tmp:
        draw_figure2(curves, targets, grid.methods, dpi=dpi).savefig(tmp, format="png")
    return curves, [f"lang={lang} source={source} method={method}"
                    for (lang, source), panel in curves.items() for method in grid.methods
                    if method not in panel and grid.wants_lapt(lang, source, targets[lang], method)]


#: The marks of the methods figure: a paired test's difference that clears the report's
#: correction (:mod:`embtransfer.core.paired`), from the setting's best and from Random.
VS_BEST_MARK, VS_RANDOM_MARK = "*", "†"
#: The smallest P@10 axis (percent): a panel of bars at 0 still has a readable axis.
MIN_P_AXIS = 2.0


@dataclass
class Panel:
    """One panel of the methods figure: a horizontal bar per label, top first, ± ``errors``,
    ``texts`` at each error bar's end."""

    title: str
    labels: list[str]
    methods: list[str]  # the method of each bar (its colour)
    values: list[float]
    errors: list[float]
    texts: list[str]
    xlim: tuple[float, float]
    note: str = ""  # written in the panel's corner (the oracle, drawn to no scale)
    empty: str = ""  # the panel has no bars: why (draw_panels leaves it out)


@dataclass
class MethodsFigure:
    """The methods figure's rows, each a pair of panels (alignment, zero-shot), and the
    family-wise level of their marks."""

    rows: list[tuple[Panel, Panel]] = field(default_factory=list)
    alpha: float = FAMILY_ALPHA


def _text(line: pd.Series) -> str:
    """A bar's text: ``best`` for the setting's best, then the mark of each test it clears
    (its relation to the best or to Random is ``better`` or ``worse``)."""
    tests = (("vs_best", VS_BEST_MARK), ("vs_random", VS_RANDOM_MARK))
    marks = "".join(mark for column, mark in tests if line[column] in ("better", "worse"))
    # the setting's best is ranked first and has no test against the best (itself)
    return f"best {marks}".strip() if line["rank"] == 1 and not line["vs_best"] else marks


def _panel(lines: pd.DataFrame, title: str, label: str, alignment: bool) -> Panel:
    """The bars of ``lines`` (one setting, or one method across settings), the value axis
    past every error bar with room for the marks. Alignment (P@10): the oracle left out of
    the bars and written in the note, the axis at least :data:`MIN_P_AXIS`. Bits per byte: a
    bar far beyond the others' (CLP's) is cut at the axis' end with its value written
    there, so the rest stay readable."""
    drawn = lines[lines["method"] != ORACLE] if alignment else lines
    values = [float(v) for v in drawn["value"]]
    errors = [float(e) for e in drawn["se"].fillna(0)]
    texts = [_text(line) for _, line in drawn.iterrows()]
    ends = [v + e for v, e in zip(values, errors, strict=True)]
    top = max([MIN_P_AXIS if alignment else 0.0, *(1.25 * end for end in ends)])
    limit = 0.0 if alignment or not values else 2.5 * float(pd.Series(values).median())
    if limit > 0 and max(ends) > limit:
        top = limit * 1.4
        texts = [f"{v:.2f} → {t}".strip() if end > limit else t
                 for v, end, t in zip(values, ends, texts, strict=True)]
    oracle = lines.loc[lines["method"] == ORACLE, "value"] if alignment else []
    return Panel(title, [str(v) for v in drawn[label]], list(drawn["method"]), values, errors,
                 texts, xlim=(0.0, top or 1.0),
                 note="\n".join(f"{ORACLE}: {v:.1f} (not drawn)" for v in oracle),
                 empty="" if len(drawn) else "no results")


def _row(aligned: pd.DataFrame, zeroshot: pd.DataFrame, title: str, label: str = "method"
         ) -> tuple[Panel, Panel]:
    return (_panel(aligned, f"{title}: held-out P@10 (%)", label, alignment=True),
            _panel(zeroshot, f"{title}: zero-shot bits per byte", label, alignment=False))


def methods_panels(summaries: pd.DataFrame, decided: pd.DataFrame) -> MethodsFigure:
    """What the methods figure draws: per (language, source), a row of two panels for every
    target PLM with two or more competing methods (held-out P@10 of the transferred
    checkpoints' input rows in alignment.md's order, bits per byte in zeroshot.md's), and
    one row for the methods run alone with some target PLM (SALT with BERT and T5): a bar
    per target PLM it ran with, the competing setting's first. Values and marks are the
    spine's (:func:`with_decisions`), never a test of the figure's own."""
    lines = with_decisions(summaries, decided)
    # P@10: it separates methods whose P@1 is a handful of tokens
    aligned = lines[(lines["family"] == "alignment") & (lines["metric"] == "p_at_10")
                    & (lines["split"] == "held_out") & (lines["stage"] == "transfer")
                    & (lines["side"] == "input")]
    zeroshot = lines[(lines["family"] == "zeroshot") & (lines["metric"] == "bits_per_byte")
                     & (lines["target"] != OWN_TOKENIZER)]
    figure = MethodsFigure(alpha=decided.attrs.get("alpha", FAMILY_ALPHA))
    for (lang, source), shown in pd.concat([aligned, zeroshot]).groupby(["lang", "source"]):
        parts = [shown[shown["family"] == family] for family in ("alignment", "zeroshot")]
        targets = sorted(set(shown["target"]))
        ranked = shown[shown["role"].isin(COMPETING_ROLES)]
        competing = {t: set(ranked[ranked["target"] == t]["method"]) for t in targets}
        shared = [t for t in targets if len(competing[t]) >= 2]
        for target in shared:
            figure.rows.append(_row(*(table_order(part[part["target"] == target])
                                      for part in parts), f"{lang}, {source}, {target}"))
        alone = sorted({m for t in targets if len(competing[t]) == 1 for m in competing[t]})
        if alone:
            order = shared + [t for t in targets if t not in shared]
            figure.rows.append(_row(*(_across(part, alone, order) for part in parts),
                                    f"{lang}, {source}: {', '.join(alone)} across target PLMs",
                                    label="bar"))
    return figure


def _across(lines: pd.DataFrame, methods: list[str], targets: list[str]) -> pd.DataFrame:
    """The lines of ``methods`` by method, then in the order of ``targets``, each labelled
    ``bar`` (method, target)."""
    mine = lines[lines["method"].isin(methods)]
    rank = mine["method"].map(methods.index) * len(targets) + mine["target"].map(targets.index)
    return mine.loc[rank.sort_values(kind="stable").index].assign(
        bar=lambda f: f["method"] + ", " + f["target"])


def _draw_panel(ax: Any, panel: Panel, colours: dict[str, str]) -> None:
    ax.set_title(panel.title, fontsize="small")
    positions = list(range(len(panel.labels)))
    ax.barh(positions, panel.values, xerr=panel.errors, capsize=2,
            color=[colours[m] for m in panel.methods])
    ax.set_yticks(positions, labels=panel.labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(*panel.xlim)
    for y, value, error, text in zip(positions, panel.values, panel.errors, panel.texts,
                                     strict=True):
        if text:
            ax.text(min(value + error, panel.xlim[1]), y, f" {text}", va="center",
                    fontsize="small")
    if panel.note:
        ax.text(0.99, 0.02, panel.note, ha="right", va="bottom", fontsize="small",
                transform=ax.transAxes, color="0.35")
    ax.grid(axis="x", alpha=0.3)


#: The suptitle's band at the figure's top, in inches: the panels' own titles start below it.
TITLE_BAND = 0.35


def drawn_panels(figure: MethodsFigure) -> list[list[Panel | None]]:
    """The panels :func:`draw_panels` draws, by row and column: a panel without data is
    left out (``None``, its place left blank), a row without any panel is dropped, and so is
    a column (alignment, zero-shot) without any, so the figure has no empty axis."""
    columns = [c for c in range(2) if any(not row[c].empty for row in figure.rows)]
    rows = [[None if row[c].empty else row[c] for c in columns] for row in figure.rows]
    return [row for row in rows if any(panel is not None for panel in row)]


def draw_panels(figure: MethodsFigure, dpi: int = 120) -> Figure:
    """The methods figure (not saved) of :func:`drawn_panels`, its title in a band above
    them and the legend below; with no panel, a figure that says so."""
    rows = drawn_panels(figure)
    if not rows:
        fig = _figure(8, 1.2, dpi)
        fig.text(0.5, 0.5, "Methods per setting: no held-out alignment or zero-shot results",
                 ha="center", va="center")
        return fig
    methods = sorted({m for row in rows for panel in row if panel for m in panel.methods})
    from matplotlib import colormaps  # noqa: PLC0415 (Snakefile start-up)
    # tab20 (pairs of dark and light shades of ten hues) less its greys: grey is the oracle's
    palette = [c for i, c in enumerate(colormaps["tab20"].colors) if i not in (14, 15)]
    colours = {m: "0.6" if m == ORACLE else palette[i % len(palette)]
               for i, m in enumerate(methods)}
    heights = [1.2 + 0.22 * max(len(panel.labels) for panel in row if panel) for row in rows]
    ncols = len(rows[0])
    width = 12.0 if ncols == 2 else 7.0
    legend = prose("methods_legend", best_mark=VS_BEST_MARK, random_mark=VS_RANDOM_MARK,
                   correction=CORRECTION, alpha=figure.alpha, oracle=ORACLE)
    lines = textwrap.wrap(legend, round(150 * width / 12))
    # the legend's lines below the panels: about 0.17 inch each at the small font
    legend_height = 0.17 * len(lines) + 0.2
    height = sum(heights) + 0.5 + TITLE_BAND + legend_height
    fig = _figure(width, height, dpi)
    grid = fig.add_gridspec(len(rows), ncols, height_ratios=heights)
    for i, row in enumerate(rows):
        for j, panel in enumerate(row):
            if panel is not None:
                _draw_panel(fig.add_subplot(grid[i, j]), panel, colours)
    # the suptitle in its own band at the top (matplotlib's default y = 0.98 of a tall
    # figure is half an inch down, over the first panels' titles), the panels below it
    fig.suptitle("Methods per setting: held-out alignment (P@10) and zero-shot bits per byte",
                 y=1 - 0.05 / height, va="top")
    # the legend's baseline 0.08 inch up: its last line's descenders inside the figure
    fig.text(0.01, 0.08 / height, "\n".join(lines), fontsize="small")
    fig.tight_layout(rect=(0, legend_height / height, 1, 1 - TITLE_BAND / height))
    return fig


def write_methods_figure(path: str | os.PathLike, summaries: pd.DataFrame,
                         decided: pd.DataFrame, dpi: int = 120) -> None:
    """Write the methods figure (:func:`methods_panels`, :func:`draw_panels`) as PNG, atomically."""
    with atomic_path(path) as tmp:
        draw_panels(methods_panels(summaries, decided), dpi=dpi).savefig(tmp, format="png")
