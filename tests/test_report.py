"""The report: paper tables from fixture results, paper numbers beside ours, Figure 2.

Fixtures (tests/fixtures/report/): ``config.yaml`` (a paper setting: de with a hub
google/gemma-2b and GPT/BERT PLMs, and a miniature language), ``results/`` (evaluation
JSONs, LAPT metrics files, coverage JSONs, some deliberately absent or incomplete) and
``expected/table{N}.md`` (the tables they must give, checked by eye against the paper's
CSV).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
import yaml

from embtransfer.config.validation import ConfigError
from embtransfer.core import paths
from embtransfer.core.paired import FAMILY_ALPHA
from embtransfer.core.schema import fill_schema_defaults
from embtransfer.report.build import (
    Inputs,
    build_tables,
    compare,
    config_subset,
    output_names,
    write_report,
    zeroshot_paths,
)
from embtransfer.report.check import check_report
from embtransfer.report.comparisons import KEYS, metric_spec, pair_ids
from embtransfer.report.figures import draw_figure2, loss_curves
from embtransfer.report.findings import read_run
from embtransfer.report.paper import PaperNames, primary_target
from embtransfer.report.records import (
    MalformedResultError,
    eval_path_identity,
    read_coverage,
    read_eval_records,
    read_lapt_metrics,
    read_reference,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "report"
REFERENCE = REPO / "resources" / "reference" / "salt_paper_tables.csv"
#: The paper tables the report regenerates (the paper's Table 7 lists PLMs, not results).
TABLE_NUMBERS = (1, 2, 3, 4, 5, 6, 8)


def fixture_config() -> dict:
    return yaml.safe_load((FIXTURES / "config.yaml").read_text())


#: The tasks the fixture evaluation plans per language.
TASKS = {"de": ["arc", "hellaswag", "truthfulqa", "belebele", "mlqa", "mlqa_en", "mlqa_en_de",
                "mlqa_de_en"],
         "ar_mini": ["facts", "facts_en"]}


def fixture_inputs(root: Path = FIXTURES, config: dict | None = None,
                   planned: bool = True) -> Inputs:
    """The input lists the report rule would get, relative to ``root`` (the working dir).

    ``planned``: every run of the grid (every method x target PLM x task, at the lapt stage)
    is listed, whether its file exists or not, as the rule lists what the workflow makes;
    otherwise only the files present.
    """
    config = config or fixture_config()
    results = root / "results"
    runs = [(lang, s, t, m) for lang, plms in config["targets"].items()
            for s in config["sources"] for t in plms for m in config["transfer"]["methods"]]
    evaluation = {str(p.relative_to(root)) for p in results.glob("**/eval/**/*.json")}
    lapt = {str(p.relative_to(root)) for p in results.glob("seed0/lapt/**/*.metrics.jsonl")}
    if planned:
        evaluation |= {f"results/seed0/eval/lapt/{lang}/{s}/{t}/{m}/{task}.json"
                       for lang, s, t, m in runs for task in TASKS[lang]}
        if "source" in config.get("evaluation", {}).get("stages", []):
            evaluation |= {f"results/eval/source/{lang}/{s}/{task}.json"
                           for lang in config["targets"] for s in config["sources"]
                           for task in TASKS[lang]}
        lapt |= {f"results/seed0/lapt/{lang}/{s}/{t}/{m}.metrics.jsonl" for lang, s, t, m in runs}
    return Inputs(
        evaluation=sorted(evaluation),
        lapt=sorted(lapt),
        coverage=sorted(f"results/overlap/{s}/{t}.coverage.json"
                        for _, s, t, _ in runs),
        reference=str(REFERENCE),
        zeroshot=zeroshot_paths(sorted(lapt)),
    )


@pytest.fixture
def in_fixtures(monkeypatch):
    monkeypatch.chdir(FIXTURES)
    return FIXTURES


@pytest.fixture
def fixture_copy(tmp_path, monkeypatch):
    """A writable copy of the fixture results, as the working directory."""
    shutil.copytree(FIXTURES / "results", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cell(table, column: str, **keys) -> str:
    frame = table.wide()
    for key, value in keys.items():
        frame = frame[frame[key] == value]
    assert len(frame) == 1, (keys, frame)
    return frame[column].iloc[0]


# -- exact text ---------------------------------------------------------------------------------


@pytest.mark.parametrize("number", TABLE_NUMBERS)
def test_tables_from_fixtures_equal_the_expected_text(in_fixtures, number):
    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    expected = (FIXTURES / "expected" / f"table{number}.md").read_text()
    assert tables[number].markdown() == expected


def test_written_outputs_are_the_tables_and_a_real_png(in_fixtures, tmp_path):
    outputs = output_names(str(tmp_path / "report"))
    tables, curves = write_report(fixture_config(), fixture_inputs(), outputs, dpi=50)
    combined = Path(outputs["report_md"]).read_text()
    for number in TABLE_NUMBERS:
        text = Path(outputs[f"table{number}_md"]).read_text()
        assert text == (FIXTURES / "expected" / f"table{number}.md").read_text()
        body = text.split("\n", 1)[1]  # the same table under a level-2 heading
        assert f"## Table {number}:" in combined and body.strip() in combined
    assert "![Figure 2](figure2.png)" in combined
    # CSV: long, one line per cell, numbers as numbers, status and paper value beside.
    import pandas as pd

    csv = pd.read_csv(outputs["table1_csv"])
    assert list(csv.columns) == ["table", "stage", "lang", "source", "target", "method",
                                 "eval language", "metric", "value", "stderr", "status",
                                 "paper_value", "comparable", "best", "vs_best_p"]
    line = csv[(csv.source == "gemma") & (csv.method == "salt") & (csv.target == "gpt2_de")
               & (csv.metric == "ARC")].iloc[0]
    assert (line.value, line.stderr, line.status, line.paper_value, bool(line.comparable)) == (
        30.5, 4.62, "ok", 30.8, True)
    lacking = csv[(csv.source == "llama_mini") & (csv.method == "focus") & (csv.lang == "de")]
    assert set(lacking.status) == {"missing"} and lacking.value.isna().all()
    # Figure 2: a PNG of the configured size (2 x 2 panels of 6 x 4 inches and a legend
    # column of 1.6 inches beside them, at 50 dpi).
    png = Path(outputs["figure2"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == ((2 * 6 + 1.6) * 50, 2 * 4 * 50)
    assert len(png) > 5000
    assert set(curves) == {("de", "llama_mini"), ("de", "gemma"), ("ar_mini", "llama_mini"),
                           ("ar_mini", "gemma")}
    # Every output the rule names is written (environment.json is the rule's own).
    assert [name for name, path in outputs.items() if not Path(path).is_file()] == [
        "environment"]
    # Nothing half-written is left beside the outputs.
    assert not [p for p in (tmp_path / "report").iterdir() if p.name.startswith(".")]


# -- every mark reads the comparisons table ----------------------------------------------------


def _pair(n: int, only_a: int, only_b: int, both: int) -> tuple[list[int], list[int]]:
    """Two methods' 0/1 scores over ``n`` items: ``both`` right on the first items, then
    ``only_a`` items only the first is right on and ``only_b`` only the second."""
    a = [1] * both + [1] * only_a + [0] * only_b
    b = [1] * both + [0] * only_a + [1] * only_b
    return a + [0] * (n - len(a)), b + [0] * (n - len(b))


#: Per-question scores added to fixture evaluation files (path under results/seed0/eval/lapt/,
#: metric, salt's and focus's discordant and common items): McNemar p of 0.03, 0.017 and
#: 0.099, apart at family-wise 0.5 and not at 0.001.
PER_QUESTION = (
    ("ar_mini/gemma/gpt2_ar_mini/{}/facts.json", "Facts acc", 200, 14, 4, 96),
    ("de/gemma/gpt2_de/{}/arc.json", "ARC", 1000, 25, 10, 280),
    ("de/gemma/gpt2_de/{}/mlqa.json", "MLQA EM", 500, 20, 10, 80),
)
#: The setting of the zero-shot records and alignment scores added beside the fixtures.
EXTRA = {"lang": "xx_mini", "source": "gemma", "target": "gpt2_xx"}


def marked_inputs(root: Path) -> Inputs:
    """The fixture inputs plus per-question scores for Tables 1 and 2 (salt against focus),
    one zero-shot setting (salt, focus close to it, omp, Random, the source model) and one
    held-out alignment setting (salt, focus 12 tokens behind, Random, the oracle)."""
    import numpy as np
    import pandas as pd

    for pattern, metric, n, only_salt, only_focus, both in PER_QUESTION:
        salt, focus = _pair(n, only_salt, only_focus, both)
        for method, scores in (("salt", salt), ("focus", focus)):
            path = root / "results/seed0/eval/lapt" / pattern.format(method)
            record = json.loads(path.read_text())
            record["per_document"] = {metric: scores}
            path.write_text(json.dumps(record))
    rng = np.random.default_rng(11)
    n_bytes = rng.integers(200, 400, 60)
    base = n_bytes * 2.0 * rng.gamma(20, 1 / 20, 60)
    noise = np.random.default_rng(102).normal(0, 0.01, 60)
    losses = {"salt": base, "focus": base * (1.004 + noise), "omp": base * 1.1,
              "random": base * 1.5, "source_model": base * 0.8}
    zeroshot = []
    for method, bits in losses.items():
        path = root / (paths.ZEROSHOT_SOURCE.fill(**EXTRA) if method == "source_model"
                       else paths.ZEROSHOT.fill(**EXTRA, method=method, seed=0))
        path.parent.mkdir(parents=True, exist_ok=True)
        nats = bits * math.log(2)
        path.write_text(json.dumps({
            "lang": EXTRA["lang"], "source": EXTRA["source"], "method": method,
            "loss": 1.0, "bits_per_byte": float(bits.sum() / n_bytes.sum()),
            "document_nll_nats": nats.tolist(), "document_bytes": n_bytes.tolist(),
            **({} if method == "source_model" else {"target": EXTRA["target"]})}))
        zeroshot.append(str(path.relative_to(root)))
    tokens = 400
    salt, focus = _pair(tokens, 12, 0, 108)
    hits = {"salt": salt, "focus": focus, "random": [0] * tokens, "world_oracle": [1] * tokens}
    cosine = np.random.default_rng(5).random(tokens)
    scores = pd.concat([pd.DataFrame({
        "method": method, "side": "input", "target_id": range(tokens), "split": "held_out",
        "hit_1": 0, "hit_10": hit, "chance_1": 0.001, "chance_10": 0.01,
        "cos_oracle": cosine * (2 if method == "world_oracle" else 1) + 0.1 * np.array(hit),
        "cos_centred": cosine + 0.05 * np.array(hit),
        "contrast": cosine + 0.05 * np.array(hit)}) for method, hit in hits.items()],
        ignore_index=True)
    alignment = paths.ALIGNMENT.fill(stage="transfer", seed=0, **EXTRA)
    (root / alignment).parent.mkdir(parents=True, exist_ok=True)
    scores.to_parquet(root / alignment)
    inputs = fixture_inputs(root)
    inputs.transfer_zeroshot, inputs.alignment = zeroshot, [alignment]
    return inputs


def _markdown_tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Each Markdown table of ``text`` with the heading above it: (heading, rows by column)."""
    found, heading, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i]
        if lines[i].startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append([c.strip() for c in lines[i].strip()[1:-1].split("|")])
                i += 1
            found.append((heading, [dict(zip(block[0], row, strict=True)) for row in block[2:]]))
            continue
        i += 1
    return found


HEADING = re.compile(r"^#+ (?:(?P<stage>\w+): )?(?P<lang>[^,]+), source (?P<source>[^,]+), "
                     r"target (?P<target>.+?)(?:, (?P<side>\w+) rows)?(?:, (?P<split>[\w-]+))?"
                     r" \(n = \d+\)$")


def setting_marks(text: str, decided: pd.DataFrame, summaries: pd.DataFrame
                  ) -> dict[tuple, str]:
    """Every mark of a per-setting table file (zeroshot.md, alignment.md), each checked
    against the comparisons table: ``▲`` where the summary ranks the method first, ``▽``
    where it is worse than the best, ``ʳ`` / ``!`` where better / worse than Random, and a
    ``*`` after each difference that clears. Returns them by (setting, method, column)."""
    labels = {metric_spec(m).label: m for m in set(summaries["metric"])}
    tests = decided.set_index([*KEYS, "method", "versus"])
    marks: dict[tuple, str] = {}
    for heading, rows in _markdown_tables(text):
        match = HEADING.match(heading)
        assert match, heading
        setting = {k: (v or "").replace("-", "_") if k == "split" else v or ""
                   for k, v in match.groupdict().items()} | {"variant": ""}
        for row in rows:
            for column, cell in row.items():
                label, _, versus = column.partition(" vs ")
                if label not in labels or not cell:
                    continue
                key = {**setting, "metric": labels[label], "method": row["method"]}
                line = summaries.loc[(summaries[list(key)] == pd.Series(key)).all(axis=1)]
                assert len(line) == 1, key
                index = (line["family"].iloc[0], *(key[k] for k in KEYS[1:]), row["method"])
                if versus:
                    mark = "*" if cell.endswith(" *") else ""
                    assert mark == ("*" if tests.loc[(*index, versus), "clears"] else ""), key
                else:
                    parts = cell.split()
                    rank = line["rank"].iloc[0]
                    assert parts[3:4] == ([] if pd.isna(rank) else [f"({int(rank)})"]), key
                    mark = parts[4] if len(parts) == 5 else ""
                    relation = {v: tests.loc[(*index, v), "relation"] if (*index, v) in tests.index
                                else "" for v in ("best", "random")}
                    assert mark == ("▲" if rank == 1 else "") + (
                        "▽" if relation["best"] == "worse" else "") + {
                        "better": "ʳ", "worse": "!"}.get(relation["random"], ""), key
                marks[(*index, column)] = mark
    return marks


def paper_marks(text: str, number: int, decided: pd.DataFrame) -> dict[tuple, str]:
    """Every ``(best)`` and ``*`` of a paper table's Markdown, each checked against the
    comparisons table's tests against the best (family ``table{number}``): ``*`` where the
    method's test clears, ``(best)`` on the method it was compared with, nothing elsewhere."""
    expected = {}
    for line in decided[(decided["family"] == f"table{number}")
                        & (decided["versus"] == "best")].itertuples():
        where = (line.stage, line.lang, line.source, line.target, line.variant, line.metric)
        expected[(*where, line.method)] = "*" if line.clears else ""
        expected[(*where, line.other)] = "(best)"
    marks = {}
    heading, rows = _markdown_tables(text)[0]
    for row in rows:
        for column, cell in row.items():
            if column in ("stage", "lang", "source", "target", "method", "eval language",
                          "arch", "languages") or column.endswith("(paper)"):
                continue
            key = (row["stage"], row["lang"], row["source"], row["target"],
                   row.get("eval language", row.get("languages", "")), column, row["method"])
            mark = "(best)" if cell.endswith("(best)") else "*" if cell.endswith(" *") else ""
            assert mark == expected.get(key, ""), (heading, key, cell)
            marks[key] = mark
    assert set(expected) <= set(marks)  # every test's row is in the table
    return marks


def marked_report(root: Path, alpha: float) -> dict[str, Any]:
    """The report of the fixtures and :func:`marked_inputs` at family-wise ``alpha``: the
    comparisons table, its count of clearing tests and every file's marks, each mark checked
    against it."""
    config = fixture_config()
    config["report"]["family_alpha"] = alpha
    out = root / f"report_{alpha}"
    outputs = output_names(str(out))
    write_report(config, marked_inputs(root), outputs, dpi=30)
    decided, summaries = read_run(out)
    read = {name: Path(outputs[name]).read_text() for name in (
        "zeroshot_md", "alignment_md", "table1_md", "table2_md", "findings", "report_md")}
    findings = read["findings"]
    once = decided[~pair_ids(decided).duplicated()]  # a pair held twice is one test
    clear = int(once["clears"].sum())
    assert f"{clear} of the {len(once)} tests clear it" in findings
    # every note that states the level states the config's
    for path in sorted(out.glob("*.md")):
        levels = set(re.findall(r"α = (\d+(?:\.\d+)?(?:e-\d+)?)", path.read_text()))
        assert levels <= {str(alpha)}, (path.name, levels)
    assert f"α = {alpha} " in findings and f"α = {alpha} " in read["table1_md"]
    assert findings.split("\n\n")[1] in read["report_md"]  # the headline, in report.md too
    return {"clear": clear, "decided": decided, "findings": findings,
            **{name: setting_marks(read[name], decided, summaries)
               for name in ("zeroshot_md", "alignment_md")},
            **{f"table{n}_md": paper_marks(read[f"table{n}_md"], n, decided) for n in (1, 2)}}


def test_every_mark_of_every_table_is_the_comparisons_tables(fixture_copy):
    """zeroshot.md, alignment.md and the paper tables mark exactly what comparisons.csv
    decides, and report.family_alpha moves the comparisons, every table's marks and the
    findings' count together."""
    strict = marked_report(fixture_copy, 0.001)
    loose = marked_report(fixture_copy, 0.5)
    assert loose["clear"] > strict["clear"]
    before, after = strict["decided"], loose["decided"]
    assert (before["p"].equals(after["p"]) and (after["clears"] >= before["clears"]).all())
    for name in ("zeroshot_md", "alignment_md", "table1_md", "table2_md"):
        assert strict[name].keys() == loose[name].keys()
        changed = [k for k in strict[name] if strict[name][k] != loose[name][k]]
        assert changed, f"{name}: no mark moved with report.family_alpha"
    # the designed close pairs: not apart at 0.001, apart at 0.5
    for table, lang, target, metric in (("table1_md", "ar_mini", "gpt2_ar_mini", "Facts acc"),
                                        ("table1_md", "de", "gpt2_de", "ARC"),
                                        ("table2_md", "de", "gpt2_de", "MLQA EM")):
        key = ("lapt", lang, "gemma", target, "target", metric)
        assert (strict[table][(*key, "focus")], loose[table][(*key, "focus")]) == ("", "*")
        assert strict[table][(*key, "salt")] == loose[table][(*key, "salt")] == "(best)"
    assert strict["findings"] != loose["findings"]


def test_a_flagged_checkpoint_and_what_is_trained_from_it_carry_the_flag(fixture_copy):
    """The row check flags the transferred SALT checkpoints of xx_mini and de (not
    ar_mini's): every summary of them (zero-shot bits per byte, alignment, the paper tables)
    and of the LAPT checkpoints trained from them carries the flag, takes no rank and is in
    no test; the methods beside them are ranked among themselves."""
    root, config = fixture_copy, fixture_config()
    inputs = marked_inputs(root)
    for path in inputs.transfer_zeroshot:
        record = json.loads((root / path).read_text())
        if record["method"] != "source_model":
            record["row_check"] = {"flagged": record["method"] == "salt",
                                   "flagged_rows": 12 if record["method"] == "salt" else 0}
            (root / path).write_text(json.dumps(record))
        # the LAPT checkpoints, trained from these: the same losses (no row check of their own)
        if record.get("target"):
            del record["row_check"]
            lapt = root / paths.LAPT_ZEROSHOT.fill(seed=0, **{k: record[k] for k in (
                "lang", "source", "target", "method")})
            lapt.parent.mkdir(parents=True, exist_ok=True)
            lapt.write_text(json.dumps(record))
            inputs.lapt_zeroshot.append(str(lapt.relative_to(root)))
    # de's SALT checkpoint (Tables 1 and 2 score its LAPT checkpoint per question): flagged
    de = {"lang": "de", "source": "gemma", "target": "gpt2_de"}
    for method, rows in (("salt", 3), ("focus", 0)):
        path = root / paths.ZEROSHOT.fill(**de, method=method, seed=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(de | {
            "method": method, "loss": 1.0, "bits_per_byte": 1.0, "tokens": 5, "bytes": 7,
            "document_nll_nats": [1.0, 2.0], "document_bytes": [3, 4],
            "row_check": {"flagged": bool(rows), "flagged_rows": rows}}))
        inputs.transfer_zeroshot.append(str(path.relative_to(root)))
    tables, *_ = build_tables(config, inputs)
    compared = compare(config, inputs, tables)
    decided, summaries = compared.decided, compared.summaries
    salt = summaries[summaries["method"] == "salt"]
    flags = {(line.family, line.stage, line.lang): line.flags for line in salt.itertuples()}
    assert flags[("zeroshot", "transfer", "xx_mini")] == "12 rows flagged"
    assert flags[("alignment", "transfer", "xx_mini")] == "12 rows flagged"
    assert flags[("lapt_zeroshot", "lapt", "xx_mini")] == (
        "trained from flagged rows: 12 rows flagged")
    assert flags[("zeroshot", "transfer", "de")] == "3 rows flagged"
    assert flags[("table1", "lapt", "de")] == flags[("table2", "lapt", "de")] == (
        "trained from flagged rows: 3 rows flagged")
    # ar_mini's SALT checkpoint has no flag: ranked and tested as before
    unflagged, flagged = (salt[salt["lang"] == "ar_mini"], salt[salt["lang"] != "ar_mini"])
    assert not unflagged["flags"].astype(bool).any() and unflagged["rank"].notna().all()
    assert flagged["flags"].astype(bool).all() and flagged["rank"].isna().all()
    with_salt = decided[(decided["method"] == "salt") | (decided["other"] == "salt")]
    assert len(with_salt) and set(with_salt["lang"]) == {"ar_mini"}
    # the rest are ranked among themselves: focus, close to SALT, is the best after LAPT
    lapt = summaries[(summaries["family"] == "lapt_zeroshot") & summaries["rank"].notna()]
    assert lapt.set_index("method")["rank"].to_dict() == {"focus": 1, "omp": 2, "random": 3}
    assert not summaries[summaries["method"] != "salt"]["flags"].astype(bool).any()


# -- the paper's numbers beside ours exactly where the setting matches ------------------------


def test_paper_values_stand_beside_exactly_the_matching_settings(in_fixtures):
    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    t1 = tables[1]
    # gemma = google/gemma-2b -> Gemma; de; gpt2_de (dbmdz/german-gpt2) -> GPT; salt -> SALT.
    de = {"lang": "de", "target": "gpt2_de", "stage": "lapt"}
    assert cell(t1, "ARC", source="gemma", method="salt", **de) == "30.50 ± 4.62"
    assert cell(t1, "ARC (paper)", source="gemma", method="salt", **de) == "30.80"
    assert cell(t1, "Avg (paper)", source="gemma", method="focus", **de) == "29.82"
    # A miniature source model is not the paper's, nor is a miniature language.
    assert cell(t1, "ARC (paper)", source="llama_mini", method="salt", lang="de") == (
        "not comparable")
    assert cell(t1, "Avg (paper)", source="gemma", method="salt", lang="ar_mini",
                target="gpt2_ar_mini", **{"eval language": "target"}) == "not comparable"
    # The untouched source model is not a row of the paper's table.
    assert cell(t1, "ARC (paper)", stage="source", source="gemma", lang="de") == (
        "not comparable")
    # No paper column for a metric the paper does not have.
    assert "Facts acc (paper)" not in t1.wide().columns
    # Table 2: the evaluation language is part of the setting.
    t2 = tables[2]
    assert cell(t2, "MLQA EM (paper)", source="gemma", method="salt", lang="de",
                **{"eval language": "target"}) == "28.07"
    assert cell(t2, "MLQA EM (paper)", source="gemma", method="salt", lang="de",
                **{"eval language": "english"}) == "40.02"
    # Table 4/5: the architecture is part of the setting (BERT's numbers for bert_de).
    assert cell(tables[4], "ARC (paper)", source="gemma", target="bert_de") == "30.37"
    assert cell(tables[5], "eval loss @30% steps (paper)", source="gemma",
                target="bert_de") == "2.8100"
    assert cell(tables[6], "coverage % (paper)", source="gemma", target="gpt2_de") == "58.40"
    # The paper's Table 6 is GPT only.
    assert cell(tables[6], "copied (paper)", source="gemma", target="bert_de") == (
        "not comparable")


def test_paper_names_from_config_decide_what_is_comparable(in_fixtures):
    config = fixture_config()
    config["report"]["paper_names"] = {"sources": {"llama_mini": "XGLM", "gemma": None}}
    tables, *_ = build_tables(config, fixture_inputs())
    t1 = tables[1]
    assert cell(t1, "ARC (paper)", source="llama_mini", method="salt", lang="de") == "25.49"
    assert cell(t1, "ARC (paper)", source="gemma", method="salt", stage="lapt",
                target="gpt2_de") == "not comparable"
    # Exact matching is not the paper's overlap: Table 6 shows no paper numbers.
    config["overlap"] = {"match": "exact"}
    tables, *_ = build_tables(config, fixture_inputs())
    assert not any(c.endswith("(paper)") for c in tables[6].wide().columns)
    assert "No row of this table has the paper's setting" in tables[6].markdown()


def test_the_miniature_world_shows_no_paper_numbers(in_fixtures):
    config = fixture_config()
    config["models"]["gemma"] = {"type": "mini", "family": "gemma", "language": "en_mini"}
    tables, *_ = build_tables(config, fixture_inputs())
    for table in tables.values():
        assert not any(c.endswith("(paper)") for c in table.wide().columns)
        assert "not comparable" not in table.markdown()


def test_transfer_stage_rows_are_shown_but_never_compared(in_fixtures):
    config = fixture_config()
    config["report"]["stages"] = ["transfer", "lapt"]
    tables, *_ = build_tables(config, fixture_inputs())
    t1 = tables[1]
    kw = {"source": "gemma", "method": "salt", "target": "gpt2_de", "lang": "de"}
    assert cell(t1, "ARC", stage="transfer", **kw) == "20.00 ± 1.00"
    assert cell(t1, "ARC (paper)", stage="transfer", **kw) == "not comparable"
    assert cell(t1, "ARC (paper)", stage="lapt", **kw) == "30.80"


def test_a_knowledge_score_in_english_is_a_row_of_its_own(in_fixtures):
    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    kw = {"lang": "ar_mini", "source": "gemma", "method": "salt", "target": "gpt2_ar_mini"}
    assert cell(tables[1], "Facts acc", **kw, **{"eval language": "target"}) == "55.00 ± 1.00"
    assert cell(tables[1], "Facts acc", **kw, **{"eval language": "english"}) == "70.00 ± 1.00"


# -- standard errors, the source-model control, bits per byte ---------------------------------


def test_scores_show_their_standard_error(in_fixtures, tmp_path):
    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    t1 = tables[1]
    kw = {"source": "gemma", "method": "salt", "target": "gpt2_de", "stage": "lapt"}
    # lm-eval's stderr (percent) beside the score; the paper's number stays as it was.
    assert cell(t1, "ARC", **kw) == "30.50 ± 4.62"
    assert cell(t1, "HellaSwag", **kw) == "40.25 ± 2.10"
    assert cell(t1, "ARC (paper)", **kw) == "30.80"
    # Avg of independent benchmarks: its standard error is sqrt(sum of squares) / n.
    avg_se = (4.62 ** 2 + 2.1 ** 2 + 1.5 ** 2) ** 0.5 / 3
    assert cell(t1, "Avg", **kw) == f"32.58 ± {avg_se:.2f}"
    # A score lm-eval gives no standard error for is shown bare (and so is an Avg over it).
    t2 = tables[2]
    focus = {"source": "gemma", "method": "focus", "lang": "de", "eval language": "target"}
    assert cell(t2, "MLQA F1", **focus) == "28.00"
    assert cell(t2, "MLQA EM", **focus) == "18.00 ± 1.00"
    assert "±" in t1.markdown() and "standard error" in t1.markdown()
    # The long CSV keeps value and stderr as separate numeric columns.
    frame = t1.long()
    line = frame[(frame.source == "gemma") & (frame.method == "salt")
                 & (frame.target == "gpt2_de") & (frame.metric == "ARC")].iloc[0]
    assert (line.value, line.stderr, line.paper_value) == (30.5, 4.62, 30.8)
    avg = frame[(frame.source == "gemma") & (frame.method == "salt")
                & (frame.target == "gpt2_de") & (frame.metric == "Avg")].iloc[0]
    assert avg.stderr == pytest.approx(avg_se)
    bare = t2.long()
    bare = bare[(bare.source == "gemma") & (bare.method == "focus") & (bare.lang == "de")
                & (bare["eval language"] == "target") & (bare.metric == "MLQA F1")]
    assert len(bare) == 1 and bare.stderr.isna().all() and (bare.value == 28.0).all()


def test_tables_name_the_protocol_that_scored_the_answers(fixture_copy):
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    note = ("Answer scoring (`evaluation.scoring`; docs/evaluation.md): MLQA EM, MLQA F1 by "
            "`mlqa_official`.")
    assert note in tables[2].markdown() and note in tables[3].markdown()
    assert "Answer scoring" not in tables[1].markdown()  # no extractive QA there
    # A run scored by the other protocol is named beside the first, not hidden.
    path = fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/focus/mlqa.json"
    record = json.loads(path.read_text())
    record["scoring"]["protocol"] = "squad_v1.1"
    path.write_text(json.dumps(record))
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    assert ("MLQA EM, MLQA F1 by `mlqa_official`, `squad_v1.1`." in tables[2].markdown())


def test_a_malformed_standard_error_names_the_file(fixture_copy):
    path = fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/arc.json"
    record = json.loads(path.read_text())
    for bad in (float("nan"), -1.0):
        record["stderr"] = dict.fromkeys(record["scores"], bad)
        path.write_text(json.dumps(record))
        with pytest.raises(MalformedResultError, match=f"{path}.*stderr"):
            read_eval_records([path])


SOURCE_LABEL = "source model (no transfer)"


def test_the_source_model_control_rows_come_first_in_each_block(in_fixtures):
    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    for number in (1, 2, 3):
        frame = tables[number].wide()
        for (lang, source), block in frame.groupby(["lang", "source"], sort=False):
            controls = block[block.method == SOURCE_LABEL]
            assert len(controls), (number, lang, source)
            assert list(block.method[: len(controls)]) == [SOURCE_LABEL] * len(controls)
            assert set(controls.stage) == {"source"} and set(controls.target) == {"—"}
    # Table 2: the source model in the target language and in English.
    t2 = tables[2].wide()
    control = t2[(t2.method == SOURCE_LABEL) & (t2.lang == "de") & (t2.source == "gemma")]
    assert set(control["eval language"]) == {"target", "english"}
    # Table 4 compares target PLMs: no control row there.
    assert SOURCE_LABEL not in set(tables[4].wide().method)
    assert cell(tables[1], "ARC", method=SOURCE_LABEL, source="gemma", lang="de") == (
        "35.00 ± 1.00")


def test_a_missing_source_model_control_is_reported_as_missing(fixture_copy):
    (fixture_copy / "results/eval/source/de/gemma/arc.json").unlink()
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    t1 = tables[1]
    for source in ("gemma", "llama_mini"):
        assert cell(t1, "ARC", method=SOURCE_LABEL, source=source, lang="de") == "missing"
    text = t1.markdown()
    assert (f"stage=source lang=de source=gemma target=— method={SOURCE_LABEL} "
            "eval language=target: ARC (no result file: results/eval/source/de/gemma/arc.json)"
            in text)
    assert cell(tables[3], "MLQA F1", method=SOURCE_LABEL, source="llama_mini",
                languages="context=en,question=target") == "missing"
    assert "results/eval/source/de/llama_mini/mlqa_en_de.json" in tables[3].markdown()


def test_a_control_the_config_does_not_evaluate_is_noted(in_fixtures):
    config = fixture_config()
    config["evaluation"]["stages"] = ["lapt"]
    tables, *_ = build_tables(config, fixture_inputs(config=config))
    for number in (1, 2, 3):
        text = tables[number].markdown()
        assert "`evaluation.stages` does not include `source`" in text, number
        assert SOURCE_LABEL not in set(tables[number].wide().method)
    assert "does not include `source`" not in tables[4].markdown()
    # The rule's params carry what the note needs.
    assert config_subset(config)["evaluation"] == {"stages": ["lapt"]}


def test_table5_shows_bits_per_byte_beside_the_loss(in_fixtures):
    import math

    tables, *_ = build_tables(fixture_config(), fixture_inputs())
    t5 = tables[5]
    columns = list(t5.wide().columns)
    for pct in (30, 60, 90):
        loss = columns.index(f"eval loss @{pct}% steps")
        assert columns[loss + 2] == f"bits per byte @{pct}% steps"
        assert f"bits per byte @{pct}% steps (paper)" not in columns
    # The zero-shot record of the same checkpoint gives its tokenizer's tokens per byte on
    # the valid text (3000 tokens, 12000 bytes for gpt2_de; 4200 for bert_de's WordPiece).
    gpt = {"source": "gemma", "target": "gpt2_de"}
    assert cell(t5, "bits per byte @30% steps", **gpt) == (
        f"{3.4 * 3000 / 12000 / math.log(2):.4f}")
    assert cell(t5, "bits per byte @30% steps", source="gemma", target="bert_de") == (
        f"{3.5 * 4200 / 12000 / math.log(2):.4f}")
    # Same conversion as the zero-shot table's: its loss in bits per byte is its bits_per_byte.
    record = json.loads(Path("results/seed0/zeroshot/de/gemma/gpt2_de/salt.json").read_text())
    from embtransfer.report.tables import bits_per_byte

    assert bits_per_byte(record["loss"], record) == pytest.approx(record["bits_per_byte"])
    # No eval loss: no bits per byte, and no second note for it.
    assert cell(t5, "bits per byte @90% steps", source="gemma", target="bert_de") == "missing"
    long = t5.long()
    line = long[(long.source == "gemma") & (long.target == "gpt2_de")
                & (long.metric == "bits per byte @60% steps")].iloc[0]
    assert line.value == pytest.approx(3.0 * 3000 / 12000 / math.log(2))
    assert "bits per byte" in t5.markdown().split("| lang |")[0] + t5.notes[0]


def test_table5_without_the_zero_shot_record_reports_bits_per_byte_missing(fixture_copy):
    (fixture_copy / "results/seed0/zeroshot/de/gemma/bert_de/salt.json").unlink()
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    t5 = tables[5]
    kw = {"source": "gemma", "target": "bert_de"}
    assert cell(t5, "eval loss @30% steps", **kw) == "3.5000"
    assert cell(t5, "bits per byte @30% steps", **kw) == "missing"
    assert ("bits per byte (no zero-shot record for the tokens per byte: "
            "results/seed0/zeroshot/de/gemma/bert_de/salt.json)") in t5.markdown()


def test_default_stages_follow_the_evaluation_and_lapt_config():
    from embtransfer.core.grid import report_stages

    assert report_stages({}) == ["transfer", "lapt"]
    assert report_stages({"evaluation": {"stages": ["source", "lapt"]}}) == ["lapt"]
    assert report_stages({"lapt": {"enabled": False}}) == ["transfer"]
    assert report_stages({"report": {"stages": ["lapt"]}, "lapt": {"enabled": False}}) == [
        "lapt"]


def test_rows_are_the_runs_the_workflow_plans(in_fixtures):
    """Runs the rule does not list (not evaluated / not trained here) are no rows at all."""
    tables, *_ = build_tables(fixture_config(), fixture_inputs(planned=False))
    t1 = tables[1].wide()
    assert not len(t1[(t1.source == "llama_mini") & (t1.method == "focus") & (t1.lang == "de")])
    assert "missing" not in set(t1[t1.lang == "de"]["ARC"])
    t8 = tables[8].wide()
    assert list(t8.source + "/" + t8.target + "/" + t8.method) == [
        "gemma/gpt2_de/salt", "gemma/gpt2_de/focus", "gemma/bert_de/salt",
        "llama_mini/gpt2_ar_mini/salt", "gemma/gpt2_ar_mini/salt"]
    # A listed run without its final line is still reported as missing.
    assert cell(tables[8], "final train loss", source="gemma", target="gpt2_ar_mini") == (
        "missing")
    # No evaluation planned at all: Tables 1-4 have no rows, and say so.
    config = fixture_config()
    inputs = fixture_inputs(planned=False)
    inputs.evaluation = []
    tables, *_ = build_tables(config, inputs)
    assert "(no rows: nothing configured)" in tables[1].markdown()


def test_paper_names_defaults():
    config = fixture_config()
    names = PaperNames.from_config(config)
    assert names.sources == {"llama_mini": None, "gemma": "Gemma"}
    assert names.languages == {"de": "de", "ar_mini": None}
    assert names.architectures["gpt2_de"] == "GPT" and names.architectures["bert_de"] == "BERT"
    assert names.architectures["gpt2_ar_mini"] == "GPT"
    assert names.methods["salt"] == "SALT" and names.methods["multivariate"] == "Multivariate"
    assert primary_target(config, names, "de") == "gpt2_de"
    # Every method name the paper uses is one our defaults produce.
    paper_methods = {key[3] for key in read_reference(REFERENCE)}
    assert paper_methods <= set(names.methods.values())
    # A hub T5 is found by its name; the paper's PLMs all are.
    for repo, arch in [("GermanT5/t5-efficient-gc4-german-base-nl36", "T5"),
                       ("vinai/phobert-base-v2", "BERT"), ("aubmindlab/aragpt2-medium", "GPT"),
                       ("UBC-NLP/AraT5v2-base-1024", "T5"), ("VietAI/vit5-base", "T5")]:
        config["models"]["gpt2_de"] = {"type": "hub", "repo_id": repo, "revision": "x"}
        assert PaperNames.from_config(config).architectures["gpt2_de"] == arch


# -- missing and malformed results --------------------------------------------------------------


def test_a_missing_result_is_reported_as_missing(fixture_copy):
    (fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/hellaswag.json").unlink()
    (fixture_copy / "results/seed0/lapt/de/gemma/gpt2_de/salt.metrics.jsonl").unlink()
    (fixture_copy / "results/overlap/gemma/gpt2_de.coverage.json").unlink()
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    t1 = tables[1]
    kw = {"source": "gemma", "method": "salt", "target": "gpt2_de", "stage": "lapt"}
    assert cell(t1, "HellaSwag", **kw) == "missing"
    assert cell(t1, "Avg", **kw) == "missing"  # never an average of what is there
    assert cell(t1, "ARC", **kw) == "30.50 ± 4.62"
    assert cell(t1, "HellaSwag (paper)", **kw) == "42.58"  # the paper's number still shown
    assert ("HellaSwag (no result file: "
            "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/hellaswag.json)" in t1.markdown())
    assert cell(tables[8], "final train loss", source="gemma", method="salt",
                target="gpt2_de") == "missing"
    assert "no LAPT metrics file (results/seed0/lapt/de/gemma/gpt2_de/salt.metrics.jsonl)" in (
        tables[8].markdown())
    assert cell(tables[6], "copied", source="gemma", target="gpt2_de") == "missing"
    assert "results/overlap/gemma/gpt2_de.coverage.json" in tables[6].markdown()


def test_no_results_at_all_gives_tables_of_missing_cells(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = fixture_config()
    inputs = fixture_inputs(tmp_path)  # every planned file absent
    outputs = output_names(str(tmp_path / "report"))
    tables, curves = write_report(config, inputs, outputs, dpi=30)
    assert cell(tables[1], "missing", source="gemma", lang="de", method="salt") == "missing"
    assert "no knowledge results for de at all" in tables[1].markdown()
    assert all(not panel for panel in curves.values())
    assert Path(outputs["figure2"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_score_a_file_lacks_names_the_file(fixture_copy):
    path = fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/focus/mlqa.json"
    record = json.loads(path.read_text())
    record["scores"] = {"MLQA EM": 18.0}
    record["stderr"] = {"MLQA EM": 1.0}
    path.write_text(json.dumps(record))
    tables, *_ = build_tables(fixture_config(), fixture_inputs(fixture_copy))
    assert cell(tables[2], "MLQA F1", source="gemma", method="focus", lang="de",
                **{"eval language": "target"}) == "missing"
    assert ("MLQA F1 (not in results/seed0/eval/lapt/de/gemma/gpt2_de/focus/mlqa.json)"
            in tables[2].markdown())


@pytest.mark.parametrize("content", [
    "{not json",
    json.dumps({"kind": "knowledge", "scores": {"ARC": "high"}}),
    json.dumps({"kind": "knowledge", "scores": {}}),
    json.dumps({"kind": "quiz", "scores": {"ARC": 1.0}}),
    json.dumps({"kind": "knowledge"}),
    json.dumps({"kind": "knowledge", "stage": "during", "scores": {"ARC": 1.0}}),
])
def test_a_malformed_evaluation_file_is_named(fixture_copy, content):
    path = "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/arc.json"
    (fixture_copy / path).write_text(content)
    with pytest.raises(MalformedResultError, match=path):
        build_tables(fixture_config(), fixture_inputs(fixture_copy))


def test_an_evaluation_file_outside_the_path_pattern_needs_its_identity(tmp_path):
    path = tmp_path / "somewhere" / "arc.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"kind": "knowledge", "scores": {"ARC": 1.0}}))
    with pytest.raises(MalformedResultError, match=str(path)):
        read_eval_records([path])


def test_two_files_with_one_score_for_one_run_are_named(fixture_copy):
    path = fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/arc2.json"
    shutil.copy(fixture_copy / "results/seed0/eval/lapt/de/gemma/gpt2_de/salt/arc.json", path)
    with pytest.raises(MalformedResultError, match="arc2.json"):
        build_tables(fixture_config(), fixture_inputs(fixture_copy))


def test_malformed_lapt_coverage_and_reference_files_are_named(fixture_copy, tmp_path):
    lapt = fixture_copy / "results/seed0/lapt/de/gemma/gpt2_de/salt.metrics.jsonl"
    lines = lapt.read_text().splitlines()
    lapt.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(MalformedResultError, match=rf"{lapt}, line 2"):
        read_lapt_metrics(lapt)
    lapt.write_text(json.dumps({"step": 1, "train_loss": None}) + "\n")
    with pytest.raises(MalformedResultError, match=str(lapt)):
        read_lapt_metrics(lapt)
    cov = fixture_copy / "results/overlap/gemma/gpt2_de.coverage.json"
    cov.write_text(json.dumps({"copied": 3}))
    with pytest.raises(MalformedResultError, match=str(cov)):
        read_coverage(cov)
    ref = tmp_path / "ref.csv"
    ref.write_text("table,source_model,metric,value\n1,Gemma,ARC,2\n")
    with pytest.raises(MalformedResultError, match=str(ref)):
        read_reference(ref)
    ref.write_text(REFERENCE.read_text().replace("24.72", "n/a", 1))
    with pytest.raises(MalformedResultError, match=rf"{ref}, line 2"):
        read_reference(ref)


# -- records -------------------------------------------------------------------------------------


def test_identity_comes_from_the_file_else_from_the_path(in_fixtures):
    records, absent = read_eval_records([
        "results/seed0/eval/lapt/de/gemma/gpt2_de/focus/arc.json",  # no identity keys inside
        "results/eval/source/de/gemma/arc.json",
        "results/seed0/eval/lapt/de/gemma/gpt2_de/focus/nothing.json",
    ])
    assert absent == ["results/seed0/eval/lapt/de/gemma/gpt2_de/focus/nothing.json"]
    focus, source = records
    assert (focus.stage, focus.lang, focus.source, focus.target, focus.method, focus.task) == (
        "lapt", "de", "gemma", "gpt2_de", "focus", "arc")
    assert (source.stage, source.target, source.method) == ("source", None, None)
    assert eval_path_identity("x/results/eval/source/vi/s/t.json")["stage"] == "source"
    with pytest.raises(MalformedResultError, match="elsewhere/t.json is neither"):
        eval_path_identity("elsewhere/t.json")


def test_lapt_metrics_are_parsed_into_curve_evals_and_final(in_fixtures):
    run = read_lapt_metrics("results/seed0/lapt/de/gemma/bert_de/salt.metrics.jsonl")
    assert (run.lang, run.source, run.target, run.method) == ("de", "gemma", "bert_de", "salt")
    assert run.train[0] == (10, 5.2) and len(run.train) == 10
    assert run.evals == {0.3: 3.5, 0.6: 3.1}
    assert run.final["final_train_loss"] == 2.85


# -- Figure 2 -------------------------------------------------------------------------------------


def test_figure2_plots_what_the_metrics_files_say(in_fixtures):
    from embtransfer.core.grid import Grid

    config = fixture_config()
    runs = [read_lapt_metrics(p) for p in fixture_inputs().lapt if Path(p).is_file()]
    grid, names = Grid.from_config(config), PaperNames.from_config(config)
    curves = loss_curves(runs, grid, names, config)
    # Only the language's GPT target PLM; bert_de's run is not in the figure.
    assert curves[("de", "gemma")]["salt"] == (
        list(range(10, 101, 10)), [5.0, 4.0, 3.5, 3.2, 3.0, 2.9, 2.8, 2.75, 2.7, 2.65])
    assert curves[("de", "gemma")]["focus"][1][-1] == 3.0
    assert curves[("de", "llama_mini")] == {}
    assert curves[("ar_mini", "gemma")]["salt"] == ([10, 20, 30], [6.2, 5.1, 4.6])
    fig = draw_figure2(curves, {"de": "gpt2_de", "ar_mini": "gpt2_ar_mini"}, grid.methods)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [
        "de, llama_mini, target gpt2_de", "de, gemma, target gpt2_de",
        "ar_mini, llama_mini, target gpt2_ar_mini", "ar_mini, gemma, target gpt2_ar_mini"]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in axes[1].get_lines()}
    assert lines == curves[("de", "gemma")]
    assert not axes[0].get_lines() and "missing" in axes[0].texts[0].get_text()
    # A method has one colour in every panel.
    assert axes[1].get_lines()[0].get_color() == axes[2].get_lines()[0].get_color()


# -- config ---------------------------------------------------------------------------------------


def report_schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "report.schema.yaml").read_text())


def test_the_schema_fills_every_default_and_refuses_unknown_keys():
    validator = jsonschema.Draft202012Validator(report_schema())
    section: dict = fill_schema_defaults(report_schema(), {})
    validator.validate(section)
    assert section == {
        "reference": "resources/reference/salt_paper_tables.csv",
        "calibration": "resources/calibration/real_shared_tokens.csv", "stages": None,
        "methods": None, "focus_method": "salt", "figure_dpi": 120, "family_alpha": 0.001,
        "paper_names": {"sources": {}, "languages": {}, "architectures": {}, "methods": {}},
    }
    assert section["family_alpha"] == FAMILY_ALPHA  # the spine's default is the schema's
    assert (REPO / section["reference"]).is_file()
    assert (REPO / section["calibration"]).is_file()
    for bad in ({"stage": ["lapt"]}, {"paper_names": {"sources": {"x": "Llama"}}},
                {"stages": ["eval"]}, {"family_alpha": 0}, {"family_alpha": 1.5}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)


def test_every_schema_key_is_described():
    def walk(node, where="report"):
        for key, sub in node.get("properties", {}).items():
            assert sub.get("description"), f"{where}.{key} has no description"
            walk(sub, f"{where}.{key}")

    walk(report_schema())


def test_the_default_config_has_a_valid_report_section():
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    section = copy.deepcopy(config.get("report", {}))
    fill_schema_defaults(report_schema(), section)
    jsonschema.Draft202012Validator(report_schema()).validate(section)
    config["report"] = section
    config.setdefault("transfer", {"methods": ["salt"]})
    check_report(config)


def test_config_checks_name_the_key():
    config = fixture_config()
    config["report"]["methods"] = ["salt", "wechsel"]
    with pytest.raises(ConfigError, match="report.methods"):
        check_report(config)
    config["report"] = {"focus_method": "ofa"}
    with pytest.raises(ConfigError, match="report.focus_method"):
        check_report(config)
    config["report"] = {"paper_names": {"languages": {"fr": "de"}}}
    with pytest.raises(ConfigError, match="report.paper_names.languages"):
        check_report(config)


def test_report_methods_select_and_order_the_rows(in_fixtures):
    config = fixture_config()
    config["report"]["methods"] = ["focus"]
    tables, *_ = build_tables(config, fixture_inputs())
    lapt_rows = tables[8].wide()
    assert list(lapt_rows[lapt_rows.target == "gpt2_de"].method) == ["focus", "focus"]


def test_the_rule_params_hold_only_what_the_report_reads():
    config = fixture_config()
    config["seed"] = 7
    config["models"]["gemma"]["revision"] = "changed"
    subset = config_subset(config)
    assert subset["seed"] == 7  # the alignment and zero-shot paired bootstraps read it
    config["report"]["family_alpha"] = 0.01  # every mark is decided at it: a rerun
    assert config_subset(config)["report"]["family_alpha"] == 0.01
    assert subset["models"]["gemma"] == {"type": "hub", "repo_id": "google/gemma-2b"}
    assert PaperNames.from_config(subset) == PaperNames.from_config(config)


def test_the_findings_read_the_runs_seed_and_omp_k():
    """The live report's headline names the k the run gave OMP, not the catalog's default."""
    from embtransfer.report.build import findings_run

    config = fixture_config()
    config["transfer"].setdefault("options", {})
    assert findings_run(config)["omp_k"] == 64
    config["transfer"]["options"]["omp"] = {"k": 16}
    assert findings_run(config) == {"seed": config.get("seed", 0), "seeds": [0], "omp_k": 16}
    config["seeds"] = [3, 1]
    assert findings_run(config)["seeds"] == [3, 1]
