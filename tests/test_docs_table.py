"""docs/design.md's table from an artifact to its code, against the workflow itself.

Each row says where an artifact lies (``results/<dir>/``), its stage (the rule file that
makes it), its rules and the package(s) of ``workflow/embtransfer`` that hold its code. The
rules come from Snakemake's own parse of the default config (every rule, its outputs, its
script, its rule file); a rule's code is what its script imports from the package.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from test_paper_grid import OFFLINE, REPO
from test_workflow import copy_workflow

DESIGN = REPO / "docs" / "design.md"
# Parsed after the real Snakefile: every rule's name, outputs, script and rule file.
LISTING = '''
include: "Snakefile"

import json as _json

for _rule in workflow.rules:
    print("RULE " + _json.dumps([_rule.name, [str(o) for o in _rule.output], _rule.script,
                                 str(_rule.snakefile)]))
'''
ROW = re.compile(r"^\| (`(?:results|resources)/[^|]+) \| (\w+) \| ([^|]+) \| ([^|]+) \|$", re.M)


@dataclass(frozen=True)
class Rule:
    name: str
    stage: str  # the stem of its rule file
    dirs: frozenset[str]  # the artifact folders of its outputs (results/x/, resources/x/)
    packages: frozenset[str]  # what its script imports from embtransfer, core aside


@dataclass(frozen=True)
class TableRow:
    dirs: tuple[str, ...]
    open_ended: bool  # "...": the row's rules may write other resources/ folders too
    stage: str
    rules: tuple[str, ...]  # names, or prefixes ending in "*"
    packages: tuple[str, ...]


def _script_packages(script: Path) -> frozenset[str]:
    found = set()
    for node in ast.walk(ast.parse(script.read_text())):
        modules = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                   else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found |= {m.split(".")[1] for m in modules if m.startswith("embtransfer.")}
    return frozenset(found - {"core"})


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> dict[str, Rule]:
    workdir = copy_workflow(tmp_path_factory.mktemp("wf"))
    (workdir / "listing.smk").write_text(LISTING)
    env = dict(os.environ, PYTHONPATH=str(workdir / "workflow"), **OFFLINE)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-rules", "--directory", str(workdir),
         "--snakefile", str(workdir / "listing.smk"), "--configfile",
         str(workdir / "config" / "config.yaml")],
        capture_output=True, text=True, env=env, cwd=workdir,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    found = {}
    for line in proc.stdout.splitlines():
        if not line.startswith("RULE "):
            continue
        name, outputs, script, snakefile = json.loads(line[5:])
        if not script or not outputs:
            continue  # a target rule (all, evaluation, download_all, ...)
        # a seeded artifact's folder is the one below results/seed<N>/
        dirs = frozenset("/".join(re.sub(r"^results/seed\{seed[^}]*\}/", "results/", o)
                                  .split("/")[:2]) + "/" for o in outputs)
        script_path = REPO / "workflow" / "scripts" / script.removeprefix("../scripts/")
        found[name] = Rule(name, Path(snakefile).stem, dirs, _script_packages(script_path))
    return found


def design_rows(text: str) -> list[TableRow]:
    rows = []
    for artifacts, stage, rule_names, packages in ROW.findall(text):
        names = re.findall(r"`([^`]+)`", artifacts)
        # "`resources/fasttext/`, `wikipedia/`": a bare folder lies beside the first
        root = names[0].split("/")[0]
        dirs = tuple(n if n.startswith(root + "/") else f"{root}/{n}" for n in names)
        rows.append(TableRow(dirs, "..." in artifacts, stage,
                             tuple(re.findall(r"\w+\*?", re.sub(r"\([^)]*\)", "", rule_names))),
                             tuple(re.findall(r"\w+", re.sub(r"\([^)]*\)", "", packages)))))
    return rows


def _names(row: TableRow, rule: str) -> bool:
    return any(fnmatch.fnmatchcase(rule, pattern) for pattern in row.rules)


def table_findings(rows: list[TableRow], rules: dict[str, Rule]) -> list[str]:
    """What the table says that the workflow does not do, and what it leaves out."""
    findings = []
    for rule in rules.values():
        for folder in sorted(rule.dirs):
            # "...": a row that also covers the folders its rules write that no row names
            mine = ([r for r in rows if folder in r.dirs]
                    or [r for r in rows if r.open_ended and _names(r, rule.name)])
            if not mine:
                findings.append(f"{folder} (rule {rule.name}) has no row")
            for row in mine:
                if not _names(row, rule.name):
                    findings.append(f"{folder}: rule {rule.name} is not in its row")
                if row.stage != rule.stage:
                    findings.append(f"{folder}: rule {rule.name} is in {rule.stage}.smk, "
                                    f"not {row.stage}")
                if not set(row.packages) & rule.packages:
                    findings.append(f"{folder}: rule {rule.name}'s script imports "
                                    f"{sorted(rule.packages)}, none of {list(row.packages)}")
    for row in rows:
        makers = [r for r in rules.values() if _names(row, r.name) and
                  (row.open_ended or r.dirs & set(row.dirs))]
        for pattern in row.rules:
            if not any(fnmatch.fnmatchcase(r.name, pattern) for r in makers):
                findings.append(f"{row.dirs[0]}: rule {pattern} makes none of {list(row.dirs)}")
        imported = set().union(*(r.packages for r in makers)) if makers else set()
        for package in row.packages:
            if package not in imported:
                findings.append(f"{row.dirs[0]}: no script of its rules imports {package}")
    return findings


def test_the_artifact_table_says_what_the_rules_do(rules):
    rows = design_rows(DESIGN.read_text())
    assert len(rows) > 15 and rules
    assert table_findings(rows, rules) == []


def test_a_row_that_lies_is_found(rules):
    rows = design_rows(DESIGN.read_text())
    at = next(i for i, r in enumerate(rows) if r.dirs == ("results/fasttext_bli/",))
    for lie in (replace(rows[at], packages=("report",)), replace(rows[at], stage="report"),
                replace(rows[at], rules=("zeroshot_source",))):
        assert table_findings([*rows[:at], lie, *rows[at + 1:]], rules), lie
    assert table_findings(rows[:at] + rows[at + 1:], rules)  # a folder without a row
