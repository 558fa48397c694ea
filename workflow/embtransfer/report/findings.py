"""findings.md: what the run found, written from the comparisons table alone.

It opens with at most ten lines (:func:`headline`), then one table per setting
(:mod:`.setting_tables`), through the template ``findings.md.j2``. The reference runs'
comparisons tables are committed (``docs/reference_run/``, ``docs/reference_real_run/``);
``python -m embtransfer.report.findings`` (:func:`main`) refreshes them and rewrites the
README's headlines and the docs pages from them, or compares two runs test by test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA
from embtransfer.report.comparisons import (
    KEYS,
    compare_runs,
    lookup,
    metric_spec,
    pair_ids,
    power,
    with_decisions,
)
from embtransfer.report.diagnostics import carries_meaning
from embtransfer.report.setting_tables import LEGEND, setting_sections
from embtransfer.report.tables import markdown
from embtransfer.report.texts import prose
from embtransfer.transfer.method_catalog import COMPETING_ROLES

TEMPLATE = Path(__file__).with_name("findings.md.j2")
REFERENCE_DIR = Path("docs/reference_run")
REAL_REFERENCE_DIR = Path("docs/reference_real_run")
RUN_JSON = "run.json"
README = Path("README.md")
#: The docs page of each reference: the whole of docs/findings.md; a block of real_text.md.
PAGES = {False: Path("docs/findings.md"), True: Path("docs/real_text.md")}
MARKERS = {False: ("<!-- findings:start -->", "<!-- findings:end -->"),
           True: ("<!-- real-findings:start -->", "<!-- real-findings:end -->")}
OMP_METHODS = ("omp", "omp_salt_k")


@dataclass(frozen=True)
class Kind:
    """A kind of setting (a headline's leader, a section's tables): its words, its family
    and the columns that select its settings."""

    label: str
    family: str
    select: tuple[tuple[str, str], ...] = ()


#: The paper tables: the headline gives their leaders (each by its first metric) in one line.
TABLES = tuple(Kind(f"Table {n}", f"table{n}") for n in (1, 2, 3, 4))
KINDS = (
    Kind("Held-out P@10 of the new input rows (before LAPT)", "alignment",
         (("stage", "transfer"), ("side", "input"), ("split", "held_out"),
          ("metric", "p_at_10"))),
    Kind("Zero-shot bits per byte", "zeroshot"),
    Kind("Bits per byte after LAPT", "lapt_zeroshot"),
    *TABLES,
)
SECTIONS = (
    Kind("Zero-shot bits per byte", "zeroshot"),
    Kind("Held-out alignment of the new rows (before LAPT)", "alignment",
         (("split", "held_out"), ("stage", "transfer"))),
    Kind("After LAPT: bits per byte", "lapt_zeroshot"),
    *TABLES,
)
SETTING = [k for k in KEYS if k != "family"]


def read_run(directory: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(comparisons, summaries) of a report folder or a reference."""
    text = {k: str for k in [*KEYS, "method", "versus", "other", "test", "relation", "role",
                             "flags"]}
    decided, summaries = (
        pd.read_csv(Path(directory) / paths.REPORT_FILES[name], keep_default_na=False,
                    na_values=[""], dtype=text) for name in ("comparisons_csv", "summaries_csv"))
    return (decided.fillna({c: "" for c in text if c in decided}),
            summaries.fillna({c: "" for c in text if c in summaries}))


def _select(frame: pd.DataFrame, kind: Kind) -> pd.DataFrame:
    part = frame[frame["family"] == kind.family]
    for column, value in kind.select:
        part = part[part[column] == value]
    return part


def _counted(summaries: pd.DataFrame, kind: Kind) -> tuple[pd.DataFrame, list[str]]:
    """The settings of ``kind`` a leader is counted over, and the competing methods they
    all hold: of every method set some setting holds (two or more methods), the one that
    gives the most (setting, method) pairs over the settings holding it. A setting with
    fewer methods is shown below, not counted."""
    part = _select(summaries, kind)
    if len(part) and not kind.select:  # a family without a selection: its first metric
        part = part[part["metric"] == part["metric"].iloc[0]]
    part = part[part["role"].isin(COMPETING_ROLES) & part["rank"].notna()]
    if part.empty:
        return part, []
    held = part.groupby(SETTING)["method"].apply(frozenset)
    best = max((s for s in set(held) if len(s) >= 2),
               key=lambda s: (len(s) * int((held.apply(lambda h: h >= s)).sum()), sorted(s)))
    keep = held[held.apply(lambda h: h >= best)].index
    part = part.set_index(SETTING).loc[keep].reset_index()
    return part[part["method"].isin(best)], sorted(best)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def leader_line(summaries: pd.DataFrame, kind: Kind, bold: bool = True) -> str:
    """Who is best (alone) or tied for best, in how many of the counted settings."""
    part, methods = _counted(summaries, kind)
    if part.empty:
        return ""
    settings = part.groupby(SETTING, sort=False)
    n = settings.ngroups
    alone, tied = pd.Series(0, index=methods), pd.Series(0, index=methods)
    for _, group in settings:
        # tied with the setting's best; where that best is not a common method, the first
        # of the common ones
        top = group[group["tied_best"].astype(bool)]["method"].tolist() or [
            group.sort_values(["rank", "method"])["method"].iloc[0]]
        (alone if len(top) == 1 else tied)[top] += 1
    order = (alone * 1000 + tied).sort_values(ascending=False)
    said = [f"{m} best in {alone[m]}" + (f" and tied in {tied[m]}" if tied[m] else "")
            if alone[m] else f"{m} tied for best in {tied[m]}"
            for m in order.index if alone[m] or tied[m]]
    label = f"{kind.label}, {metric_spec(part['metric'].iloc[0]).label}" if kind in TABLES \
        else kind.label
    head = (f"**{label}**" if bold else label) + (
        f" ({_plural(n, 'setting')} × {len(methods)} methods): ")
    if (tied == n).all():
        return head + f"all {len(methods)} methods tied for best: no test separates them."
    return head + "; ".join(said[:4]) + (f"; {len(said) - 4} more tied" if len(said) > 4
                                         else "") + "."


def salt_omp_line(decided: pd.DataFrame) -> str:
    """SALT against OMP in one line: OMP's relation to SALT, from SALT's side."""
    versus = decided[(decided["versus"] == "salt") & decided["method"].isin(OMP_METHODS)]
    if versus.empty:
        return ""
    omp = versus["relation"].value_counts()  # OMP better is SALT worse
    return prose("findings.salt_omp", tests=_plural(len(versus), "paired test"),
                 families=", ".join(sorted(set(versus["family"]))), better=omp.get("worse", 0),
                 worse=omp.get("better", 0), apart=omp.get("not apart", 0))


def anomaly_lines(decided: pd.DataFrame, summaries: pd.DataFrame) -> list[str]:
    """One line per kind of anomaly with its count; the tables below name the settings."""
    lines = []
    worse = decided[(decided["versus"] == "random") & (decided["relation"] == "worse")
                    & ((decided["family"] != "alignment") | (decided["split"] == "held_out"))]
    if len(worse):
        where = worse.groupby(["lang", "target", "method"])["family"].apply(
            lambda f: ", ".join(sorted(set(f))))
        said = "; ".join(f"{lang} {target} {method} in {families}"
                         for (lang, target, method), families in where.items())
        lines.append(prose("findings.worse", checkpoints=_plural(len(where), "checkpoint"),
                           said=said))
    flagged = summaries[summaries["flags"].astype(str).str.contains("rows flagged")]
    flagged = flagged.drop_duplicates([*SETTING[:4], "method"])
    if len(flagged):
        said = ", ".join(f"{r.lang} {r.target} {r.method}" for r in flagged.itertuples())
        lines.append(prose("findings.flagged", checkpoints=_plural(len(flagged), "checkpoint"),
                           said=said))
    without = ~carries_meaning(decided)
    if without.any():
        plms = ", ".join(f"{lang} {target}" for lang, _, target in without[without].index)
        lines.append(prose("findings.meaningless", n=int(without.sum()), of=len(without),
                           plms=plms))
    weak = power(decided, decided.attrs.get("alpha", FAMILY_ALPHA))
    weak = weak[weak["powerless"] & (weak["split"] == "held_out")]
    if len(weak):
        lines.append(prose("findings.powerless", n=len(weak),
                           detectable=int(weak["detectable"].min())))
    return lines


def beside_line(summaries: pd.DataFrame, world: pd.DataFrame) -> str:
    """The real run's leaders beside the miniature world's, per kind, each ranked within the
    competing methods the two runs' counted settings have in common (mean rank)."""
    said = []
    for kind in KINDS[:2]:
        (real, mine), (mini, theirs) = _counted(summaries, kind), _counted(world, kind)
        common = sorted(set(mine) & set(theirs))
        if len(common) < 2:
            continue
        first = [frame[frame["method"].isin(common)].groupby(SETTING)["value"].rank(
            ascending=not metric_spec(frame["metric"].iloc[0]).higher_is_better
        ).groupby(frame["method"]).mean().idxmin() for frame in (real, mini)]
        verdict = "the same" if first[0] == first[1] else "they differ"
        said.append(f"{kind.label} over {len(common)} common methods: {first[0]} here, "
                    f"{first[1]} in the world ({verdict})")
    return ("**Beside the miniature world** (mean rank): " + "; ".join(said) + ".") if said \
        else ""


def headline(decided: pd.DataFrame, summaries: pd.DataFrame,
             world: pd.DataFrame | None = None) -> list[str]:
    """The findings' opening lines (at most ten: 3 leaders, the paper tables' in one line,
    SALT against OMP, 4 kinds of anomaly, the world beside)."""
    lines = [leader_line(summaries, kind) for kind in KINDS if kind not in TABLES]
    benchmarks = [c for kind in TABLES if (c := leader_line(summaries, kind, bold=False))]
    if benchmarks:
        lines.append("**Benchmarks**: " + "; ".join(c.rstrip(".") for c in benchmarks) + ".")
    lines += [salt_omp_line(decided), *anomaly_lines(decided, summaries)]
    if world is not None:
        lines.append(beside_line(summaries, world))
    lines = [line for line in lines if line]
    return lines or ["No paired test in this run: nothing to rank (see the tables below)."]


def sections(decided: pd.DataFrame, summaries: pd.DataFrame) -> list[dict[str, Any]]:
    """The per-setting tables, grouped by kind."""
    tests = lookup(decided)
    out = [{"title": kind.label,
            "body": "\n".join(setting_sections(part, tests, level=4)).strip()}
           for kind in SECTIONS if len(part := _select(summaries, kind))]
    probes = decided[decided["family"] == "plm_probes"]
    if len(probes):
        table = probes.pivot_table(index=["lang", "source", "target"], columns="metric",
                                   values="diff", aggfunc="first").round(1)
        table["carries meaning"] = carries_meaning(decided).map({True: "yes", False: "no"})
        out.append({"title": "The target PLMs SALT recycles (probe z against random rows)",
                    "body": markdown(table.reset_index(), "{:.1f}")})
    omp = decided[(decided["versus"] == "salt") & decided["method"].isin(OMP_METHODS)]
    if len(omp):
        table = omp.assign(**{"OMP − SALT": [
            f"{d:+.{metric_spec(m).digits}f} ± {s:.{metric_spec(m).digits}f}"
            for d, s, m in zip(omp["diff"], omp["se"], omp["metric"], strict=True)]})
        columns = ["family", "stage", "lang", "target", "side", "metric", "method",
                   "OMP − SALT", "relation"]
        out.append({"title": "SALT against OMP", "body": markdown(table[columns])})
    return out


def findings_markdown(decided: pd.DataFrame, summaries: pd.DataFrame,
                      run: dict[str, Any] | None = None, real: bool = False,
                      world: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> str:
    """The text of findings.md. ``real``: a real-text run's; ``world``: the miniature
    world's (comparisons, summaries) it is set beside."""
    summaries = with_decisions(summaries, decided)
    beside = with_decisions(world[1], world[0]) if world is not None else None
    once = decided[~pair_ids(decided).duplicated()]  # a pair held twice is one test
    template = jinja2.Template(TEMPLATE.read_text(encoding="utf-8"), trim_blocks=True,
                               lstrip_blocks=True, keep_trailing_newline=True)
    return template.render(
        real=real, run=run, headline=headline(decided, summaries, beside),
        tests=len(once), clear=int(once["clears"].sum()), correction=CORRECTION,
        alpha=float(decided.attrs.get("alpha", FAMILY_ALPHA)), legend=LEGEND,
        sections=sections(decided, summaries))


# -- the reference runs, the README and the docs pages ----------------------------------------


def reference_text(reference: Path, real: bool = False, world: Path = REFERENCE_DIR) -> str:
    """findings.md of a committed reference (``real``: beside the world's)."""
    run = json.loads((reference / RUN_JSON).read_text())
    beside = read_run(world) if real and (world / RUN_JSON).is_file() else None
    return findings_markdown(*read_run(reference), run, real=real, world=beside)


def headline_of(text: str) -> str:
    """The headline lines of a findings text (its paragraph after the title)."""
    return text.split("\n\n")[1]


def headline_block(text: str, page: Path) -> str:
    """The README's block: a findings text's headline and where its tables are."""
    return f"{headline_of(text)}\n\nEvery setting's table: [{page}]({page}).\n"


def replace_block(text: str, block: str, real: bool) -> str:
    start_mark, end_mark = MARKERS[real]
    start, end = text.index(start_mark) + len(start_mark), text.index(end_mark)
    return text[:start] + "\n" + block + text[end:]


def write_pages(real: bool, readme: Path = README, root: Path = Path(".")) -> None:
    """Rewrite the README's headline and the docs page of a reference from its tables; the
    world's rewrites the real-text ones too where that reference is (set beside it)."""
    reference = root / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
    text = reference_text(reference, real, root / REFERENCE_DIR)
    page = root / PAGES[real]
    page.write_text(replace_block(page.read_text(), text, real) if real else text)
    readme.write_text(replace_block(readme.read_text(), headline_block(text, PAGES[real]), real))
    if not real and (root / REAL_REFERENCE_DIR / RUN_JSON).is_file():
        write_pages(True, readme, root)


def refresh_reference(report_dir: Path, real: bool = False, readme: Path = README,
                      root: Path = Path(".")) -> None:
    """Copy a run's comparisons and summaries into its reference with ``run.json`` (the
    checkout's commit, ``-dirty`` when the tree differs, and the tables' date) and rewrite
    the pages (:func:`write_pages`)."""
    commit = subprocess.run(["git", "describe", "--always", "--abbrev=7", "--dirty=-dirty"],
                            capture_output=True, text=True, check=True, cwd=root).stdout.strip()
    reference = root / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
    if reference.exists():
        shutil.rmtree(reference)
    reference.mkdir(parents=True)
    sources = [report_dir / paths.REPORT_FILES[n] for n in ("comparisons_csv", "summaries_csv")]
    for source in sources:
        shutil.copyfile(source, reference / source.name)
    date = dt.datetime.fromtimestamp(max(s.stat().st_mtime for s in sources), dt.UTC).date()
    (reference / RUN_JSON).write_text(
        json.dumps({"commit": commit, "date": date.isoformat()}, indent=2) + "\n")
    write_pages(real, readme, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    for flag, kind in (("--reference", {"type": Path, "metavar": "REPORT_DIR"}),
                       ("--real-reference", {"type": Path, "metavar": "REPORT_DIR"}),
                       ("--pages", {"action": "store_true"}),
                       ("--compare", {"type": Path, "nargs": 2, "metavar": ("A", "B")})):
        group.add_argument(flag, help=prose(f"findings_cli.{flag[2:]}"), **kind)
    args = parser.parse_args(argv)
    if args.reference or args.real_reference:
        refresh_reference(args.reference or args.real_reference, real=bool(args.real_reference))
        return 0
    if args.pages:
        write_pages(False)
        return 0
    merged = compare_runs(read_run(args.compare[0])[0], read_run(args.compare[1])[0])
    print(f"{int(merged['agrees'].sum())} of {len(merged)} tests shared by the two runs agree.")
    for r in merged[~merged["agrees"]].itertuples():
        print(f"- {r.family} {r.stage} {r.lang}/{r.source}/{r.target} {r.side} {r.split} "
              f"{r.metric}: {r.method} against {r.other}: {r.relation_a} in A, "
              f"{r.relation_b} in B")
    return 0 if merged["agrees"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
