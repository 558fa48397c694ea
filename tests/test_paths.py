"""embtransfer.core.paths: every artifact path template, filled by the rules and the report and
parsed back by the report; the rule files write no artifact path of their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from embtransfer.core import paths
from embtransfer.report.records import (
    MalformedResultError,
    coverage_identity,
    eval_path_identity,
    lapt_path_identity,
    zeroshot_identity,
)

REPO = Path(__file__).resolve().parents[1]


def sample_values(template: paths.Template) -> dict[str, str]:
    # Values with dots, dashes and underscores, as model keys and task names have (letters
    # where the template constrains a wildcard).
    return {name: "abc" if name in template.constraints else f"{name}_v-1.x"
            for name in template.wildcards}


def test_there_is_a_template_for_every_stage():
    assert len(paths.TEMPLATES) >= 35
    assert all(t.startswith(("results/", "resources/")) for t in paths.TEMPLATES.values())


@pytest.mark.parametrize("name", sorted(paths.TEMPLATES))
def test_fill_then_parse_round_trips(name):
    template = paths.TEMPLATES[name]
    values = sample_values(template)
    path = template.fill(**values)
    assert "{" not in path
    assert template.parse(path) == values
    assert template.parse(Path(path)) == values
    if template.startswith(f"{paths.RESULTS}/"):
        # under another results folder (the report's tests), relative or absolute
        for root in ("tmp/run/results", "/abs/results", ""):
            moved = template.at(root).fill(**values)
            assert template.parse(moved) == values
            assert template.root_of(moved) == root


@pytest.mark.parametrize("name", sorted(paths.TEMPLATES))
def test_a_partial_fill_keeps_the_other_wildcards(name):
    template = paths.TEMPLATES[name]
    if not template.wildcards:
        assert template.fill(lang="x") == template
        return
    first, *rest = template.wildcards
    partial = template.fill(**{first: "VALUE"})
    assert re.findall(r"\{(\w+)\}", partial) == rest
    assert template.fill(**{first: "{other}"}) == template.replace("{" + first + "}",
                                                                   "{other}", 1)


def test_a_path_of_another_template_does_not_parse():
    lapt = paths.LAPT_METRICS.fill(lang="de", source="s", target="t", method="salt", seed=0)
    assert paths.ZEROSHOT.parse(lapt) is None
    assert paths.LAPT_METRICS.parse(lapt.removesuffix(".metrics.jsonl")) is None
    assert paths.NEIGHBORS.parse("results/seed0/neighbors/de/s/t/x/word.parquet") is None  # one
    # path component per wildcard
    assert paths.EVAL.parse("results/eval/source/de/s/arc.json") is None
    with pytest.raises(MalformedResultError, match="is not results/seed{seed}/lapt/"):
        lapt_path_identity("results/other/de/s/t/salt.metrics.jsonl")
    with pytest.raises(MalformedResultError):
        zeroshot_identity("results/zeroshot/de/s/source_model.json")


def test_the_report_parsers_read_what_the_templates_write():
    run = {"lang": "de", "source": "gemma", "target": "gpt2_de", "method": "salt"}
    for stage in ("transfer", "lapt"):
        path = paths.EVAL.at("x/results").fill(stage=stage, task="arc", seed=3, **run)
        assert eval_path_identity(path) == {"seed": "3", "stage": stage, **run, "task": "arc"}
        assert paths.seed_of(path) == 3
    source = paths.EVAL_SOURCE.fill(lang="de", source="gemma", task="arc")
    assert eval_path_identity(source) == {"stage": "source", "lang": "de", "source": "gemma",
                                          "target": None, "method": None, "task": "arc"}
    assert lapt_path_identity(paths.LAPT_METRICS.fill(**run, seed=0)) == {"seed": "0", **run}
    assert zeroshot_identity(paths.ZEROSHOT.fill(**run, seed=0)) == tuple(run.values())
    assert paths.seed_of(source) is None  # the source model's records are drawn once
    assert coverage_identity(paths.COVERAGE.fill(source="gemma", target="gpt2_de")) == (
        "gemma", "gpt2_de")


def test_rule_files_write_no_artifact_path_of_their_own():
    # Every results/ or resources/ path of a rule comes from embtransfer.core.paths (comments
    # and the local-model/config paths the user gives aside).
    offenders = []
    for smk in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        for number, line in enumerate(smk.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            if re.search(r"""["'](results|resources)/|\{RESULTS\}|\{LOGS\}""", code):
                offenders.append(f"{smk.name}:{number}: {line.strip()}")
    assert offenders == []


def test_source_first_marks_the_source_chain_only():
    from embtransfer.core.grid import source_first

    config = {"sources": ["src"],
              "models": {"src": {"language": "en", "mix": {"de": 0.1}},
                         "plm": {"language": "ar"}}}
    assert source_first(config, model="src") == 1
    assert source_first(config, lang="en") == source_first(config, lang="de") == 1
    assert source_first(config, model="plm") == source_first(config, lang="ar") == 0
    assert source_first(config) == 0
