"""findings.md: written from the comparisons table and the summaries alone. It opens with at
most eleven lines (each kind's best or tied-best methods, SALT against OMP at its two k,
every kind of anomaly the comparisons hold, the seeds), every count in them out of its whole
and every number one a reader can check in the tables below: a property test recounts each
from generated tables here, with plain pandas, and from the committed references. A method is
called best only where every other is apart from it and a test could tell them apart; a
checkpoint whose rows are flagged takes no rank and no lead; the committed pages are what the
committed references give, and two runs are compared test by test."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as scipy_stats

from embtransfer.core import paths
from embtransfer.core.paired import normal_p
from embtransfer.report.comparisons import (
    KEYS,
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    compare_setting,
    decide,
    detectable_discordant,
    frame_of,
    given_test,
    pair_ids,
    power,
    with_decisions,
)
from embtransfer.report.findings import (
    KINDS,
    MARKERS,
    NEW_ROWS,
    PAGES,
    README,
    REAL_REFERENCE_DIR,
    REFERENCE_DIR,
    RUN_JSON,
    findings_markdown,
    headline,
    headline_block,
    main,
    read_run,
    read_run_table,
    reference_text,
    refresh_reference,
    replace_block,
    write_pages,
)
from embtransfer.transfer.method_catalog import METHODS

REPO = Path(__file__).resolve().parents[1]
TOKENS = 400

# -- synthetic runs: settings scored by the spine itself -----------------------------------------


def hits(ones: int, start: int = 0, n: int = TOKENS) -> np.ndarray:
    """0/1 scores over ``n`` items: ``ones`` hits from item ``start`` on."""
    scores = np.zeros(n)
    scores[start:start + ones] = 1
    return scores


def document_bits(factors: dict[str, float], seed: int = 0, n: int = 200
                  ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-document bits of each method (its factor times the bytes, with 5 % noise per
    document) and the documents' bytes."""
    n_bytes = np.random.default_rng(seed).integers(50, 150, n).astype(float)
    return {method: n_bytes * factor * (1 + np.random.default_rng(seed + i).normal(0, 0.05, n))
            for i, (method, factor) in enumerate(factors.items())}, n_bytes


HELD_OUT = {"family": "alignment", "source": "src", "split": "held_out", "metric": "p_at_10"}


def alignment(lang: str, scores: dict[str, np.ndarray], stage: str = "transfer",
              side: str = "input", metric: str = "p_at_10") -> tuple[list, list]:
    return compare_setting({**HELD_OUT, "stage": stage, "side": side, "metric": metric,
                            "lang": lang, "target": f"gpt2_{lang}"}, scores, 0)


def zeroshot(lang: str, factors: dict[str, float], flags: dict[str, str] | None = None,
             family: str = "zeroshot") -> tuple[list, list]:
    bits, n_bytes = document_bits(factors)
    setting = {"family": family, "stage": "lapt" if family == "lapt_zeroshot" else "transfer",
               "lang": lang, "source": "src", "target": f"gpt2_{lang}",
               "metric": "bits_per_byte"}
    return compare_setting(setting, bits, 0, n_bytes, flags)


def paper_table(number: int, lang: str, scores: dict[str, np.ndarray]) -> tuple[list, list]:
    setting = {"family": f"table{number}", "stage": "lapt", "lang": lang, "source": "src",
               "target": f"gpt2_{lang}", "variant": "target", "metric": "Facts acc"}
    return compare_setting(setting, scores, 0)


def probe(lang: str, z: float) -> dict:
    setting = {"family": "plm_probes", "lang": lang, "source": "src",
               "target": f"gpt2_{lang}", "metric": "span_probe"}
    return given_test(setting, f"gpt2_{lang}", z, 1.0, normal_p(z), "normal")


def run(*parts: tuple[list, list], tests: tuple[dict, ...] = (), alpha: float = 0.001
        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(comparisons, summaries) of the settings ``parts`` and the tests ``tests``, decided."""
    decided = decide(frame_of([t for _, made in parts for t in made] + list(tests),
                              TEST_COLUMNS), alpha)
    decided.attrs["alpha"] = alpha
    return decided, frame_of([s for made, _ in parts for s in made], SUMMARY_COLUMNS)


def current_block(text: str, real: bool) -> str:
    """The block between a page's markers (:data:`MARKERS`), as ``write_pages`` wrote it."""
    start_mark, end_mark = MARKERS[real]
    return text[text.index(start_mark) + len(start_mark) + 1: text.index(end_mark)]


def opening(text: str) -> list[str]:
    """The lines of findings.md between its title and the first blank line after them."""
    title, lines = text.split("\n\n")[:2]
    assert title.startswith("# ")
    return lines.split("\n")


def line_of(text: str, label: str) -> str:
    found = [line for line in opening(text) if line.startswith(f"- **{label}**")]
    assert len(found) == 1, (label, opening(text))
    return found[0]


def lines_of(decided: pd.DataFrame, summaries: pd.DataFrame, **kwargs) -> list[str]:
    """The headline's lines as findings.md writes them, without their bullets."""
    return [line.removeprefix("- ") for line in opening(
        findings_markdown(decided, summaries, **kwargs))]


LEADERS = [k for k in KINDS if not k.family.startswith("table")]
ALIGNMENT, HELD_OUT_TOKENS, ZEROSHOT, LAPT = (
    next(k.label for k in LEADERS if k.family == family)
    for family in ("alignment", "heldout", "zeroshot", "lapt_zeroshot"))
#: Each kind of anomaly by the words that open its line.
ANOMALIES = ("Worse than Random", "Rows blown up or zero", "PLMs without measurable meaning",
             "Tests without power")


def anomalous() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run with one of every anomaly: lstsq's bits per byte worse than Random's, clp's rows
    flagged (and worse still), a target PLM whose probe does not clear and one whose probe
    reads below its baseline, and a held-out setting of 15 tokens whose tests cannot clear
    however the tokens fall."""
    return run(alignment("xx", {"salt": hits(120), "ofa": hits(116, 4), "random": hits(0),
                                "world_oracle": hits(TOKENS)}),
               zeroshot("xx", {"salt": 1.0, "omp": 1.2, "random": 1.5, "lstsq": 1.8,
                               "clp": 2.0}, {"clp": "3 rows flagged"}),
               alignment("yy", {"salt": hits(3, n=15), "ofa": hits(1, n=15),
                                "random": hits(0, n=15)}),
               tests=(probe("xx", 0.5), probe("yy", 20.0), probe("zz", -20.0)))


def clean() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run without anomalies: every method better than Random, no row flagged, every
    probe clears, every held-out test could clear."""
    return run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
               zeroshot("xx", {"salt": 1.0, "omp": 1.2, "random": 1.5}),
               tests=(probe("xx", 20.0),))


# -- the headline recounted: what a correct line claims, counted here apart from findings.py --


LABELS = {"p_at_10": "P@10", "p_at_1": "P@1", "cos_centred": "centred cos",
          "cos_oracle": "cos to oracle", "bits_per_byte": "bits per byte", "mrr": "MRR",
          "contrast": "contrast"}
STAGE_WORDS = {"transfer": "transfer stage", "lapt": "after LAPT"}
SETTING = [k for k in KEYS if k != "family"]
COMPETING = ("method", "random", "salt")
OMP_K = METHODS["omp"]["options"]["k"].default


def label(metric: str) -> str:
    return LABELS.get(metric, metric)  # an lm-eval score is named by itself


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def joined(words: list[str]) -> str:
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + f" and {words[-1]}"


def stage_order(stages) -> list[str]:
    held = list(dict.fromkeys(stages))
    return [s for s in STAGE_WORDS if s in held] + sorted(s for s in held if s not in STAGE_WORDS)


def broken_of(summaries: pd.DataFrame) -> set[tuple]:
    """Checkpoints with flagged rows, and the LAPT ones trained from them."""
    out = set()
    for r in summaries[summaries["flags"].astype(str) != ""].itertuples():
        out.add((r.stage, r.lang, r.source, r.target, r.method))
        if r.stage != "lapt":
            out.add(("lapt", r.lang, r.source, r.target, r.method))
    return out


def down(line, broken: set[tuple], who: str = "method") -> bool:
    return (line["stage"], line["lang"], line["source"], line["target"], line[who]) in broken


def measure_of(line, split: bool = True) -> str:
    if line["family"] == "alignment":
        words = f"{line['side']}-row {label(line['metric'])}"
        return f"{line['split'].replace('_', '-')} {words}" if split else words
    if line["family"] == "heldout":
        return f"held-out-token {line['side']}-row {label(line['metric'])}"
    if line["family"] in ("zeroshot", "lapt_zeroshot"):
        return f"{label(line['metric'])} of the whole model"
    if line["family"].startswith("table"):
        variant = f" ({line['variant']})" if line["variant"] else ""
        return f"Table {line['family'][5:]} {label(line['metric'])}{variant}"
    return label(line["metric"])


def cells_of(decided: pd.DataFrame, broken: set[tuple]) -> dict[tuple, tuple[int, int]]:
    """Per McNemar cell: (the largest net difference in items of its tests between working
    checkpoints, the discordant items a test needs: comparisons.power's)."""
    needs = power(decided).set_index(KEYS)["detectable"]
    out = {}
    for key, tests in decided[decided["test"] == "mcnemar"].groupby(KEYS, sort=False):
        nets = [int(np.rint(abs(t["diff"]) / 100 * t["n"])) for _, t in tests.iterrows()
                if not down(t, broken) and not down(t, broken, "other")]
        out[key] = (max(nets, default=0), int(needs[key]))
    return out


def needs_of(values) -> str:
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def name_of(key: dict, sources: bool, extra=()) -> str:
    words = [key["lang"], *([key["source"]] if sources else []), key["target"]]
    return " ".join(words + [STAGE_WORDS.get(key[k], key[k]) if k == "stage" else key[k]
                             for k in extra if key[k]])


def names_of(keys: list[dict], sources: bool) -> str:
    if len(keys) > 4:
        return ""
    extra = [k for k in ("variant", "stage") if len({key[k] for key in keys}) > 1]
    return " (" + ", ".join(name_of(k, sources, extra) for k in keys) + ")"


def leader_claims(settings: list[pd.DataFrame], methods: list[str],
                  relations: dict[tuple, str], partial: set[tuple] = frozenset()) -> list[str]:
    """``partial``: (KEYS..., method) of the tests against the best that held in some seeds
    only (their tie is said apart)."""
    s, m = len(settings), len(methods)
    alone, tied = dict.fromkeys(methods, 0), dict.fromkeys(methods, 0)
    split = dict.fromkeys(methods, 0)
    outside = 0
    for rows in settings:
        top = [r["method"] for _, r in rows.iterrows()
               if r["rank"] == 1 or relations.get((*r[KEYS], r["method"])) == "not apart"]
        mine = [t for t in top if t in alone]
        outside += not mine
        for t in mine:
            (alone if len(top) == 1 else tied)[t] += 1
        for _, r in rows.iterrows():
            if r["method"] in mine and (*r[KEYS], r["method"]) in partial:
                split[r["method"]] += 1
    if all(tied[x] == s for x in methods):
        return [f"all {m} methods tied for best in {s} of {s}: no test separates them"]
    groups: dict[tuple[int, int], list[str]] = {}
    for x in sorted(methods):
        if alone[x] or tied[x]:
            groups.setdefault((alone[x], tied[x]), []).append(x)
    order = sorted(groups, key=lambda c: (-c[0], -c[1]))
    claims = []
    for a, t in order[:4]:
        phrase = (f"best in {a}" + (f" and tied for best in {t}" if t else "")) if a \
            else f"tied for best in {t}"
        claims.append(f"{', '.join(groups[(a, t)])} {phrase} of {s}")
    if order[4:]:
        claims.append(f"{sum(len(groups[c]) for c in order[4:])} more methods best or tied for "
                      f"best in at most {max(a + t for a, t in order[4:])} of {s}")
    if outside:
        claims.append(f"in {outside} of {s} the best is none of these {m}")
    if any(split.values()):
        claims.append("worse than the best in some seeds but not all: " + ", ".join(
            f"{x} in {split[x]}" for x in sorted(methods) if split[x]))
    return claims


def kind_claims(decided, summaries, family, select, table, broken, cells, sources
                ) -> list[str] | None:
    """What a kind's leader line claims, or None where it has no line."""
    part = summaries[summaries["family"] == family]
    for column, value in select:
        part = part[part[column] == value]
    if len(part) and not select:
        part = part[part["metric"] == part["metric"].iloc[0]]
    part = part[part["role"].isin(COMPETING)]
    left = sorted({r["method"] for _, r in part.iterrows() if down(r, broken)})
    part = part[part["rank"].notna()]
    if part.empty:
        return None
    setting = part[SETTING].apply(tuple, axis=1)
    total = setting.nunique()
    is_down = part.apply(lambda r: down(r, broken), axis=1)
    best = decided[decided["versus"] == "best"]
    best_down = {tuple(t[KEYS]) for _, t in best.iterrows() if down(t, broken, "other")}
    in_best_down = part[KEYS].apply(tuple, axis=1).isin(best_down)
    broken_best = setting[in_best_down].nunique()
    part = part[~is_down & ~in_best_down]
    held: dict[tuple, set] = {}
    for key, method in zip(part[SETTING].apply(tuple, axis=1), part["method"], strict=True):
        held.setdefault(key, set()).add(method)
    sets = {frozenset(h) for h in held.values() if len(h) >= 2}
    if not sets:
        return None
    top = max(sets, key=lambda s: (len(s) * sum(h >= s for h in held.values()), sorted(s)))
    keys = [k for k in held if held[k] >= top]
    rows = [part[part[SETTING].apply(tuple, axis=1) == k] for k in keys]
    methods = sorted(top)
    n, m = len(keys), len(methods)
    claims = [f"{n} of {total} settings, those that hold all {m} competing methods"]
    if left:
        claims.append(f"{', '.join(left)} left out where its rows are flagged")
    if broken_best:
        claims.append(f"{broken_best} whose best is a checkpoint with flagged rows left out")
    if table:
        first = rows[0].iloc[0]
        stages = stage_order(r.iloc[0]["stage"] for r in rows)
        claims.append(f"{table}, {label(first['metric'])} of the whole model, "
                      + joined([STAGE_WORDS.get(s, s) for s in stages]))
    relations = {(*t[KEYS], t["method"]): t["relation"] for _, t in best.iterrows()}
    partial = {(*t[KEYS], t["method"]) for _, t in best.iterrows()
               if str(t.get("in_seeds", "") or "")}
    full = [tuple(r.iloc[0][KEYS]) for r in rows]
    dicts = [dict(zip(KEYS, k, strict=True)) for k in full]
    weak = [i for i, k in enumerate(full) if k in cells and cells[k][0] < cells[k][1]]
    strong = [i for i in range(n) if i not in weak]
    if not weak:
        return claims + leader_claims(rows, methods, relations, partial)
    items = "questions" if table else "tokens"  # a paper table's tests count questions
    why = (f"there, {max(cells[full[i]][0] for i in weak)} {items}, is below the "
           f"{needs_of(cells[full[i]][1] for i in weak)} discordant {items} a test needs")
    if not strong:
        return claims + [f"no power in any of the {n}{names_of(dicts, sources)}", why]
    return claims + [
        f"a test has power in {len(strong)} of {n}{names_of([dicts[i] for i in strong], sources)}",
        f"No power in {len(weak)} of {n}{names_of([dicts[i] for i in weak], sources)}", why,
        *leader_claims([rows[i] for i in strong], methods, relations, partial)]


def omp_claims(decided, broken) -> dict[str, list[str]]:
    out = {}
    for rival, words in (("omp_salt_k", "at SALT's k"), ("omp", "at the tool's default k")):
        versus = decided[(decided["versus"] == "salt") & (decided["method"] == rival)]
        if versus.empty:
            continue
        k = "k = SALT's median support size" if rival == "omp_salt_k" else \
            f"k = {OMP_K}, mergekit-tokensurgeon's default"
        claims = [f"`{rival}`: {k}"]
        off = versus.apply(lambda t: down(t, broken) or down(t, broken, "other"), axis=1)
        if off.any():
            claims.append(f"{plural(int(off.sum()), 'test')} with flagged rows left out")
        working = versus[~off]
        for stage in stage_order(working["stage"]):
            tests = working[working["stage"] == stage]
            salt_better = tests[tests["relation"] == "worse"]
            salt_worse = tests[tests["relation"] == "better"]
            claims += [f"{STAGE_WORDS.get(stage, stage)}, {plural(len(tests), 'paired test')}: "
                       f"SALT better in {len(salt_better)}", f"worse in {len(salt_worse)}",
                       f"not apart in {int((tests['relation'] == 'not apart').sum())}"]
            for group in (salt_better, salt_worse):
                claims += measure_claims(group)
        out[f"SALT against OMP {words}"] = claims
    return out


def measure_claims(group: pd.DataFrame) -> list[str]:
    """``2 in bits per byte of the whole model``: the tests of ``group`` per measure."""
    counts: dict[str, list] = {}
    for _, t in group.iterrows():
        counts.setdefault(measure_of(t, split=False), []).append(t["split"])
    return [f"{len(splits)} in {joined(sorted({s.replace('_', '-') for s in splits if s}))} "
            f"{what}".replace("in  ", "in ") for what, splits in counts.items()]


def worse_claims(decided, broken, sources) -> list[str] | None:
    against = decided[(decided["versus"] == "random")
                      & ((decided["family"] != "alignment") | (decided["split"] == "held_out"))]
    against = against[~against.apply(lambda t: down(t, broken) or down(t, broken, "other"),
                                     axis=1)] if len(against) else against
    worse = against[against["relation"] == "worse"]
    if worse.empty:
        return None
    claims = [f"{len(worse)} of {len(against)} tests of working checkpoints against Random"]
    for stage in stage_order(worse["stage"]):
        tests = worse[worse["stage"] == stage]
        words = STAGE_WORDS.get(stage, stage)
        claims.append(f"{words[0].upper()}{words[1:]} ({plural(len(tests), 'test')})")
        for what, group in tests.groupby(tests.apply(measure_of, axis=1)):
            where = [f"{name_of(g.iloc[0], sources)} ({', '.join(sorted(g['method']))})"
                     for _, g in group.groupby(["lang", "source", "target"])]
            claims.append(f"{what}: " + ", ".join(where))
    return claims


def flagged_claims(summaries, sources) -> list[str] | None:
    flagged = summaries[summaries["flags"].astype(str) != ""]
    if flagged.empty:
        return None
    key = ["lang", "source", "target", "method"]
    made = flagged[flagged["stage"] != "lapt"].drop_duplicates(key)
    origin = set(made[key].apply(tuple, axis=1))
    alone = flagged[flagged["stage"] == "lapt"].drop_duplicates(key)
    alone = alone[~alone[key].apply(tuple, axis=1).isin(origin)]
    lapt = summaries[summaries["stage"] == "lapt"].drop_duplicates(key)
    trained = int(lapt[key].apply(tuple, axis=1).isin(origin).sum()) if len(lapt) else 0
    claims = []
    for what, frame in (("checkpoint", made), ("LAPT checkpoint", alone)):
        if len(frame):
            claims.append(f"{plural(len(frame), what)}: ")
            claims += [f"{name_of(r, sources)} {r['method']}" for _, r in frame.iterrows()]
    if trained:
        claims.append(f"the {plural(trained, 'LAPT checkpoint')} trained from these")
    return claims


def powerless_claims(cells, sources) -> list[str] | None:
    held = {k: v for k, v in cells.items() if k[KEYS.index("split")] == "held_out"}
    weak = {k: v for k, v in held.items() if v[0] < v[1]}
    if not weak:
        return None
    metrics = sorted({dict(zip(KEYS, k, strict=True))["metric"] for k in held})
    claims = [f"{len(weak)} of {len(held)} McNemar cells of the held-out split",
              f"one setting's {' or '.join(label(x) for x in metrics)} per side and stage",
              f"at most {max(v[0] for v in weak.values())} tokens",
              f"the {needs_of(v[1] for v in weak.values())} discordant tokens a test needs"]
    strong = [dict(zip(KEYS, k, strict=True)) for k in held if k not in weak]
    if strong:
        claims.append(f"power in the other {len(strong)}")
        groups: dict[tuple, list[str]] = {}
        for c in strong:
            groups.setdefault((c["lang"], c["source"], c["target"], c["side"], c["metric"]),
                              []).append(c["stage"])
        if len(groups) <= 4:
            claims += [f"{name_of(dict(lang=g[0], source=g[1], target=g[2]), sources)} "
                       f"{g[3]}-row {label(g[4])} "
                       f"({joined([STAGE_WORDS.get(s, s) for s in stage_order(stages)])})"
                       for g, stages in groups.items()]
    return claims


def heldout_claims(decided, summaries) -> list[str] | None:
    """The held-out shared tokens against chance: input-row contrast tests per method, and
    the range of Spearman's correlation (scipy's) with bits per byte over the ranked
    methods."""
    tests = decided[(decided["family"] == "heldout") & (decided["side"] == "input")
                    & (decided["metric"] == "contrast") & (decided["versus"] == "chance")]
    if tests.empty:
        return None
    settings = tests[["lang", "source", "target"]].drop_duplicates()
    claims = [f"{len(tests)} tests over {len(settings)} settings"]
    every, some, none = [], [], []
    for method in sorted(set(tests["method"])):
        mine = tests[tests["method"] == method]
        above = int((mine["relation"] == "better").sum())
        if above == len(mine):
            every.append(method)
        elif above:
            some.append(f"{method} {above} of {len(mine)}")
        else:
            none.append(method)
    claims.append("in every setting it was tested in: " + ", ".join(every) if every
                  else "in every setting: none")
    if some:
        claims.append("in some: " + ", ".join(some))
    if none:
        claims.append("in none: " + ", ".join(none))
    if (n := int((tests["relation"] == "worse").sum())):
        claims.append(f"below chance in {plural(n, 'test')}")
    ranked = summaries[summaries["rank"].notna()]
    held = ranked[(ranked["family"] == "heldout") & (ranked["side"] == "input")
                  & (ranked["metric"] == "contrast")]
    bpb = ranked[ranked["family"] == "zeroshot"]
    rhos = []
    for _, group in held.groupby(["lang", "source", "target"]):
        both = group.merge(bpb, on=["lang", "source", "target", "method"])
        if len(both) >= 5:
            rho = scipy_stats.spearmanr(both["value_x"], -both["value_y"]).statistic
            if np.isfinite(rho):
                rhos.append(round(float(rho), 2))
    if rhos:
        low, high = min(rhos), max(rhos)
        span = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
        claims += [f"in the {plural(len(rhos), 'setting')} with 5 or more", span]
    return claims


def meaning_claims(decided) -> list[str] | None:
    probes = decided[decided["family"] == "plm_probes"]
    if probes.empty:
        return None
    measured = probes["metric"].nunique()
    carries = probes.groupby(["lang", "source", "target"])["relation"].apply(
        lambda r: (r == "better").sum() == measured)
    without = carries[~carries]
    if without.empty:
        return None
    return [f"{len(without)} of {len(carries)}: "
            + ", ".join(f"{lang} {target}" for lang, _, target in without.index)]


def start_claims(decided, broken, new_rows) -> dict[str, list[str]]:
    """Token Distillation against Subword-mean: its lines of versus ``start``, counted per
    stage, and its distilled rows out of its new rows per setting (the new_rows table)."""
    out = {}
    for method, versus in decided[decided["versus"] == "start"].groupby("method"):
        other = versus["other"].iloc[0]
        claims = [f"**`{method}` against `{other}`**"]
        if new_rows is not None and len(mine := new_rows[new_rows["method"] == method]):
            made = [int(g.loc[g["how"] == "distilled", "rows"].sum())
                    for _, g in mine.groupby(["lang", "target"])]
            total = [int(g["rows"].sum()) for _, g in mine.groupby(["lang", "target"])]
            span = [f"{min(v):,}" if min(v) == max(v) else f"{min(v):,}-{max(v):,}"
                    for v in (made, total)]
            claims.append(f"distilled {span[0]} of {span[1]} new rows in each of its "
                          f"{plural(len(total), 'setting')}")
        working = versus[~versus.apply(lambda t: down(t, broken) or down(t, broken, "other"),
                                       axis=1)]
        for stage in stage_order(working["stage"]):
            tests = working[working["stage"] == stage]
            counts = [int((tests["relation"] == r).sum()) for r in ("better", "worse",
                                                                    "not apart")]
            claims += [f"{STAGE_WORDS.get(stage, stage)}, {plural(len(tests), 'paired test')}: "
                       f"`{method}` better in {counts[0]}", f"worse in {counts[1]}",
                       f"not apart in {counts[2]}"]
            for relation in ("better", "worse"):
                claims += measure_claims(tests[tests["relation"] == relation])
        out[f"`{method}` against `{other}`"] = claims
    return out


def expected(decided, summaries, run=None, new_rows=None) -> dict[str, list[str]]:
    """Every line a correct headline holds, by the bold words that open it, with the claims
    (the substrings that carry its numbers and names) it must make."""
    summaries = summaries.fillna({"flags": ""})
    broken = broken_of(summaries)
    cells = cells_of(decided, broken)
    sources = summaries["source"].nunique() > 1
    out: dict[str, list[str]] = {}
    # the leaders apart per vocabulary mode a target is written with (gpt2_de@extend)
    def mode(frame):
        return frame["target"].astype(str).str.partition("@")[2]

    parts = [(m, decided[mode(decided) == m], summaries[mode(summaries) == m])
             for m in sorted(set(mode(summaries)))]
    tables = []
    for m, tests, lines in parts:
        words = {"": "", "extend": ", extended vocabularies"}[m]
        for kind in LEADERS:
            if (claims := kind_claims(tests, lines, kind.family, kind.select, "", broken,
                                      cells, sources)) is not None:
                out[kind.label + words] = claims
        tables += [c for n in (1, 2, 3, 4) if (c := kind_claims(
            tests, lines, f"table{n}", (), f"Table {n}", broken, cells, sources)) is not None]
    if tables:
        out["Benchmarks"] = [c for claims in tables for c in claims]
    out |= omp_claims(decided, broken)
    out |= start_claims(decided, broken, new_rows)
    if (claims := heldout_claims(decided, summaries)) is not None:
        out["Held-out shared tokens against chance"] = claims
    for words, claims in (("Worse than Random", worse_claims(decided, broken, sources)),
                          ("Rows blown up or zero", flagged_claims(summaries, sources)),
                          ("PLMs without measurable meaning", meaning_claims(decided)),
                          ("Tests without power", powerless_claims(cells, sources))):
        if claims is not None:
            out[words] = claims
    seed = (run or {}).get("seed")
    several = "seeds" in decided and len(decided) and int(decided["seeds"].max()) > 1
    if not several:
        out["One seed"] = [f"**One seed** (`seed` {seed})" if seed is not None
                           else "**One seed**:"]
        return out
    # once per test: a pair of methods in a setting, in either order
    pair = decided.apply(lambda t: (*t[KEYS], *sorted([t["method"], t["other"]])), axis=1)
    once = decided[~pair.duplicated()]
    held, made = once["held"].astype(int), once["seeds"].astype(int)
    clear = int((held > 0).sum())
    every = int(((held > 0) & (held == made)).sum())
    out[f"{int(made.max())} seeds"] = [
        f"**{int(made.max())} seeds**", f"of the primary seed's {len(once)} tests",
        f"{clear} clear", f"{every} of these {clear}", f"{clear - every} in only some",
        f"{int(once['borderline'].astype(bool).sum())} of the {len(once)}"]
    return out


def consume(line: str, claim: str) -> str:
    """``line`` without ``claim`` (its first whole occurrence: no digit glued to either end)."""
    found = re.search(r"(?<!\d)" + re.escape(claim) + (r"(?!\d)" if claim[-1:].isdigit() else ""),
                      line)
    assert found, f"the headline should say {claim!r}: {line}"
    return line[:found.start()] + "§" + line[found.end():]


def check_headline(lines: list[str], decided: pd.DataFrame, summaries: pd.DataFrame,
                   run: dict | None = None, new_rows: pd.DataFrame | None = None) -> None:
    """Each line is one the tables call for, makes every claim recounted here, and holds no
    number that no claim accounts for."""
    want = expected(decided, summaries, run, new_rows)
    opened = {re.match(r"\*\*(.+?)\*\*", line).group(1): line for line in lines}
    assert set(opened) == set(want), (sorted(opened), sorted(want))
    names = set(summaries["lang"]) | set(summaries["target"]) | set(summaries["source"]) \
        | set(summaries["method"]) | set(decided["target"]) | set(decided["lang"])
    for words, claims in want.items():
        rest = opened[words]
        for claim in sorted(claims, key=len, reverse=True):
            rest = consume(rest, claim)
        for name in sorted(names, key=len, reverse=True):  # names may hold digits (gpt2_de)
            rest = re.sub(rf"(?<![\w]){re.escape(str(name))}(?![\w])", "", rest)
        rest = re.sub(r"P@10?\b|Table [1-4]", "", rest)  # a label's digits
        assert not re.search(r"\d", rest), f"a number no count accounts for: {rest!r}"


# -- generated runs: random methods, values, p, flags and powers ----------------------------------


POOL = ("salt", "omp", "omp_salt_k", "random", "focus", "clp", "lstsq", "ofa")


def generated(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A comparisons table and its summaries drawn at random: languages, the methods each
    setting holds, their values (item hits for the McNemar metrics, so that some cells have
    power and some not), the relations of every test and which checkpoints' rows are
    flagged (and whether the LAPT line of one says so too)."""
    rng = np.random.default_rng(seed)
    langs = sorted(rng.choice(["aa", "bb", "cc"], int(rng.integers(1, 4)), replace=False))
    fresh = bool(rng.random() < 0.5)  # flagged checkpoints unranked and untested, or not
    summaries, tests = [], []
    for lang in langs:
        methods = sorted(rng.choice(POOL, int(rng.integers(3, len(POOL) + 1)), replace=False))
        flagged = {m for m in methods if rng.random() < 0.15}
        base = {"lang": lang, "source": "src", "target": f"plm_{lang}", "variant": ""}
        settings = []
        for stage in ("transfer", "lapt"):
            settings += [base | {"family": "alignment", "stage": stage, "side": side,
                                 "split": "held_out", "metric": metric}
                         for side in ("input", "output") for metric in ("p_at_10", "p_at_1",
                                                                        "cos_centred")]
            if stage == "transfer":
                settings += [base | {"family": "heldout", "stage": stage, "side": side,
                                     "split": "", "metric": metric}
                             for side in ("input", "output")
                             for metric in ("p_at_10", "mrr", "contrast")]
            settings += [base | {"family": "zeroshot" if stage == "transfer" else
                                 "lapt_zeroshot", "stage": stage, "side": "", "split": "",
                                 "metric": "bits_per_byte"},
                         base | {"family": "table1", "stage": stage, "side": "", "split": "",
                                 "metric": "Facts acc"}]
        for key in settings:
            held = methods if rng.random() < 0.8 else sorted(
                rng.choice(methods, int(rng.integers(2, len(methods) + 1)), replace=False))
            flags = {}
            if fresh:  # as the spine writes them: every table of the checkpoint flagged
                flags = {m: "3 rows flagged" if key["stage"] == "transfer" else
                         "trained from flagged rows: 3 rows flagged" for m in held if m in flagged}
            elif key["family"] == "zeroshot":
                flags = {m: f"{int(rng.integers(1, 9))} rows flagged" for m in held
                         if m in flagged}
            elif key["family"] == "lapt_zeroshot":  # as a report that marks them says it
                flags = {m: "trained from flagged rows" for m in held
                         if m in flagged and rng.random() < 0.5}
                if rng.random() < 0.1:
                    flags[held[0]] = "2 rows flagged"
            made = drawn_setting(rng, key, list(held), flags, fresh)
            summaries += made[0]
            tests += made[1]
            if key["family"] == "heldout":  # each working method against chance
                tests += [key | {"method": m, "versus": "chance", "other": "chance",
                                 "n": np.nan, "diff": 1.0, "se": 0.5, "p": 0.01,
                                 "test": "binomial", "clears": relation != "not apart",
                                 "relation": relation}
                          for m in held if not (fresh and m in flags)
                          for relation in [str(rng.choice(["better", "not apart", "worse"],
                                                          p=[0.5, 0.4, 0.1]))]]
            if key["family"] == "alignment" and rng.random() < 0.3:
                summaries.append(key | {"method": "world_oracle", "role": "oracle", "n": 1,
                                        "value": 100.0, "se": 0.0, "rank": np.nan,
                                        "chance": np.nan, "flags": ""})
    decided = pd.DataFrame(tests, columns=[*TEST_COLUMNS, "clears", "relation"])
    decided["clears"] = decided["clears"].astype(bool)
    return decided, pd.DataFrame(summaries, columns=SUMMARY_COLUMNS)


def drawn_setting(rng, key: dict, methods: list[str], flags: dict[str, str], fresh: bool
                  ) -> tuple[list[dict], list[dict]]:
    mcnemar = key["metric"] not in ("bits_per_byte", "cos_centred", "mrr", "contrast")
    n = int(rng.integers(30, 300))
    if mcnemar:
        value = {m: 100 * int(rng.integers(0, n // 3) if rng.random() < 0.5
                              else rng.integers(0, 4)) / n for m in methods}
    else:
        value = {m: round(float(rng.uniform(0.5, 3.0)), 1) for m in methods}
    sign = -1 if key["metric"] == "bits_per_byte" else 1
    shown = [m for m in methods if m in flags] if fresh else []
    methods = [m for m in methods if m not in shown]
    best = sorted(methods, key=lambda m: (-sign * value[m], m))[0] if methods else None
    summaries = [key | {"method": m, "role": m if m in ("salt", "random") else "method",
                        "n": n, "value": value[m], "se": 0.1,
                        "rank": np.nan if m in shown or len(methods) < 2 else
                        1 + sum(sign * (value[o] - value[m]) > 0 for o in methods),
                        "chance": np.nan, "flags": flags.get(m, "")}
                 for m in [*methods, *shown]]
    if len(methods) < 2:
        return summaries, []
    tests = []
    for m in methods:
        for versus, other in (("best", best), ("random", "random"), ("salt", "salt")):
            if other == m or other not in methods:
                continue
            diff = value[m] - value[other]
            favours = sign * diff
            if versus == "best":
                relation = "not apart" if favours == 0 else str(rng.choice(["worse",
                                                                             "not apart"]))
            else:
                relation = "not apart" if favours == 0 or rng.random() < 0.4 else (
                    "better" if favours > 0 else "worse")
            clears = relation != "not apart"
            tests.append(key | {"method": m, "versus": versus, "other": other, "n": n,
                                "diff": diff, "se": 0.1,
                                "p": float(rng.uniform(0, 1e-6) if clears else rng.uniform()),
                                "test": "mcnemar" if mcnemar else "bootstrap",
                                "clears": clears, "relation": relation})
    return summaries, tests


@pytest.mark.parametrize("seed", range(16))
def test_every_number_of_the_headline_is_a_count_of_its_tables(seed):
    decided, summaries = generated(seed)
    check_headline(lines_of(decided, summaries), decided, summaries)


@pytest.mark.parametrize("real", [False, True])
def test_every_number_of_the_reference_headlines_is_a_count_of_their_tables(real):
    reference = REPO / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
    decided, summaries = read_run(reference)
    run_json = json.loads((reference / RUN_JSON).read_text())
    new_rows = read_run_table(reference, NEW_ROWS)  # the refined rows the start line counts
    check_headline(lines_of(decided, summaries, run=run_json, real=real, new_rows=new_rows),
                   decided, summaries, run_json, new_rows)


def headline_read(decided: pd.DataFrame, summaries: pd.DataFrame) -> list[str]:
    return headline(decided, with_decisions(summaries, decided))


@pytest.mark.parametrize("seed", range(6))
def test_flipping_one_decision_or_one_flag_changes_the_headline(seed):
    """Each decision the headline counts (SALT against OMP, a working checkpoint worse than
    Random, a held-out contrast apart from chance, a method apart from the alone-best of a
    counted setting with power), flipped to "not apart", and one more checkpoint's rows
    flagged, each changes the headline."""
    decided, summaries = generated(seed)
    before = headline_read(decided, summaries)
    broken = broken_of(summaries)
    working = ~decided.apply(lambda t: down(t, broken) or down(t, broken, "other"), axis=1)
    omp = (decided["versus"] == "salt") & decided["method"].isin(["omp", "omp_salt_k"])
    held_out = (decided["family"] != "alignment") | (decided["split"] == "held_out")
    worse = (decided["versus"] == "random") & (decided["relation"] == "worse") & held_out
    chance = ((decided["family"] == "heldout") & (decided["versus"] == "chance")
              & (decided["side"] == "input") & (decided["metric"] == "contrast")
              & (decided["relation"] != "not apart"))
    flips = list(decided.index[working & ((omp & (decided["relation"] != "not apart"))
                                          | worse | chance)])
    assert flips
    # a seeded sample of them: each flip renders the headline anew
    flips = sorted(np.random.default_rng(seed).choice(flips, min(len(flips), 12), replace=False))
    for i in flips:
        flipped = decided.copy()
        flipped.loc[i, "relation"] = "not apart"
        assert headline_read(flipped, summaries) != before, decided.loc[i].to_dict()
    # one flag: a working checkpoint's rows flagged
    line = summaries.index[(summaries["family"] == "zeroshot")
                           & ~summaries.apply(lambda r: down(r, broken), axis=1)][0]
    flagged = summaries.copy()
    flagged.loc[line, "flags"] = "1 rows flagged"
    assert headline_read(decided, flagged) != before


def test_one_flip_against_the_best_changes_the_leader():
    """salt alone best of a setting with power; ofa brought level with it (its test against
    the best "not apart") makes both tied for best: the line changes."""
    decided, summaries = run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80),
                                              "random": hits(0)}))
    assert line_of(findings_markdown(decided, summaries), ALIGNMENT).endswith(
        "salt best in 1 of 1.")
    flipped = decided.copy()
    flipped.loc[(flipped["method"] == "ofa") & (flipped["versus"] == "best"),
                "relation"] = "not apart"
    assert line_of(findings_markdown(flipped, summaries), ALIGNMENT).endswith(
        "ofa, salt tied for best in 1 of 1.")


# -- each line the tables back ------------------------------------------------------------------


def test_worse_than_random_names_its_metric_side_and_stage_and_leaves_out_broken_rows():
    """lstsq's output-row centred cosine is worse than Random's (its P@10 is not); clp's rows
    are flagged and read worse too: the line names lstsq's measure and stage, out of the
    tests against Random, and not clp; no closing sentence claims what the tables deny."""
    rng = np.random.default_rng(3)
    cos = {"salt": rng.normal(0.3, 0.05, TOKENS), "random": rng.normal(0.0, 0.05, TOKENS),
           "lstsq": rng.normal(-0.2, 0.05, TOKENS)}
    decided, summaries = run(
        alignment("xx", {"salt": hits(120), "lstsq": hits(60), "random": hits(0)}),
        alignment("xx", cos, side="output", metric="cos_centred"),
        zeroshot("xx", {"salt": 1.0, "lstsq": 0.9, "random": 1.5, "clp": 2.0},
                 {"clp": "7 rows flagged"}))
    line = line_of(findings_markdown(decided, summaries), "Worse than Random")
    against = decided[(decided["versus"] == "random") & (decided["method"] != "clp")]
    assert f"(1 of {len(against)} tests of working checkpoints against Random" in line
    assert line.endswith("Transfer stage (1 test): held-out output-row centred cos: xx "
                         "gpt2_xx (lstsq).")
    assert "clp" not in line and "no working method" not in line


def test_a_setting_without_power_names_no_leader():
    """Held-out P@10 in two settings: 400 tokens where salt leads by 80 (a test can clear),
    15 tokens where no difference can: the line names the leader of the first alone and
    says the second has no power, naming no method there."""
    decided, summaries = run(
        alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
        alignment("yy", {"salt": hits(3, n=15), "ofa": hits(1, n=15), "random": hits(0, n=15)}))
    line = line_of(findings_markdown(decided, summaries), ALIGNMENT)
    assert "a test has power in 1 of 2 (xx gpt2_xx): salt best in 1 of 1." in line
    assert "No power in 1 of 2 (yy gpt2_yy): the largest net difference between two working " \
           "methods there, 3 tokens, is below the" in line
    assert line.endswith("so no method is named there.")
    assert "tied for best" not in line
    # no setting with power: no method is named at all
    weak = run(alignment("yy", {"salt": hits(3, n=15), "ofa": hits(1, n=15),
                                "random": hits(0, n=15)}))
    alone = line_of(findings_markdown(*weak), ALIGNMENT)
    assert "no power in any of the 1 (yy gpt2_yy)" in alone
    assert "best in" not in alone and "tied for" not in alone


def test_every_count_carries_its_denominator():
    text = findings_markdown(*anomalous())
    power_line = line_of(text, "Tests without power")
    # two held-out P@10 cells (xx and yy), one of them (yy's 15 tokens) without power
    assert "(1 of 2 McNemar cells of the held-out split" in power_line
    assert "power in the other 1: xx gpt2_xx input-row P@10 (transfer stage)" in power_line
    assert "(at most 3 tokens) is below the 14 discordant tokens" in power_line
    assert detectable_discordant(0.001 / 8) == 14
    assert "(2 of 2 settings, those that hold all 3 competing methods)" in \
        line_of(text, ALIGNMENT)
    assert re.search(r"\(\d+ of \d+ tests of working checkpoints against Random",
                     line_of(text, "Worse than Random"))


def omp_run(flag_omp: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """SALT against omp and omp_salt_k in bits per byte before and after LAPT, and in
    held-out P@10 of the input rows."""
    flags = {"omp": "4 rows flagged"} if flag_omp else None
    return run(
        zeroshot("xx", {"salt": 1.0, "omp": 1.3, "omp_salt_k": 0.8, "random": 1.5}, flags),
        zeroshot("xx", {"salt": 1.0, "omp": 1.3, "omp_salt_k": 1.0, "random": 1.5},
                 family="lapt_zeroshot"),
        alignment("xx", {"salt": hits(120), "omp": hits(40, 80), "omp_salt_k": hits(118, 2),
                         "random": hits(0)}))


def test_salt_against_omp_is_one_line_per_k_with_the_stages_apart():
    decided, summaries = omp_run()
    text = findings_markdown(decided, summaries)
    at_k = line_of(text, "SALT against OMP at SALT's k")
    default = line_of(text, "SALT against OMP at the tool's default k")
    assert at_k.startswith("- **SALT against OMP at SALT's k** (`omp_salt_k`: k = SALT's "
                           "median support size): transfer stage, 2 paired tests: SALT "
                           "better in 0, worse in 1 (1 in bits per byte of the whole model), "
                           "not apart in 1; "
                           "after LAPT, 1 paired test: SALT better in 0, worse in 0, not "
                           "apart in 1.")
    assert default == (
        f"- **SALT against OMP at the tool's default k** (`omp`: k = {OMP_K}, "
        "mergekit-tokensurgeon's default): transfer stage, 2 paired tests: SALT better in 2 "
        "(1 in bits per byte of the whole model, 1 in held-out input-row P@10), worse in 0, "
        "not apart in 0; after LAPT, 1 paired test: SALT better in 1 (1 in bits per byte of "
        "the whole model), worse in 0, not apart in 0.")
    # SALT's conditioning, where the run has it, gives each line its k/h
    conditioning = pd.DataFrame({"lang": ["xx"], "source": ["src"], "target": ["gpt2_xx"],
                                 "h_t": [128], "k_over_h_median": [0.09]})
    text = findings_markdown(decided, summaries, conditioning=conditioning)
    assert "(`omp_salt_k`: k = SALT's median support size, k/h 0.09)" in text
    assert f"(`omp`: k = {OMP_K}, mergekit-tokensurgeon's default, k/h 0.5)" in text
    # a run that sets OMP's k says so, and its k/h is that k's
    text = findings_markdown(decided, summaries, {"omp_k": 32}, conditioning=conditioning)
    assert "(`omp`: k = 32, k/h 0.25)" in text
    # a broken OMP checkpoint counts in no line, nor does the LAPT one trained from it (the
    # spine tests no flagged checkpoint: only its alignment and LAPT lines are left here)
    flagged = omp_run(flag_omp=True)
    default = line_of(findings_markdown(*flagged), "SALT against OMP at the tool's default k")
    assert default.endswith("; 2 tests with flagged rows left out): no test between working "
                            "checkpoints.")


def test_the_lines_after_lapt_say_how_far_lapt_moved_the_rows():
    decided, summaries = omp_run()
    movement = pd.DataFrame({
        "lang": "xx", "source": "src", "target": "gpt2_xx",
        "method": ["salt", "salt", "omp_salt_k", "omp_salt_k", "omp", "random"],
        "side": ["input", "output"] * 3, "median_cosine": [0.9991, 0.99, 0.9995, 0.98, 0.5, 0.1]})
    text = findings_markdown(decided, summaries, movement=movement)
    at_k = line_of(text, "SALT against OMP at SALT's k")
    # SALT's and this rival's runs only (Random's and the other OMP's are not these tests')
    assert ("after LAPT (the new rows' median cosine to their rows before LAPT: input "
            "0.9991-0.9995, output 0.9800-0.9900, over 2 runs), 1 paired test:") in at_k
    default = line_of(text, "SALT against OMP at the tool's default k")
    assert "input 0.5000-0.9991, output 0.9900, over 2 runs" in default
    # the transfer stage says nothing of it; without the table neither stage does
    assert "transfer stage, 2 paired tests" in at_k
    assert "median cosine" not in line_of(findings_markdown(decided, summaries),
                                          "SALT against OMP at SALT's k")


def test_a_broken_checkpoint_takes_no_rank_and_no_lead():
    """clp's rows are flagged and its bits per byte are the setting's best by summaries that
    still rank it (a report from before the spine left flagged checkpoints unranked): the
    headline lists it as broken, never as best, never as worse than Random, and leaves its
    setting out of the leaders (no test reads the others against a working best there); the
    LAPT checkpoint trained from its rows is broken too."""
    decided, summaries = run(
        zeroshot("xx", {"salt": 1.0, "lstsq": 1.2, "random": 1.5, "clp": 0.5}),
        zeroshot("yy", {"salt": 1.0, "lstsq": 0.8, "random": 1.5, "clp": 1.1}),
        zeroshot("xx", {"salt": 1.0, "lstsq": 1.2, "random": 1.5, "clp": 0.5},
                 family="lapt_zeroshot"),
        zeroshot("yy", {"salt": 1.0, "lstsq": 0.8, "random": 1.5, "clp": 1.2},
                 family="lapt_zeroshot"))
    clp = (summaries["lang"] == "xx") & (summaries["method"] == "clp")
    summaries.loc[clp & (summaries["family"] == "zeroshot"), "flags"] = "9 rows flagged"
    assert summaries[clp]["rank"].tolist() == [1, 1]
    text = findings_markdown(decided, summaries)
    for kind in (ZEROSHOT, LAPT):
        assert line_of(text, kind).endswith(
            "(1 of 2 settings, those that hold all 4 competing methods; clp left out where its "
            "rows are flagged; 1 whose best is a checkpoint with flagged rows left out): lstsq "
            "best in 1 of 1.")
    assert "(1 checkpoint: xx gpt2_xx clp; the 1 LAPT checkpoint trained from these)" in \
        line_of(text, "Rows blown up or zero")
    assert "clp" not in "".join(line for line in opening(text)
                                if "Rows blown up" not in line and "left out" not in line)
    # as the spine now writes them: flagged checkpoints unranked and untested, alike
    fresh = run(
        zeroshot("xx", {"salt": 1.0, "lstsq": 1.2, "random": 1.5, "clp": 0.5},
                 {"clp": "9 rows flagged"}),
        zeroshot("yy", {"salt": 1.0, "lstsq": 0.8, "random": 1.5, "clp": 1.1}))
    assert fresh[1].set_index(["lang", "method"])["rank"].isna().tolist().count(True) == 1
    assert line_of(findings_markdown(*fresh), ZEROSHOT).endswith(
        "(2 of 2 settings, those that hold all 3 competing methods; clp left out where its "
        "rows are flagged): lstsq, salt best in 1 of 2.")


def test_every_line_names_its_metric_side_and_stage():
    for real in (False, True):
        reference = REPO / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
        for line in opening(reference_text(reference, real)):
            if any(w in line for w in ("Rows blown up", "PLMs without", "One seed", " seeds**")):
                continue  # a checkpoint, a PLM or the seeds, not a measure
            assert re.search(r"transfer stage|after LAPT|side and stage", line, re.I), line
            assert re.search(r"P@1|bits per byte|cos|acc|contrast|MRR", line, re.I), line
            # the side: rows of one side, or the whole model (bits per byte, benchmarks)
            assert re.search(r"input|output|-row|per side|whole model", line), line


def test_the_run_says_how_many_seeds_its_verdicts_rest_on():
    decided, summaries = clean()
    assert line_of(findings_markdown(decided, summaries), "One seed") == (
        "- **One seed**: every verdict rests on one draw of the spaces, splits and seeded "
        "methods.")
    said = line_of(findings_markdown(decided, summaries, run={"commit": "abc", "date": "d",
                                                              "seed": 1234}), "One seed")
    assert said.startswith("- **One seed** (`seed` 1234): ")
    world = findings_markdown(*read_run(REPO / REFERENCE_DIR))
    assert "**One seed**" in world


def test_a_real_text_run_states_its_limits_and_is_not_ranked_beside_the_world():
    """The two runs share no items, so no paired test sets their leaders side by side: the
    real run's headline holds no line beside the world's."""
    real = run(alignment("de", {"salt": hits(40, 80), "ofa": hits(120), "random": hits(0)}),
               zeroshot("de", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}))
    text = findings_markdown(*real, real=True)
    assert text.startswith("# What real text shows\n")
    assert "A real-text run holds for its own models and text" in text
    assert "real-text run holds" not in findings_markdown(*real)
    reference = reference_text(REPO / REAL_REFERENCE_DIR, True)
    assert "Beside the miniature world" not in reference and "mean rank" not in reference


# -- the opening lines --------------------------------------------------------------------------


def test_a_method_is_called_best_only_where_every_other_is_apart():
    """salt leads ofa by 4 tokens of 400 (McNemar p 0.125): both are tied for best; 80
    tokens apart, salt alone is best and ofa is not named."""
    random = {"random": hits(0), "world_oracle": hits(TOKENS)}
    close = findings_markdown(*run(alignment("xx", {"salt": hits(120), "ofa": hits(116, 4),
                                                    **random})))
    apart = findings_markdown(*run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80),
                                                    **random})))
    tied = line_of(close, ALIGNMENT)
    assert tied.endswith("ofa, salt tied for best in 1 of 1.")
    assert "salt best" not in tied
    alone = line_of(apart, ALIGNMENT)
    assert alone.endswith("(1 of 1 settings, those that hold all 3 competing methods): salt "
                          "best in 1 of 1.")
    # the oracle is shown, never ranked: not one of the methods counted
    assert "world_oracle" not in tied + alone
    # no test separates any method, though a test could: all are tied, none is called best
    # (salt and ofa 14 hits apart, 86 discordant tokens both ways: p about 0.16)
    same = findings_markdown(*run(alignment("xx", {"salt": hits(100), "ofa": hits(86, 50),
                                                   "random": hits(95, 3)})))
    assert line_of(same, ALIGNMENT).endswith(
        "all 3 methods tied for best in 1 of 1: no test separates them.")


def test_each_kinds_line_names_its_best_or_tied_best_methods():
    """Per kind, over its settings: a method best alone where every other is worse than it
    (the decided tests against the best), tied where some other is not apart; the counts
    add up to the settings."""
    decided, summaries = run(
        alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
        alignment("yy", {"salt": hits(120), "ofa": hits(118, 2), "random": hits(0)}),
        zeroshot("xx", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}),
        zeroshot("yy", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}),
        paper_table(1, "xx", {"salt": hits(100), "ofa": hits(100, 1), "random": hits(90)}))
    text = findings_markdown(decided, summaries)
    assert line_of(text, ALIGNMENT).endswith(
        "(2 of 2 settings, those that hold all 3 competing methods): salt best in 1 and tied "
        "for best in 1 of 2; ofa tied for best in 1 of 2.")
    assert line_of(text, ZEROSHOT).endswith(
        "(2 of 2 settings, those that hold all 3 competing methods): lstsq best in 2 of 2.")
    # the paper tables share one line; 2 discordant questions can never clear
    assert line_of(text, "Benchmarks").startswith(
        "- **Benchmarks**: Table 1, Facts acc of the whole model, after LAPT (1 of 1 settings, "
        "those that hold all 3 competing methods): no power in any of the 1 (xx gpt2_xx)")
    # each "best" is the decided table's: every other method worse than it there
    best = decided[decided["versus"] == "best"]
    apart = best.groupby(["family", "lang", "other"])["relation"].apply(
        lambda r: bool((r == "worse").all()))
    assert apart.to_dict() == {
        ("alignment", "xx", "salt"): True, ("alignment", "yy", "salt"): False,
        ("table1", "xx", "ofa"): False, ("zeroshot", "xx", "lstsq"): True,
        ("zeroshot", "yy", "lstsq"): True}


def test_every_kind_of_anomaly_is_counted_and_none_is_invented():
    text = findings_markdown(*anomalous())
    for kind in ANOMALIES:
        line_of(text, kind)
    assert line_of(text, "Worse than Random").endswith(
        "Transfer stage (1 test): bits per byte of the whole model: xx gpt2_xx (lstsq).")
    assert "(1 checkpoint: xx gpt2_xx clp)" in line_of(text, "Rows blown up or zero")
    assert "(2 of 3: xx gpt2_xx, zz gpt2_zz)" in line_of(text, "PLMs without measurable meaning")
    calm = findings_markdown(*clean())
    for kind in ANOMALIES:
        assert f"**{kind}**" not in calm
    # two kinds' leaders, SALT against OMP at the tool's k and the seed
    assert len(opening(calm)) == 4


def test_a_run_without_paired_tests_says_so():
    """A run whose report holds no paired test (no per-item scores: the report rule on
    results without them) still has findings: no opening line, 0 of 0 tests."""
    decided, summaries = run()
    assert decided.empty
    text = findings_markdown(decided, summaries)
    assert text.startswith("# What the run shows\n")
    assert "0 of the 0 tests clear it" in text
    assert headline(decided, with_decisions(summaries, decided)) == [
        "No paired test in this run: nothing to rank (see the tables below)."]


def test_the_findings_open_with_at_most_fourteen_lines_and_four_per_written_mode():
    for text, reference in ((findings_markdown(*anomalous()), None),
                            (findings_markdown(*clean()), None),
                            ((REPO / PAGES[False]).read_text(), REFERENCE_DIR),
                            (current_block((REPO / PAGES[True]).read_text(), real=True),
                             REAL_REFERENCE_DIR)):
        # the leaders once more per vocabulary mode a target is written with (@extend)
        modes = 0 if reference is None else read_run(REPO / reference)[1]["target"].astype(
            str).str.contains("@").any()
        assert 1 <= len(opening(text)) <= 14 + 4 * int(modes)
        assert all(line.startswith("- **") for line in opening(text))


def test_every_anomaly_stays_in_the_opening_when_every_kind_has_a_leader():
    """A run with all seven kinds (alignment, zero-shot, after LAPT, Tables 1-4), SALT
    against OMP at both k and all four anomalies, no held-out shared tokens: the opening
    keeps them all in eleven."""
    decided, summaries = anomalous()
    more = run(zeroshot("xx", {"salt": 1.0, "omp": 1.2, "omp_salt_k": 1.1, "random": 1.5},
                        family="lapt_zeroshot"),
               *(paper_table(n, "xx", {"salt": hits(100), "ofa": hits(60), "random": hits(50)})
                 for n in (1, 2, 3, 4)))
    decided = decide(pd.concat([decided[TEST_COLUMNS], more[0][TEST_COLUMNS]],
                               ignore_index=True))
    summaries = pd.concat([summaries, more[1]], ignore_index=True)
    lines = headline(decided, with_decisions(summaries, decided))
    assert len(lines) == 11
    for kind in ANOMALIES:
        assert any(line.startswith(f"**{kind}**") for line in lines), kind


def test_the_count_of_clearing_tests_is_the_comparisons_tables():
    for alpha in (0.001, 0.5):
        decided, summaries = run(
            alignment("xx", {"salt": hits(120), "ofa": hits(112, 8), "random": hits(115, 5)}),
            alpha=alpha)
        text = findings_markdown(decided, summaries)
        # a pair held twice (against the best and against SALT) is one test
        once = decided[~pair_ids(decided).duplicated()]
        assert len(once) < len(decided)
        assert f"{int(once['clears'].sum())} of the {len(once)} tests clear it" in text
        assert f"family-wise α = {alpha} " in text
    assert decide(decided, 0.5)["clears"].sum() > decide(decided, 0.001)["clears"].sum()


# -- the committed references and the pages written from them ----------------------------------


def test_the_committed_pages_are_what_the_committed_references_give():
    """The README's two blocks, docs/findings.md and docs/real_text.md's block are the
    findings of docs/reference_run/ and docs/reference_real_run/ (`--pages` rewrites them)."""
    readme = (REPO / README).read_text()
    for real in (False, True):
        start, end = MARKERS[real]
        assert readme.count(start) == readme.count(end) == 1
        reference = REPO / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
        run_json = json.loads((reference / RUN_JSON).read_text())
        assert {"commit", "date"} <= set(run_json) <= {"commit", "date", "note", "seed"}
        text = reference_text(reference, real)
        assert f"of the run of commit {run_json['commit']} ({run_json['date']}" in text
        assert run_json.get("note", "") in text  # what run a re-reported reference is of
        assert current_block(readme, real) == headline_block(text, PAGES[real])
        page = (REPO / PAGES[real]).read_text()
        assert (current_block(page, real=True) if real else page) == text


def test_the_readme_block_is_the_headline_but_its_anomalies_and_seeds_and_a_link():
    decided, summaries = anomalous()
    text = findings_markdown(decided, summaries)
    block = headline_block(text, PAGES[False])
    lines = headline(decided, with_decisions(summaries, decided))
    # the anomalies and the seed line stay on the docs page, counted apart here
    page_only = [line for line in lines
                 if line.split("**")[1] in ANOMALIES or line.split("**")[1].endswith(
                     ("One seed", " seeds"))]
    assert page_only and lines[-len(page_only):] == page_only
    kept = lines[:len(lines) - len(page_only)]
    assert block == "\n".join(f"- {line}" for line in kept) + (
        f"\n\nThe anomalies, the seeds and every setting's table: "
        f"[{PAGES[False]}]({PAGES[False]}).\n")


def write_run(directory: Path, decided: pd.DataFrame, summaries: pd.DataFrame,
              mtime: float | None = None) -> Path:
    """A report folder with the two tables the findings read."""
    directory.mkdir(parents=True)
    for name, frame in (("comparisons_csv", decided), ("summaries_csv", summaries)):
        path = directory / paths.REPORT_FILES[name]
        frame.to_csv(path, index=False)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
    return directory


def checkout(root: Path) -> str:
    """A git checkout at ``root`` with one commit; its short hash."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for command in (["init", "-q"], ["add", "README.md"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *command], cwd=root, env=env, check=True)
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def pages_root(root: Path) -> Path:
    """A checkout's README (both blocks between other text) and docs/real_text.md (its
    block between other text)."""
    (root / "docs").mkdir(parents=True)
    readme = root / "README.md"
    readme.write_text("# T\n\nbefore\n{}\nold world\n{}\nbetween\n{}\nold real\n{}\nafter\n"
                      .format(*MARKERS[False], *MARKERS[True]))
    (root / PAGES[True]).write_text("# Real\n\nabove\n{}\nold page\n{}\nbelow\n"
                                    .format(*MARKERS[True]))
    return readme


def outside(text: str, real: bool) -> tuple[str, str]:
    start, end = MARKERS[real]
    return text.split(start)[0], text.split(end)[1]


def test_refresh_copies_the_tables_and_rewrites_only_the_blocks(tmp_path):
    root = tmp_path / "checkout"
    readme = pages_root(root)
    commit = checkout(root)
    before = readme.read_text()
    when = 1_600_000_000.0  # 2020-09-13
    report = write_run(tmp_path / "report", *anomalous(), mtime=when)
    refresh_reference(report, readme=readme, root=root)
    reference = root / REFERENCE_DIR
    for name in ("comparisons_csv", "summaries_csv"):
        file = paths.REPORT_FILES[name]
        assert (reference / file).read_bytes() == (report / file).read_bytes()
    assert not (reference / paths.REPORT_FILES["salt_conditioning_csv"]).exists()
    assert json.loads((reference / RUN_JSON).read_text()) == {"commit": commit,
                                                              "date": "2020-09-13"}
    text = reference_text(reference)
    assert (root / PAGES[False]).read_text() == text
    after = readme.read_text()
    assert current_block(after, False) == headline_block(text, PAGES[False])
    assert "old world" not in after
    assert outside(after, False) == outside(before, False)  # the real block is untouched
    assert current_block(after, True) == "old real\n"
    assert "old page" in (root / PAGES[True]).read_text()  # no real reference: not rewritten


def test_a_reference_keeps_salts_conditioning_and_its_lines_give_k_over_h(tmp_path):
    """Where the report folder holds SALT's conditioning table, the reference keeps it and
    the SALT-against-OMP lines read each k/h from it."""
    root = tmp_path / "checkout"
    readme = pages_root(root)
    checkout(root)
    report = write_run(tmp_path / "report", *omp_run())
    pd.DataFrame({"lang": ["xx"], "source": ["src"], "target": ["gpt2_xx"], "h_t": [256],
                  "k_over_h_median": [0.125]}).to_csv(
        report / paths.REPORT_FILES["salt_conditioning_csv"], index=False)
    refresh_reference(report, readme=readme, root=root)
    block = current_block(readme.read_text(), False)
    assert "(`omp_salt_k`: k = SALT's median support size, k/h 0.12)" in block  # 2 digits
    assert f"(`omp`: k = {OMP_K}, mergekit-tokensurgeon's default, k/h 0.25)" in block


def test_the_pages_option_rewrites_both_references_pages(tmp_path, monkeypatch):
    """Each reference rewrites its own pages; `--pages` rewrites both from the committed
    tables, and nothing changes when they are current."""
    root = tmp_path / "checkout"
    readme = pages_root(root)
    checkout(root)
    refresh_reference(write_run(tmp_path / "real", *clean()), real=True, readme=readme,
                      root=root)
    page = (root / PAGES[True]).read_text()
    assert current_block(page, True) == reference_text(root / REAL_REFERENCE_DIR, True)
    assert page.startswith("# Real\n\nabove\n") and page.endswith("\nbelow\n")
    assert current_block(readme.read_text(), False) == "old world\n"  # the world's untouched
    refresh_reference(write_run(tmp_path / "world", *anomalous()), readme=readme, root=root)
    after = readme.read_text()
    assert current_block(after, True) == headline_block(
        reference_text(root / REAL_REFERENCE_DIR, True), PAGES[True])
    assert after.startswith("# T\n\nbefore\n") and after.endswith("\nafter\n")
    assert "\nbetween\n" in after
    page = (root / PAGES[True]).read_text()
    monkeypatch.chdir(root)  # --pages works on the checkout it runs in
    assert main(["--pages"]) == 0
    assert readme.read_text() == after and (root / PAGES[True]).read_text() == page
    write_pages(False, readme, root)
    assert readme.read_text() == after


def test_replacing_a_block_keeps_what_is_around_it():
    text = "a\n{}\nold\n{}\nb\n".format(*MARKERS[True])
    new = replace_block(text, "new\n", real=True)
    assert new == "a\n{}\nnew\n{}\nb\n".format(*MARKERS[True])
    assert current_block(new, real=True) == "new\n"
    with pytest.raises(ValueError):
        replace_block(text, "new\n", real=False)  # no world markers in it


# -- two runs compared ----------------------------------------------------------------------------


def test_two_runs_are_compared_test_by_test(tmp_path, capsys):
    decided, summaries = anomalous()
    a = write_run(tmp_path / "A", decided, summaries)
    assert main(["--compare", str(a), str(a)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and re.fullmatch(r"(\d+) of \1 tests shared by the two runs agree\.",
                                          out[0])
    shared = int(out[0].split()[0])
    flipped = decided.copy()
    line = flipped.index[(flipped["family"] == "zeroshot") & (flipped["method"] == "salt")
                         & (flipped["versus"] == "random")][0]
    assert flipped.loc[line, "relation"] == "better"
    flipped.loc[line, "relation"] = "worse"
    b = write_run(tmp_path / "B", flipped, summaries)
    assert main(["--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{shared - 1} of {shared} tests shared by the two runs agree.",
                   "- zeroshot transfer xx/src/gpt2_xx   bits_per_byte: salt against random: "
                   "better in A, worse in B"]
    # a test only one run made is not compared
    one = pair_ids(decided) == pair_ids(decided).loc[line]  # both lines of the pair
    c = write_run(tmp_path / "C", decided[~one], summaries)
    assert main(["--compare", str(a), str(c)]) == 0
    assert capsys.readouterr().out.startswith(f"{shared - 1} of {shared - 1} tests")


def test_a_report_folder_reads_back_as_it_was_written(tmp_path):
    decided, summaries = anomalous()
    again = read_run(write_run(tmp_path / "r", decided, summaries))
    assert findings_markdown(*again) == findings_markdown(decided, summaries)
    assert re.search(r"\d+ of the \d+ tests clear it", findings_markdown(*again))
