"""Figure 2: LAPT training-loss curves, one panel per (language, source), a line per method.

Drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot, no
global backend state, no display needed.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from embtransfer.core.atomic import atomic_path
from embtransfer.core.grid import Grid
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import LaptRun

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
