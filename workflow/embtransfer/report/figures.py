"""The report's figures: Figure 2, LAPT training-loss curves, one panel per (language,
source), a line per method; and the methods figure, per (language, source, target PLM)
setting held-out alignment P@1 and zero-shot bits per byte with standard errors and the
paired tests' marks.

Drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot, no
global backend state, no display needed.
"""

from __future__ import annotations

import math
import os
import textwrap
from typing import TYPE_CHECKING, Any

import pandas as pd

from embtransfer.core.atomic import atomic_path
from embtransfer.core.grid import Grid
from embtransfer.core.paired import ALPHA
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import LaptRun
from embtransfer.report.tables import ORACLE
from embtransfer.report.zeroshot import OWN_TOKENIZER

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
#: The marks of the methods figure: a paired test's difference that clears ALPHA.
VS_BEST_MARK, VS_RANDOM_MARK = "*", "†"


def held_out_p_at_1(alignment: pd.DataFrame) -> pd.DataFrame:
    """The alignment lines the methods figure shows: held-out concepts, the transferred
    checkpoints' input rows (zero-shot is before any training too)."""
    keep = (
        (alignment["split"] == "held_out")
        & (alignment["stage"] == "transfer")
        & (alignment["side"] == "input")
    )
    return alignment[keep]


def _marks(line: Any, prefixes: tuple[tuple[str, str], ...]) -> str:
    """The marks of one bar: each paired test whose p-value is below ALPHA."""
    return "".join(
        mark
        for column, mark in prefixes
        if column in line and not pd.isna(line[column]) and line[column] < ALPHA
    )


def _bar_panel(ax: Any, lines: pd.DataFrame, value: str, error: str,
               marks: tuple[tuple[str, str], ...], colours: dict[str, str]) -> None:
    """One horizontal bar per method, ± one standard error, its paired-test marks at the
    error bar's end; the best method first. A bar far beyond the others' (CLP's bits per
    byte) is cut at the axis' end with its value written there, so the rest stay readable."""
    lines = lines.sort_values(value, ascending=value != "p_at_1")
    positions = list(range(len(lines)))
    ax.barh(positions, lines[value], xerr=lines[error].fillna(0), capsize=2,
            color=[colours[m] for m in lines["method"]])
    ax.set_yticks(positions, labels=list(lines["method"]), fontsize="small")
    ax.invert_yaxis()
    ends = lines[value] + lines[error].fillna(0)
    limit = 2.5 * float(lines[value].median())
    # bits per byte only: a P@1 bar is a share, and the oracle's far one is the point
    cut = value != "p_at_1" and limit > 0 and float(ends.max()) > limit
    if cut:
        ax.set_xlim(0, limit * 1.4)
    for y, (_, line), end in zip(positions, lines.iterrows(), ends, strict=True):
        text = "best" if line["method"] == line.get("best") else _marks(line, marks)
        if cut and end > limit:
            text, end = f"{line[value]:.2f} → {text}", limit
        if text:
            ax.text(end, y, f" {text}", va="center", fontsize="small")
    ax.grid(axis="x", alpha=0.3)


def draw_methods(alignment: pd.DataFrame, zeroshot: pd.DataFrame, dpi: int = 120) -> Figure:
    """The figure (not saved): per (language, source, target PLM) setting, held-out P@1 and
    zero-shot bits per byte of every method, ± one standard error, with the paired tests'
    marks (:data:`VS_BEST_MARK`, :data:`VS_RANDOM_MARK`)."""
    aligned = held_out_p_at_1(alignment)
    settings = sorted({tuple(k) for k in aligned[["lang", "source", "target"]].to_numpy()}
                      | {tuple(k) for k in zeroshot[["lang", "source", "target"]].to_numpy()})
    settings = [s for s in settings if s[2] != OWN_TOKENIZER] or [("", "", "")]
    methods = sorted(set(aligned["method"]) | set(zeroshot["method"]))
    # twenty colours, none grey: grey is the oracle's
    palette = [c for i, c in enumerate(_TAB20) if i not in (14, 15)]
    colours = {m: "0.6" if m == ORACLE else palette[i % len(palette)]
               for i, m in enumerate(methods)}
    heights = [1.2 + 0.22 * max(1, (zeroshot["target"] == s[2]).sum(),
                                (aligned["target"] == s[2]).sum()) for s in settings]
    from matplotlib.backends import backend_agg  # noqa: PLC0415 (Snakefile start-up)
    from matplotlib.figure import Figure  # noqa: PLC0415 (Snakefile start-up)

    fig = Figure(figsize=(12, sum(heights) + 1.2), dpi=dpi)
    backend_agg.FigureCanvasAgg(fig)
    axes = fig.subplots(len(settings), 2, squeeze=False,
                        gridspec_kw={"height_ratios": heights})
    for row, setting in zip(axes, settings, strict=True):
        title = "{}, {}, {}".format(*setting)
        for ax, lines, value, error, marks, label in (
            (row[0], aligned, "p_at_1", "p_at_1_se", (("p_at_1_vs_best_p", VS_BEST_MARK),),
             "held-out P@1 (%), higher is better"),
            (row[1], zeroshot, "bits_per_byte", "bits_per_byte_se",
             (("vs_best_p", VS_BEST_MARK), ("vs_random_p", VS_RANDOM_MARK)),
             "zero-shot bits per byte, lower is better"),
        ):
            mine = lines[(lines["lang"] == setting[0]) & (lines["source"] == setting[1])
                         & (lines["target"] == setting[2])]
            if mine.empty:
                ax.text(0.5, 0.5, "no results", ha="center", va="center",
                        transform=ax.transAxes)
            else:
                _bar_panel(ax, mine, value, error, marks, colours)
            ax.set_title(f"{title}: {label}", fontsize="small")
    fig.suptitle("Methods per setting: held-out alignment and zero-shot bits per byte")
    legend = (f"Bars: ± one standard error. {VS_BEST_MARK}: differs from the setting's best "
              f"method, {VS_RANDOM_MARK}: differs from Random (paired tests over the same "
              f"tokens or documents, p < {ALPHA}); best: the setting's best method; "
              f"{ORACLE} (grey): the upper bound, not ranked.")
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(legend, 150)), fontsize="small")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def write_methods_figure(path: str | os.PathLike, alignment: pd.DataFrame,
                         zeroshot: pd.DataFrame, dpi: int = 120) -> None:
    """Draw and write the methods figure as PNG, atomically."""
    fig = draw_methods(alignment, zeroshot, dpi=dpi)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
