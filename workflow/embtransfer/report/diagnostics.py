"""The report's diagnostic tables: can the comparisons mean anything? Each reads one kind of
record and writes its table as CSV and Markdown (the prose is ``texts.yaml``'s). A verdict
(a PLM carries meaning, a space beats chance) is a test the spine decides, read back from the
decided comparisons as the findings read it.

* The target-PLM probes (:mod:`embtransfer.evaluation.plm_probes`): do a target PLM's input
  rows carry meaning? Each probe with both sides of its paired comparison (so the baseline a
  z stands on is in view), the difference, its standard error and z.
* The fastText BLI (:mod:`embtransfer.transfer.fasttext_bli`): do the aligned fastText
  spaces WECHSEL and OFA search carry translations at all?
* The source's quality floor (:mod:`embtransfer.evaluation.lm_floor`): is the source LLM a
  language model of its own language? Its bits per byte on its language's held-out text
  beside the add-one unigram and the Kneser–Ney bigram of its own tokens, then the control
  lines: the source with its own tokenizer on each target language's held-out text.
* SALT's conditioning (:func:`embtransfer.transfer.regression.conditioning_summary`): where
  k nears the PLM's width h the neighbours' Gram matrix is nearly singular and the projected
  rows can be many times longer than the source rows they combine (docs/methods.md).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core import paths
from embtransfer.core.atomic import read_json, write_table
from embtransfer.core.paired import CORRECTION, FAMILY_ALPHA, derived_seed, normal_p, ratio_se
from embtransfer.evaluation.plm_probes import PROBES
from embtransfer.report.comparisons import given_test, metric_spec
from embtransfer.report.records import MalformedResultError, identity, read_records
from embtransfer.report.setting_tables import read_holdout_scores
from embtransfer.report.tables import format_p, markdown
from embtransfer.report.texts import prose

#: A target PLM's (and SALT's) setting.
SETTING = ["lang", "source", "target"]


def _number(value: Any, digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    return "—" if pd.isna(value) else f"{scale * value:.{digits}f}{unit}"


def _setting_columns(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """A table's first columns: the setting's language, source and target PLM."""
    return {"language": frame["lang"], "source": frame["source"], "target PLM": frame["target"]}


def _write(frame: pd.DataFrame, key: str, blocks: list[str], csv_path: str | os.PathLike,
           md_path: str | os.PathLike, **fields: Any) -> pd.DataFrame:
    """Write ``frame`` as CSV and its Markdown: the title and introduction at ``key`` of
    texts.yaml, then ``blocks``, or the ``empty`` text when ``frame`` has no line."""
    parts = [prose(f"{key}.title"), prose(f"{key}.intro", **fields)]
    parts += [prose(f"{key}.empty")] if frame.empty else blocks
    write_table(frame, "\n\n".join(parts) + "\n", csv_path, md_path)
    return frame


# -- the target-PLM probes -------------------------------------------------------------------------


#: The two sides of each probe's paired comparison: the record's ``mean`` and ``random``.
SIDES = {"span": ("neighbors_share", "random_share"), "class": ("same_cosine", "other_cosine")}
PROBE_COLUMNS = [*SETTING, *(f"{probe}_{stat}" for probe in PROBES
                             for stat in ("items", *SIDES[probe], "diff", "se", "z")),
                 "row_norm", "pairwise_cosine", "carries"]


def probe_tests(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each probe of each PLM as a test against its random baseline (the normal two-sided
    p-value of its z), family ``plm_probes``: the spine decides them
    (:func:`embtransfer.report.comparisons.decide`). A z that is missing is no test."""
    return [given_test({key: line[key] for key in SETTING}
                       | {"family": "plm_probes", "metric": f"{probe}_probe"},
                       line["target"], float(z), 1.0, normal_p(z), "normal")
            for line in frame.to_dict("records") for probe in measured_probes(frame)
            if not pd.isna(z := line[f"{probe}_z"])]


def carries_meaning(decided: pd.DataFrame) -> pd.Series:
    """Per target PLM (language, source, target) of the decided comparisons: every probe of
    the table better than its baseline; a probe it has no test of is not passed."""
    probes = decided[decided["family"] == "plm_probes"]
    measured = probes["metric"].nunique()
    return probes.groupby(SETTING)["relation"].apply(
        lambda r: bool((r == "better").sum() == measured))


def probe_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.PLM_PROBE`), sorted by setting. A
    probe no record measured (the class probe, which needs the miniature world's concept
    classes, in a real-text run) has no columns; ``carries`` is added from the decided
    comparisons (:func:`write_probes`)."""
    lines = []
    for path in files:
        ident = identity(paths.PLM_PROBE, path, "a PLM probe record")
        record = read_json(path)
        line: dict[str, Any] = {key: ident[key] for key in SETTING}
        for probe in [p for p in PROBES if record.get(p) is not None]:
            names = {"items": "items", "mean": SIDES[probe][0], "random": SIDES[probe][1],
                     "diff": "diff", "se": "se", "z": "z"}
            line |= {f"{probe}_{name}": record[probe][key] for key, name in names.items()}
        lines.append(line | record["geometry"])
    dropped = [p for p in PROBES if lines and not any(f"{p}_z" in line for line in lines)]
    frame = pd.DataFrame(lines, columns=[c for c in PROBE_COLUMNS[:-1]
                                         if c.split("_")[0] not in dropped])
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def measured_probes(frame: pd.DataFrame) -> list[str]:
    """The probes of a probe table (:func:`probe_frame`): those it has columns of."""
    return [p for p in PROBES if f"{p}_z" in frame.columns]


def _cell(line: Any, probe: str) -> str:
    if pd.isna(z := getattr(line, f"{probe}_z")):
        return "—"
    ours, baseline, diff, se, items = (getattr(line, f"{probe}_{stat}")
                                       for stat in (*SIDES[probe], "diff", "se", "items"))
    return f"{ours:.3f} vs {baseline:.3f}: {diff:+.3f} ± {se:.3f} (z {z:.1f}, n {items})"


def write_probes(frame: pd.DataFrame, decided: pd.DataFrame, csv_path: str | os.PathLike,
                 md_path: str | os.PathLike) -> pd.DataFrame:
    """``frame`` with ``carries``: :func:`carries_meaning` per line (a PLM without tests
    does not carry), written as the table's csv and Markdown."""
    keys = pd.MultiIndex.from_frame(frame[SETTING].astype(str))
    verdict = carries_meaning(decided).reindex(keys).fillna(False)
    frame = frame.assign(carries=verdict.to_numpy(bool))
    probes = measured_probes(frame)
    columns = {"language": frame["lang"], "source": frame["source"], "target PLM": frame["target"]}
    columns |= {prose(f"probes.{probe}_column"): [_cell(line, probe) for line in frame.itertuples()]
                for probe in probes}
    columns |= {"row norm": frame["row_norm"].map(lambda v: f"{v:.2f}"),
                "pairwise cos": frame["pairwise_cosine"].map(lambda v: f"{v:.3f}"),
                "carries meaning": frame["carries"].map(lambda v: "yes" if v else "no")}
    intro = [prose("probes.intro"), *(prose(f"probes.{probe}") for probe in probes),
             prose("probes.cells", correction=CORRECTION,
                   alpha=decided.attrs.get("alpha", FAMILY_ALPHA))]
    if "class" not in probes:
        intro.append(prose("probes.no_class"))
    text = [prose("probes.title"), " ".join(intro), markdown(pd.DataFrame(columns))]
    write_table(frame, "\n\n".join(text) + "\n", csv_path, md_path)
    return frame


# -- the fastText BLI ------------------------------------------------------------------------------


#: The record's fields, in the table's order, then the decision.
BLI_RECORD = [
    "lang", "source_language", "queries", "candidates",
    "p_at_1", "chance_at_1", "hits_1", "p_value_1",
    "p_at_10", "chance_at_10", "hits_10", "p_value_10",
    "scored_pairs", "held_out_pairs", "dropped_seen_by_fit",
    "left_out_no_target_vector", "left_out_no_source_word",
    "fit_pairs_used", "fit_precision_at_1", "fit_p1_candidates",
]  # fmt: skip
BLI_COLUMNS = [*BLI_RECORD, "above_chance"]


def bli_frame(files: list[str]) -> pd.DataFrame:
    """One line per record in ``files`` (:data:`paths.FASTTEXT_BLI`), in their order, with
    ``above_chance`` decided over all of them."""
    lines = []
    for path in files:
        ident = identity(paths.FASTTEXT_BLI, path, "a fastText BLI record")
        record = read_json(path)
        if record.get("lang") != ident["lang"]:
            raise ValueError(f"{path} holds the record of {record.get('lang')!r}")
        lines.append({key: record.get(key) for key in BLI_RECORD})
    return pd.DataFrame(lines, columns=BLI_RECORD)


def bli_tests(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Each language's P@10 against its chance (the record's one-sided binomial p-value) as a
    test of family ``fasttext_bli``, for the spine to decide."""
    return [given_test({"family": "fasttext_bli", "lang": line["lang"],
                        "source": line["source_language"], "metric": "bli_p_at_10"},
                       "fasttext", float(line["p_at_10"] - line["chance_at_10"]), math.nan,
                       float(line["p_value_10"]), "binomial")
            for line in frame.to_dict("records") if line["queries"]]


def write_fasttext_bli(frame: pd.DataFrame, decided: pd.DataFrame, csv_path: str | os.PathLike,
                       md_path: str | os.PathLike) -> pd.DataFrame:
    """``frame`` with ``above_chance`` (its P@10 better than chance in the decided
    comparisons), written as the table's csv and Markdown."""
    better = decided[(decided["family"] == "fasttext_bli") & (decided["relation"] == "better")]
    frame = frame.assign(above_chance=frame["lang"].isin(set(better["lang"])))
    table = pd.DataFrame({
        "language": frame["lang"], "n": frame["queries"], "candidates": frame["candidates"],
        "P@1": frame["p_at_1"].map(lambda v: _number(v, 1, unit=" %")),
        "chance P@1": frame["chance_at_1"].map(lambda v: _number(v, 3, unit=" %")),
        "P@10": frame["p_at_10"].map(lambda v: _number(v, 1, unit=" %")),
        "chance P@10": frame["chance_at_10"].map(lambda v: _number(v, 3, unit=" %")),
        "p (P@10)": frame["p_value_10"].map(lambda v: "—" if pd.isna(v) else format_p(v)),
        "above chance": frame["above_chance"].map(lambda v: "yes" if v else "no"),
        "held-out pairs scored": frame["scored_pairs"],
        "left out (no vector / no source word)": [
            f"{a} / {b}" for a, b in zip(frame["left_out_no_target_vector"],
                                         frame["left_out_no_source_word"], strict=True)],
        "fit P@1 (own pairs)": frame["fit_precision_at_1"].map(lambda v: _number(v, 1, unit=" %")),
    })  # fmt: skip
    return _write(frame, "bli", [markdown(table)], csv_path, md_path, correction=CORRECTION,
                  alpha=decided.attrs.get("alpha", FAMILY_ALPHA))


# -- SALT's conditioning ---------------------------------------------------------------------------


QUANTILES = ["median", "p90", "p99", "max"]
CONDITIONING_COLUMNS = [*SETTING, "h_t", "projected", *(f"k_over_h_{q}" for q in QUANTILES),
                        "n_rank_deficient", "rank_deficient_share",
                        *(f"amplification_{q}" for q in QUANTILES)]


def conditioning_frame(files: list[str]) -> pd.DataFrame:
    """One line per regression record in ``files``, sorted by setting."""
    lines = []
    for path in files:
        ident = identity(paths.REGRESSION_META, path, "a SALT regression record")
        try:
            stats = read_json(path)["stats"]
            cond = stats["conditioning"]
            lines.append({key: ident[key] for key in SETTING} | {
                "h_t": cond["h_t"], "projected": stats["counts"]["projected"],
                **{f"k_over_h_{q}": cond["k_over_h"][q] for q in QUANTILES},
                **{key: cond[key] for key in ("n_rank_deficient", "rank_deficient_share")},
                **{f"amplification_{q}": cond["amplification"][q] for q in QUANTILES}})
        except (KeyError, TypeError) as err:
            raise MalformedResultError(
                f"SALT regression record {path} lacks its conditioning ({err!r}); it predates "
                "the conditioning statistics: delete it and rerun the salt_regression rule"
            ) from None
    frame = pd.DataFrame(lines, columns=CONDITIONING_COLUMNS)
    return frame.sort_values(SETTING, kind="stable").reset_index(drop=True)


def write_salt_conditioning(files: list[str], csv_path: str | os.PathLike,
                            md_path: str | os.PathLike) -> pd.DataFrame:
    frame = conditioning_frame(files)
    columns = {
        "language": frame["lang"], "source": frame["source"], "target PLM": frame["target"],
        "h": frame["h_t"], "projected": frame["projected"],
        **{f"k/h {q}": frame[f"k_over_h_{q}"].map(_number) for q in QUANTILES},
        "rank-deficient": frame["rank_deficient_share"].map(lambda v: _number(v, 1, 100, " %")),
        **{f"amplification {q}": frame[f"amplification_{q}"].map(_number)
           for q in ("median", "p99", "max")},
    }
    return _write(frame, "conditioning", [markdown(pd.DataFrame(columns))], csv_path, md_path)


# -- how far LAPT moved the new rows -----------------------------------------------------------


MOVEMENT_COLUMNS = [*SETTING, "method", "side", "rows", "median_cosine", "p10_cosine",
                    "median_relative_change"]


def movement_frame(files: list[str]) -> pd.DataFrame:
    """One line per (LAPT run, side) of the final checkpoints' zero-shot records in ``files``
    (``rows_moved``, embtransfer.evaluation.row_movement), sorted by setting and method."""
    lines = []
    for record in read_records(files, required=("lang", "source", "target", "method")):
        moved = record.get("rows_moved")
        if not isinstance(moved, dict):
            raise MalformedResultError(
                f"LAPT zero-shot record {record.get('_path')} lacks rows_moved: it predates "
                "the movement of the new rows; delete it and rerun the lapt_zeroshot rule")
        lines += [{key: record[key] for key in (*SETTING, "method")} | {"side": side} | {
            k: stats.get(k) for k in MOVEMENT_COLUMNS[5:]} for side, stats in moved.items()]
    frame = pd.DataFrame(lines, columns=MOVEMENT_COLUMNS)
    return frame.sort_values([*SETTING, "method", "side"], kind="stable").reset_index(drop=True)


NEW_ROWS_COLUMNS = [*SETTING, "method", "how", "rows"]


def new_rows_frame(files: list[str]) -> pd.DataFrame:
    """One line per (transfer checkpoint, label) of the zero-shot records in ``files``: how
    many of the checkpoint's rows the method made each way (``counts``: its labels, over
    every target token of a replaced vocabulary, over the appended ones of an extended
    one), sorted by setting, method and label. A record without counts (the source model's,
    an older one) adds no line."""
    lines = [{key: record[key] for key in (*SETTING, "method")} | {"how": how, "rows": int(n)}
             for record in read_records(files, required=("lang", "source"))
             if record.get("counts") and record.get("method")
             for how, n in sorted(record["counts"].items())]
    frame = pd.DataFrame(lines, columns=NEW_ROWS_COLUMNS)
    return frame.sort_values([*SETTING, "method", "how"], kind="stable").reset_index(drop=True)


def write_new_rows(files: list[str], csv_path: str | os.PathLike,
                   md_path: str | os.PathLike) -> pd.DataFrame:
    frame = new_rows_frame(files)
    runs = frame.groupby([*SETTING, "method"], sort=False)
    table = pd.DataFrame([
        {"language": lang, "source": source, "target PLM": target, "method": method,
         "rows": f"{int(part['rows'].sum()):,}",
         "made as": ", ".join(f"{how} {int(n):,}" for how, n in zip(
             part["how"], part["rows"], strict=True))}
        for (lang, source, target, method), part in runs])
    return _write(frame, "new_rows", [markdown(table)], csv_path, md_path)


def write_lapt_movement(files: list[str], csv_path: str | os.PathLike,
                        md_path: str | os.PathLike) -> pd.DataFrame:
    frame = movement_frame(files)
    table = pd.DataFrame({
        **_setting_columns(frame), "method": frame["method"], "side": frame["side"],
        "new rows": frame["rows"],
        "median cosine": frame["median_cosine"].map(lambda v: _number(v, 4)),
        "10th percentile cosine": frame["p10_cosine"].map(lambda v: _number(v, 4)),
        "median relative change": frame["median_relative_change"].map(
            lambda v: _number(v, 4)),
    })
    return _write(frame, "lapt_movement", [markdown(table)], csv_path, md_path)


# -- the source's quality floor --------------------------------------------------------------------


#: ``text``: ``held-out`` (the floor's line, the source's own language) or ``control``.
FLOOR_COLUMNS = [
    "source", "lang", "text", "documents", "bytes", "bits_per_byte", "bits_per_byte_se",
    "unigram_bits_per_byte", "kn_bigram_bits_per_byte", "below_unigram", "below_kn_bigram",
    "clears_floor",
]  # fmt: skip


def _se(nll_nats: list[float], n_bytes: list[int]) -> float:
    nll = np.asarray(nll_nats, np.float64) / math.log(2)
    return ratio_se(nll, np.asarray(n_bytes, np.float64)) if nll.size >= 2 else math.nan


def floor_frame(floor_files: list[str], languages: dict[str, str],
                zeroshot_files: list[str]) -> pd.DataFrame:
    """One ``held-out`` line per floor record (``languages``: source -> its language), then
    one ``control`` line (no floor columns) per source-model zero-shot record of
    ``zeroshot_files`` of a source with a floor record (other records are skipped)."""
    lines: list[dict[str, Any]] = []
    for path in floor_files:
        source = paths.SOURCE_FLOOR.parse(path)["source"]
        record = read_json(path)
        lines.append({
            "source": source, "lang": languages[source], "text": "held-out",
            "bits_per_byte": record["model_bits_per_byte"],
            "bits_per_byte_se": _se(record["document_nll_nats"]["model"],
                                    record["document_bytes"]),
            **{k: record[k] for k in ("documents", "bytes", "unigram_bits_per_byte",
                                      "kn_bigram_bits_per_byte", "below_unigram",
                                      "below_kn_bigram", "clears_floor")},
        })
    floored = {line["source"] for line in lines}
    controls = [r for r in read_records([p for p in zeroshot_files
                                         if paths.ZEROSHOT_SOURCE.parse(p)])
                if r["source"] in floored]
    for record in sorted(controls, key=lambda r: (r["source"], r["lang"])):
        lines.append({
            "source": record["source"], "lang": record["lang"], "text": "control",
            "documents": len(record.get("document_bytes", [])) or math.nan,
            "bytes": record.get("bytes", math.nan), "bits_per_byte": record["bits_per_byte"],
            "bits_per_byte_se": _se(record.get("document_nll_nats", []),
                                    record.get("document_bytes", [])),
        })
    return pd.DataFrame(lines, columns=FLOOR_COLUMNS)


def _bits(lines: pd.DataFrame) -> list[str]:
    return [f"{v:.4f}" + ("" if math.isnan(se) else f" ± {se:.4f}")
            for v, se in zip(lines["bits_per_byte"], lines["bits_per_byte_se"], strict=True)]


def write_source_floor(floor_files: list[str], languages: dict[str, str],
                       zeroshot_files: list[str], csv_path: str | os.PathLike,
                       md_path: str | os.PathLike) -> pd.DataFrame:
    frame = floor_frame(floor_files, languages, zeroshot_files)
    # lm_floor imports torch: the report's inputs (and so the Snakefile) import this module
    from embtransfer.evaluation.lm_floor import FLOOR_MARGIN  # noqa: PLC0415 (Snakefile start-up)

    floor, control = frame[frame["text"] == "held-out"], frame[frame["text"] == "control"]
    parts = [prose("source_floor.held_out"), markdown(pd.DataFrame({
        "source": floor["source"], "language": floor["lang"], "bits per byte": _bits(floor),
        "add-one unigram": floor["unigram_bits_per_byte"],
        "Kneser–Ney bigram": floor["kn_bigram_bits_per_byte"],
        "below unigram": floor["below_unigram"].map(lambda v: f"{100 * v:.1f} %"),
        "below bigram": floor["below_kn_bigram"].map(lambda v: f"{100 * v:.1f} %"),
        "clears": floor["clears_floor"].map(lambda v: "yes" if v else "no"),
    }))]
    if len(control):
        parts += [prose("source_floor.control"), markdown(pd.DataFrame({
            "source": control["source"], "language": control["lang"],
            "bits per byte": _bits(control)}))]
    return _write(frame, "source_floor", parts, csv_path, md_path,
                  margin=f"{100 * FLOOR_MARGIN:.0f}")


# -- held-out shared tokens: by kind, and against bits per byte ----------------------------------


HOLDOUT_KIND_COLUMNS = ["lang", "source", "target", "side", "method", "kind", "tokens",
                        "p_at_10", "chance_p_at_10", "mrr", "contrast", "rows_made_as"]


def heldout_kinds(files: list[str]) -> pd.DataFrame:
    """Per setting, side, method and kind of token: the held-out tokens, their P@10 and
    chance (%), MRR, mean contrast, and how the method made their rows (its labels with
    counts: a fallback, such as a byte no method can decompose, shows here)."""
    scores = read_holdout_scores(files)
    if scores.empty:
        return pd.DataFrame(columns=HOLDOUT_KIND_COLUMNS)
    keys = ["lang", "source", "target", "side", "method", "kind"]
    rows = []
    for key, group in scores.groupby(keys, sort=True):
        labels = group["how"].value_counts()
        rows.append(dict(zip(keys, key, strict=True)) | {
            "tokens": len(group), "p_at_10": 100 * group["hit_10"].mean(),
            "chance_p_at_10": 100 * group["chance_10"].mean(),
            "mrr": group["reciprocal_rank"].mean(), "contrast": group["contrast"].mean(),
            "rows_made_as": ", ".join(f"{how} {n}" for how, n in labels.items())})
    return pd.DataFrame(rows, columns=HOLDOUT_KIND_COLUMNS)


def write_heldout_kinds(files: list[str], csv_path: str | os.PathLike,
                        md_path: str | os.PathLike) -> pd.DataFrame:
    frame = heldout_kinds(files)
    table = pd.DataFrame({
        **_setting_columns(frame), "side": frame["side"], "method": frame["method"],
        "kind": frame["kind"],
        "tokens": frame["tokens"], "P@10": frame["p_at_10"].map(lambda v: _number(v, 1)),
        "chance P@10": frame["chance_p_at_10"].map(lambda v: _number(v, 2)),
        "MRR": frame["mrr"].map(lambda v: _number(v, 3)),
        "contrast": frame["contrast"].map(lambda v: _number(v, 3)),
        "rows made as": frame["rows_made_as"],
    })
    return _write(frame, "heldout_kinds", [markdown(table)], csv_path, md_path)


TRACKING_COLUMNS = ["lang", "source", "target", "side", "metric", "methods", "rho", "p"]
#: The seeded shuffles of the permutation test of a rank correlation.
PERMUTATIONS = 10_000


def spearman(x: np.ndarray, y: np.ndarray, seed: int = 0,
             permutations: int = PERMUTATIONS) -> tuple[float, float]:
    """(Spearman's ρ of ``x`` and ``y``, tie-averaged ranks; its two-sided permutation
    p-value: (1 + shuffles of ``y`` with |ρ| at least as large) / (1 + shuffles), NaN for
    no shuffles). A constant ``x`` or ``y`` has no ρ (NaN)."""
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan, math.nan
    rho = float(np.corrcoef(rx, ry)[0, 1])
    if not permutations:
        return rho, math.nan
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.tile(ry, (permutations, 1)), axis=1)
    cx, cs = rx - rx.mean(), shuffled - shuffled.mean(axis=1, keepdims=True)
    rhos = cs @ cx / (np.linalg.norm(cs, axis=1) * np.linalg.norm(cx))
    return rho, float((1 + np.sum(np.abs(rhos) >= abs(rho) - 1e-12)) / (1 + permutations))


def heldout_tracking(summaries: pd.DataFrame, permutations: int = PERMUTATIONS) -> pd.DataFrame:
    """Per setting, side and held-out metric: Spearman's rank correlation, over the working
    competing methods ranked in both, between the held-out score and the zero-shot bits per
    byte of the same checkpoint setting, signed so that +1 means the methods better on the
    held-out tokens read the text better (lower bits per byte), with its permutation p
    (:func:`spearman`; none where ``permutations`` is 0). Fewer than three methods: no
    correlation."""
    ranked = summaries[summaries["rank"].notna()]
    held = ranked[ranked["family"] == "heldout"]
    text = ranked[(ranked["family"] == "zeroshot") & (ranked["metric"] == "bits_per_byte")]
    setting = ["lang", "source", "target"]
    bpb = text[[*setting, "method", "value"]].rename(columns={"value": "bpb"})
    rows = []
    for key, group in held.groupby([*setting, "side", "metric"], sort=True):
        both = group.merge(bpb, on=[*setting, "method"])
        rho, p = (spearman(both["value"].to_numpy(), -both["bpb"].to_numpy(),
                           derived_seed(key), permutations)
                  if len(both) >= 3 else (math.nan, math.nan))
        rows.append(dict(zip([*setting, "side", "metric"], key, strict=True))
                    | {"methods": len(both), "rho": rho, "p": p})
    return pd.DataFrame(rows, columns=TRACKING_COLUMNS)


def write_heldout_tracking(summaries: pd.DataFrame, csv_path: str | os.PathLike,
                           md_path: str | os.PathLike) -> pd.DataFrame:
    frame = heldout_tracking(summaries)
    table = pd.DataFrame({
        **_setting_columns(frame), "side": frame["side"],
        "metric": frame["metric"].map(lambda m: metric_spec(m).label),
        "methods": frame["methods"], "Spearman ρ": frame["rho"].map(lambda v: _number(v, 2)),
        "permutation p": frame["p"].map(
            lambda v: "—" if pd.isna(v) else format_p(v).removeprefix("p ")),
    })
    return _write(frame, "heldout_tracking", [markdown(table)], csv_path, md_path,
                  permutations=PERMUTATIONS)
