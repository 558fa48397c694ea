"""The report's figures: Figure 2, LAPT training-loss curves, one panel per (language,
source), a line per method; and the methods figure, per (language, source, target PLM)
setting held-out alignment P@10 and zero-shot bits per byte with standard errors and the
paired tests' marks (:func:`methods_panels` prepares what it draws).

Drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot, no
global backend state, no display needed.
"""

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
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import LaptRun
from embtransfer.report.tables import ORACLE
from embtransfer.report.zeroshot import OWN_TOKENIZER
from embtransfer.transfer.method_catalog import SOURCE_MODEL

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Curves = dict[tuple[str, str], dict[str, tuple[list[int], list[float]]]]


def loss_curves(runs: list[LaptRun], grid: Grid, names: PaperNames,
                config: dict[str, Any]) -> Curves:
    """(lang, source) -> method -> (steps, train losses), the language's GPT target PLM.

    Panels and methods follow the config order; a panel or method without a run is left
    out of its panel (and listed by :func:`missing_curves`).
    """
    curves: Curves = {}
    by_key = {(r.lang, r.source, r.target, r.method): r for r in runs}
    for lang in grid.langs:
        target = primary_target(config, names, lang)
        for source in grid.sources:
            if not any(grid.wants_lapt(lang, source, target, m) for m in grid.methods):
                continue
            panel = {}
            for method in grid.methods:
                run = by_key.get((lang, source, target, method))
                if run is not None and run.train:
                    points = sorted(run.train)
                    panel[method] = ([s for s, _ in points], [v for _, v in points])
            curves[(lang, source)] = panel
    return curves


def missing_curves(curves: Curves, grid: Grid, targets: dict[str, str | None]) -> list[str]:
    """The planned curves (method x panel) that have no training-loss points."""
    return [f"lang={lang} source={source} method={method}"
            for (lang, source), panel in curves.items()
            for method in grid.methods
            if method not in panel and grid.wants_lapt(lang, source, targets[lang], method)]


def draw_figure2(curves: Curves, targets: dict[str, str | None], methods: list[str],
                 dpi: int = 120) -> Figure:
    """The figure (not saved): one panel per (lang, source), a line per method.

    A method keeps its colour and line style in every panel (its place in ``methods``);
    ten colours times two styles tell twenty methods apart. The loss axis is
    logarithmic: a method that starts far off (CLP on small PLMs) does not flatten
    the others.
    """
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    styles = {m: ("-", "--")[(i // 10) % 2] for i, m in enumerate(methods)}
    panels = list(curves) or [("", "")]
    ncols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / ncols)
    # matplotlib is imported here, not at module level: the Snakefile imports this module
    # (through report.build) and a dry run should not pay for matplotlib.
    from matplotlib.backends import backend_agg  # noqa: PLC0415 (Snakefile start-up)
    from matplotlib.figure import Figure  # noqa: PLC0415 (Snakefile start-up)

    fig = Figure(figsize=(6 * ncols, 4 * nrows), dpi=dpi)
    backend_agg.FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, panels, strict=False):
        lang, source = key
        panel = curves.get(key, {})
        for method, (steps, losses) in panel.items():
            ax.plot(steps, losses, label=method, linewidth=1.2, color=colours.get(method),
                    linestyle=styles.get(method, "-"))
        if panel and all(min(losses) > 0 for _, losses in panel.values()):
            ax.set_yscale("log")
        ax.set_title(f"{lang}, {source}, target {targets.get(lang) or '?'}" if lang else "")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss")
        if panel:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "missing: no LAPT metrics", ha="center", va="center",
                    transform=ax.transAxes)
        ax.grid(alpha=0.3)
    fig.suptitle("Figure 2: LAPT training loss")
    fig.tight_layout()
    return fig


def write_figure2(path: str | os.PathLike, runs: list[LaptRun], grid: Grid, names: PaperNames,
                  config: dict[str, Any], dpi: int = 120) -> Curves:
    """Draw and write Figure 2 as PNG, atomically; returns the plotted curves."""
    curves = loss_curves(runs, grid, names, config)
    targets = {lang: primary_target(config, names, lang) for lang in grid.langs}
    fig = draw_figure2(curves, targets, grid.methods, dpi=dpi)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return curves


#: matplotlib's tab20 palette, as hex (its pairs of dark and light shades of ten hues).
_TAB20 = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)
#: The marks of the methods figure: a paired test's difference that clears the report's
#: correction (:mod:`embtransfer.core.paired`), from the setting's best and from Random.
VS_BEST_MARK, VS_RANDOM_MARK = "*", "†"
#: The alignment metric the figure draws: P@10 separates methods whose P@1 is a handful of
#: tokens.
ALIGNMENT_METRIC = "p_at_10"
#: The smallest P@10 axis (percent): a panel of bars at 0 still has a readable axis.
MIN_P_AXIS = 2.0


@dataclass
class Panel:
    """One panel of the methods figure, ready to draw: a horizontal bar per label, top
    first, ± ``errors``, ``texts`` at each error bar's end, the value axis ``xlim``."""

    title: str
    labels: list[str]
    methods: list[str]  # the method of each bar (its colour)
    values: list[float]
    errors: list[float]
    texts: list[str]
    xlim: tuple[float, float]
    note: str = ""  # written in the panel's corner (the oracle, drawn to no scale)
    empty: str = ""  # the panel has no bars: why (draw_methods leaves it out)


@dataclass
class MethodsFigure:
    """The methods figure's rows, each a pair of panels (alignment, zero-shot)."""

    rows: list[tuple[Panel, Panel]] = field(default_factory=list)


def held_out_alignment(alignment: pd.DataFrame) -> pd.DataFrame:
    """The alignment lines the methods figure shows: held-out concepts, the transferred
    checkpoints' input rows (zero-shot is before any training too)."""
    keep = (
        (alignment["split"] == "held_out")
        & (alignment["stage"] == "transfer")
        & (alignment["side"] == "input")
    )
    return alignment[keep]


def _marks(line: pd.Series, clears: pd.Series, tests: tuple[tuple[str, str], ...]) -> str:
    """A bar's text: ``best`` for the setting's best, then the mark of each test it clears."""
    marks = "".join(mark for column, mark in tests if column in clears and clears[column])
    if line["method"] == line.get("best"):
        return f"best {marks}".strip()
    return marks


def _value_axis(values: list[float], errors: list[float], floor: float) -> float:
    """The axis' upper end: past every error bar, with room for the marks, never below
    ``floor`` (bars all at 0 keep an axis a reader can read)."""
    ends = [v + e for v, e in zip(values, errors, strict=True)]
    return max([floor, *(1.25 * e for e in ends)])


def _alignment_panel(lines: pd.DataFrame, clears: pd.DataFrame, title: str,
                     label: str = "method") -> Panel:
    """P@10 bars of ``lines`` (one setting, or one method across settings), the oracle left
    out of the bars and written in the note."""
    metric = ALIGNMENT_METRIC
    tests = (("vs_best_p", VS_BEST_MARK), ("vs_random_p", VS_RANDOM_MARK))
    drawn = lines[lines["method"] != ORACLE]
    oracle = lines[lines["method"] == ORACLE]
    values = [float(v) for v in drawn[metric]]
    errors = [float(e) for e in drawn[f"{metric}_se"].fillna(0)]
    note = "".join(
        f"{ORACLE}: {line[metric]:.1f} (not drawn)\n" for _, line in oracle.iterrows()
    ).rstrip("\n")
    return Panel(
        title=title,
        labels=[str(v) for v in drawn[label]],
        methods=list(drawn["method"]),
        values=values,
        errors=errors,
        texts=[_marks(line, clears.loc[i], tests) for i, line in drawn.iterrows()],
        xlim=(0.0, _value_axis(values, errors, MIN_P_AXIS)),
        note=note,
        empty="" if len(drawn) else "no results",
    )


def _zeroshot_panel(lines: pd.DataFrame, clears: pd.DataFrame, title: str,
                    label: str = "method") -> Panel:
    """Bits-per-byte bars of ``lines``; a bar far beyond the others' (CLP's) is cut at the
    axis' end with its value written there, so the rest stay readable."""
    tests = (("vs_best_p", VS_BEST_MARK), ("vs_random_p", VS_RANDOM_MARK))
    values = [float(v) for v in lines["bits_per_byte"]]
    errors = [float(e) for e in lines["bits_per_byte_se"].fillna(0)]
    texts = [_marks(line, clears.loc[i], tests) for i, line in lines.iterrows()]
    top = _value_axis(values, errors, 0.0)
    limit = 2.5 * float(pd.Series(values).median()) if values else 0.0
    if limit > 0 and max(v + e for v, e in zip(values, errors, strict=True)) > limit:
        top = limit * 1.4
        texts = [f"{v:.2f} → {t}".strip() if v + e > limit else t
                 for v, e, t in zip(values, errors, texts, strict=True)]
    return Panel(
        title=title,
        labels=[str(v) for v in lines[label]],
        methods=list(lines["method"]),
        values=values,
        errors=errors,
        texts=texts,
        xlim=(0.0, top or 1.0),
        empty="" if len(lines) else "no results",
    )


def _in(frame: pd.DataFrame, lang: str, source: str, targets: list[str]) -> pd.DataFrame:
    return frame[(frame["lang"] == lang) & (frame["source"] == source)
                 & frame["target"].isin(targets)]


def figure_lines(summaries: pd.DataFrame, decided: pd.DataFrame, family: str, metric: str
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(lines, marks) of one family and metric: per method and setting its value (column
    ``metric``), ``{metric}_se``, ``best`` (the setting's first), ``role``; the marks are the
    decided comparisons' ``clears`` against the best and Random (columns ``vs_best_p``,
    ``vs_random_p``), never a test of the figure's own."""
    part = summaries[(summaries["family"] == family) & (summaries["metric"] == metric)]
    setting = ["stage", "lang", "source", "target", "side", "split"]
    lines = part.rename(columns={"value": metric, "se": f"{metric}_se"}).copy()
    first = part[part["rank"] == 1].sort_values("method").drop_duplicates(setting)
    first = first.set_index(setting)["method"]
    lines["best"] = [first.get(tuple(k), "") for k in part[setting].itertuples(index=False)]
    marks = pd.DataFrame(False, index=lines.index, columns=["vs_best_p", "vs_random_p"])
    tests = decided[(decided["family"] == family) & (decided["metric"] == metric)]
    clears = tests.set_index([*setting, "method", "versus"])["clears"]
    for i, line in lines.iterrows():
        for versus in ("best", "random"):
            marks.loc[i, f"vs_{versus}_p"] = bool(clears.get(
                (*(line[k] for k in setting), line["method"], versus), False))
    return lines.reset_index(drop=True), marks.reset_index(drop=True)


def table_order(group: pd.DataFrame) -> pd.DataFrame:
    """The lines of one setting as the tables show them: the oracle first, then by rank."""
    return group.assign(_o=(group["method"] != ORACLE).astype(int)).sort_values(
        ["_o", "rank", "method"]).drop(columns="_o")


def methods_panels(summaries: pd.DataFrame, decided: pd.DataFrame) -> MethodsFigure:
    """What the methods figure draws: per (language, source), a row of two panels for every
    target PLM with two or more competing methods (held-out P@10 in alignment.md's order,
    bits per byte in zeroshot.md's), and one row for the methods run alone with some target
    PLM (SALT with BERT and T5): a bar per target PLM it ran with, the competing setting's
    first. Marks are the tables' own decisions (:func:`alignment_clears`,
    :func:`zeroshot_clears`, over each whole table)."""
    alignment, aligned_clears = figure_lines(summaries, decided, "alignment", ALIGNMENT_METRIC)
    aligned = held_out_alignment(alignment)
    zeroshot, zeroshot_marks = figure_lines(summaries, decided, "zeroshot", "bits_per_byte")
    zeroshot = zeroshot[zeroshot["target"] != OWN_TOKENIZER]
    keys = ["lang", "source", "target"]
    settings = sorted({tuple(k) for k in aligned[keys].to_numpy()}
                      | {tuple(k) for k in zeroshot[keys].to_numpy()})
    figure = MethodsFigure()
    for lang, source in sorted({(s[0], s[1]) for s in settings}):
        targets = [s[2] for s in settings if s[:2] == (lang, source)]
        competing = {
            t: set(_in(zeroshot, lang, source, [t])["method"])
            | set(_in(aligned, lang, source, [t])["method"]) for t in targets
        }
        competing = {t: ms - {ORACLE, SOURCE_MODEL} for t, ms in competing.items()}
        shared = [t for t in targets if len(competing[t]) >= 2]
        for target in shared:
            title = f"{lang}, {source}, {target}"
            lines = table_order(_in(aligned, lang, source, [target]))
            figure.rows.append((
                _alignment_panel(lines, aligned_clears, f"{title}: held-out P@10 (%)"),
                _zeroshot_panel(table_order(_in(zeroshot, lang, source, [target])),
                                zeroshot_marks, f"{title}: zero-shot bits per byte"),
            ))
        alone = sorted({m for t in targets if len(competing[t]) == 1 for m in competing[t]})
        if not alone:
            continue
        order = shared + [t for t in targets if t not in shared]
        title = f"{lang}, {source}: {', '.join(alone)} across target PLMs"
        figure.rows.append((
            _alignment_panel(_across(_in(aligned, lang, source, order), alone, order),
                             aligned_clears, f"{title}: held-out P@10 (%)", label="bar"),
            _zeroshot_panel(_across(_in(zeroshot, lang, source, order), alone, order),
                            zeroshot_marks, f"{title}: zero-shot bits per byte", label="bar"),
        ))
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


LEGEND = (
    f"Bars: ± one standard error, in the tables' order. {VS_BEST_MARK}: differs from the "
    f"setting's best method, {VS_RANDOM_MARK}: differs from Random (paired tests over the same "
    f"tokens or documents, {CORRECTION} at family-wise α = {FAMILY_ALPHA} over each table's "
    f"tests); best: the setting's best method. {ORACLE}: the world's oracle (translation rows "
    "where the world knows a token's meaning, Mean's row elsewhere): the upper bound of the "
    "alignment metrics, written beside the P@10 bars and not drawn to scale; in bits per "
    "byte it is not a bound (grey bar), and neither it nor the source model is ranked. "
    "A setting without lines in a table has no panel of that table."
)
#: The suptitle's band at the figure's top, in inches: the panels' own titles start below it.
TITLE_BAND = 0.35


def drawn_panels(figure: MethodsFigure) -> list[list[Panel | None]]:
    """The panels :func:`draw_methods` draws, by row and column: a panel without data is
    left out (``None``, its place left blank), a row without any panel is dropped, and so is
    a column (alignment, zero-shot) without any, so the figure has no empty axis."""
    columns = [c for c in range(2) if any(not row[c].empty for row in figure.rows)]
    rows = [[None if row[c].empty else row[c] for c in columns] for row in figure.rows]
    return [row for row in rows if any(panel is not None for panel in row)]


def draw_methods(summaries: pd.DataFrame, decided: pd.DataFrame, dpi: int = 120) -> Figure:
    """The figure (not saved) of :func:`methods_panels`."""
    return draw_panels(methods_panels(summaries, decided), dpi=dpi)


def draw_panels(figure: MethodsFigure, dpi: int = 120) -> Figure:
    """The methods figure of ``figure``'s panels with data (:func:`drawn_panels`), a row of
    panels per row that has any, the figure's title in a band above them and the legend
    below; with no panel, a figure that says so."""
    rows = drawn_panels(figure)
    from matplotlib.backends import backend_agg  # noqa: PLC0415 (Snakefile start-up)
    from matplotlib.figure import Figure  # noqa: PLC0415 (Snakefile start-up)

    if not rows:
        fig = Figure(figsize=(8, 1.2), dpi=dpi)
        backend_agg.FigureCanvasAgg(fig)
        fig.text(0.5, 0.5, "Methods per setting: no held-out alignment or zero-shot results",
                 ha="center", va="center")
        return fig
    methods = sorted({m for row in rows for panel in row if panel for m in panel.methods})
    # eighteen colours, none grey: grey is the oracle's
    palette = [c for i, c in enumerate(_TAB20) if i not in (14, 15)]
    colours = {m: "0.6" if m == ORACLE else palette[i % len(palette)]
               for i, m in enumerate(methods)}
    heights = [1.2 + 0.22 * max(len(panel.labels) for panel in row if panel) for row in rows]
    ncols = len(rows[0])
    width = 12.0 if ncols == 2 else 7.0
    legend = textwrap.wrap(LEGEND, round(150 * width / 12))
    # the legend's lines below the panels: about 0.17 inch each at the small font
    legend_height = 0.17 * len(legend) + 0.2
    height = sum(heights) + 0.5 + TITLE_BAND + legend_height
    fig = Figure(figsize=(width, height), dpi=dpi)
    backend_agg.FigureCanvasAgg(fig)
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
    fig.text(0.01, 0.08 / height, "\n".join(legend), fontsize="small")
    fig.tight_layout(rect=(0, legend_height / height, 1,
                           1 - TITLE_BAND / height))
    return fig


def write_methods_figure(path: str | os.PathLike, summaries: pd.DataFrame,
                         decided: pd.DataFrame, dpi: int = 120) -> None:
    """Draw and write the methods figure of the spine's summaries and decided comparisons
    as PNG, atomically."""
    fig = draw_methods(summaries, decided, dpi=dpi)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
