"""Integration: the report rule and `snakemake --report` on fixture results.

The workflow is copied to a temporary directory with the fixture results in its
results/. The LAPT and evaluation stages' rule files are replaced by stubs that list
the fixture files (their real rules would rebuild them from models), and only the report
rule is allowed to run, so this takes seconds, not the whole DAG.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embtransfer.core import allocator

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "report"

pytestmark = pytest.mark.slow

EVALUATE_STUB = '''# test stub: the fixture evaluation files
import embtransfer.report.inputs as report_inputs_module


def all_evaluation(config):  # the source model's, and seed 0's checkpoints'
    return sorted(str(p) for folder in ("results/eval", "results/seed0/eval")
                  for p in Path(folder).rglob("*.json"))


def all_intrinsic(config):
    return []


def all_alignment(config):  # the fixtures hold no alignment scores or probes
    return []


def all_plm_probes(config):
    return []


def all_zeroshot(config):  # the records with per-document losses (workdir below)
    return sorted(str(p) for p in Path("results/seed0/zeroshot/ar_mini/gemma").rglob("*.json"))


# the report rule's inputs (report/inputs.py) read these stubs, not the stages' functions
report_inputs_module.all_evaluation = all_evaluation
report_inputs_module.all_alignment = all_alignment
report_inputs_module.all_plm_probes = all_plm_probes
report_inputs_module.all_zeroshot = all_zeroshot
# no source floor or final LAPT checkpoint records among the fixtures
report_inputs_module.all_source_floors = lambda config: []
report_inputs_module.all_lapt_zeroshot = lambda config: []
# nor fastText BLI records (the table is tested in test_fasttext_bli.py)
report_inputs_module.all_fasttext_bli = lambda config: []
# nor SALT regression records (the conditioning table is tested in test_salt_conditioning.py)
report_inputs_module.all_salt_regression = lambda config: []
'''
LAPT_STUB = '''# test stub: the fixture LAPT metrics files
import embtransfer.report.inputs as report_inputs_module


def all_lapt(config):
    return []


def all_lapt_metrics(config):
    return sorted(str(p) for p in Path("results/seed0/lapt").rglob("*.metrics.jsonl"))


report_inputs_module.all_lapt_metrics = all_lapt_metrics
'''


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    # without the suite's allocator settings (tests/conftest.py): the Snakefile sets them
    env = {k: v for k, v in os.environ.items() if k not in allocator.SETTINGS}
    env["PYTHONPATH"] = str(workdir / "workflow")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--directory", str(workdir), "--snakefile",
         str(workdir / "Snakefile"), "--allowed-rules", "report", *args],
        capture_output=True, text=True, env=env, cwd=workdir,
    )
    assert proc.returncode == 0, f"snakemake {args} failed:\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("report_wf")
    shutil.copy(REPO / "Snakefile", work / "Snakefile")
    for name in ("workflow", "config", "envs"):
        shutil.copytree(REPO / name, work / name)  # its bytecode too (test_workflow.copy_workflow)
    for resource in ("reference", "calibration"):
        shutil.copytree(REPO / "resources" / resource, work / "resources" / resource)
    (work / "workflow" / "rules" / "evaluation.smk").write_text(EVALUATE_STUB)
    (work / "workflow" / "rules" / "lapt.smk").write_text(LAPT_STUB)
    config = yaml.safe_load((FIXTURES / "config.yaml").read_text())
    config["languages"] = {
        "en_mini": {"corpus": {"type": "mini"}},
        "ar_mini": {"corpus": {"type": "mini"}},
        "de": {"corpus": {"type": "local", "train": "de.txt"}},
    }
    config["evaluation"] = {"tasks": []}  # the stub lists the fixtures instead
    config["seed"] = 0  # the fixtures' checkpoints are seed 0's (results/seed0/)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(FIXTURES / "results", work / "results")
    # Every coverage file the rule lists must exist for Snakemake (the fixtures leave one out).
    (work / "results/overlap/llama_mini/bert_de.coverage.json").write_text(
        json.dumps({"copied": 1, "initialized": 1, "coverage_pct": 50.0}))
    # ... and every zero-shot record of a LAPT run (Table 5's bits per byte), with Random's
    # beside it for the zero-shot comparison (per-document losses: 2 and 3 bits per byte).
    folder = work / "results/seed0/zeroshot/ar_mini/gemma/gpt2_ar_mini"
    folder.mkdir(parents=True)
    for method, bpb, noise in (("salt", 2.0, (0.1, -0.1)), ("random", 3.0, (0.2, -0.2))):
        nll = [(bpb + noise[i % 2]) * 700 * math.log(2) for i in range(2)]
        (folder / f"{method}.json").write_text(json.dumps({
            "lang": "ar_mini", "source": "gemma", "target": "gpt2_ar_mini", "method": method,
            "loss": 7.0, "bits_per_byte": sum(nll) / math.log(2) / 1400, "tokens": 400,
            "bytes": 1400, "document_nll_nats": nll, "document_bytes": [700, 700]}))
    snakemake(work, "--cores", "1", "report")
    return work


def test_the_report_rule_writes_the_tables_of_its_inputs(workdir, monkeypatch):
    from embtransfer.config.validation import fill_defaults
    from embtransfer.report.build import Inputs, build_tables, findings_run, zeroshot_paths
    from embtransfer.report.comparisons import pair_ids
    from embtransfer.report.findings import findings_markdown, read_run

    out = workdir / "results" / "report"
    monkeypatch.chdir(workdir)
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    inputs = Inputs(
        evaluation=sorted(str(p) for folder in ("results/eval", "results/seed0/eval")
                          for p in Path(folder).rglob("*.json")),
        lapt=sorted(str(p) for p in Path("results/seed0/lapt").rglob("*.metrics.jsonl")),
        coverage=sorted(f"results/overlap/{s}/{t}.coverage.json" for s in config["sources"]
                        for plms in config["targets"].values() for t in plms),
        reference="resources/reference/salt_paper_tables.csv",
        zeroshot=zeroshot_paths(sorted(str(p) for p in Path("results/seed0/lapt").rglob(
            "*.metrics.jsonl"))),
    )
    tables, *_ = build_tables(config, inputs)
    for number, table in tables.items():
        assert (out / f"table{number}.md").read_text() == table.markdown()
    assert "| lapt | de | gemma | gpt2_de | salt | target | 30.50 ± 4.62 | 30.80 |" in (
        out / "table1.md").read_text()
    assert "| de | llama_mini | bert_de | BERT | 1 |" in (out / "table6.md").read_text()
    assert "| 3.4000 | 3.0900 | 1.2263 |" in (out / "table5.md").read_text()  # bits per byte
    assert "| source | de | gemma | — | source model (no transfer) | target | 35.00 ± 1.00 |" in (
        out / "table1.md").read_text()
    assert (out / "figure2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "report.md").read_text().startswith("# SALT paper tables, regenerated")
    # the zero-shot setting of salt and Random, in the spine's two tables
    decided, summaries = read_run(out)
    zeroshot = summaries[summaries["family"] == "zeroshot"].set_index("method")
    assert zeroshot.loc["salt", "value"] == pytest.approx(2.0)
    assert zeroshot.loc["random", "value"] == pytest.approx(3.0)
    assert zeroshot["se"].notna().all()
    assert zeroshot["rank"].to_dict() == {"salt": 1, "random": 2}
    versus = decided[(decided["family"] == "zeroshot") & (decided["method"] == "random")
                     & (decided["versus"] == "best")].iloc[0]
    assert (versus["other"], versus["diff"]) == ("salt", pytest.approx(1.0))
    assert "| salt | 2.0000 ± " in (out / "zeroshot.md").read_text()
    assert (out / "methods.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    findings = (out / "findings.md").read_text()
    # from the comparisons the rule wrote: one zero-shot setting, two methods, two documents;
    # the run's seed and OMP's k from its config
    run = findings_run(fill_defaults(config))  # the rule's config has the schema's defaults
    assert findings == findings_markdown(decided, summaries, run)
    assert f"(`seed` {run['seed']})" in findings
    assert findings.startswith("# What the run shows\n\n- **Zero-shot bits per byte of the "
                               "whole model, transfer stage** (1 of 1 settings, those that hold "
                               "all 2 competing methods): ")
    once = decided[~pair_ids(decided).duplicated()]  # a pair held twice is one test
    assert f"{int(once['clears'].sum())} of the {len(once)} tests clear it" in findings
    assert (workdir / "results/logs/report/report.log").is_file()
    dry = snakemake(workdir, "-n", "report")
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_snakemake_report_includes_tables_figure_and_captions(workdir):
    snakemake(workdir, "--report", "report.html", "report")
    html = (workdir / "report.html").read_text()
    assert len(html) > 100_000  # the files are embedded
    for name in ("table1.md", "table8.csv", "figure2.png", "report.md", "zeroshot.md",
                 "comparisons.csv", "comparisons.md", "summaries.csv", "methods.png",
                 "alignment.md", "plm_probes.md", "findings.md"):
        assert name in html
    for text in ("Paper tables", "Paper figures", "Table 5: eval loss during LAPT",
                 "Cross-lingual embedding transfer (SALT and baselines)", "Methods compared",
                 "Alignment with the world's truth"):
        assert text in html


def test_the_report_rule_records_its_environment(workdir):
    """results/report/environment.json: the versions this run's report ran with and the
    digest of the lock it was installed from (embtransfer/report/environment.py)."""
    from importlib import metadata

    from embtransfer.core import lockfile

    env = json.loads((workdir / "results" / "report" / "environment.json").read_text())
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["packages"]["torch"] == metadata.version("torch")
    assert env["packages"]["transformers"] == metadata.version("transformers")
    assert env["lock"]["entries_sha256"] == lockfile.lock_digest(REPO / lockfile.MAIN_LOCK)
    # the jobs started with the allocator settings the Snakefile sets (core/allocator.py)
    assert env["allocator"] == allocator.SETTINGS
