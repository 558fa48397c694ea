"""The rule files' functions (the lambdas of the rules' inputs and params, and the few
functions of workflow/rules/common.smk) name only globals the workflow defines: moving a
function or constant between the rule files and the package must not leave a name behind
that only fails when a rarely-taken branch runs (e.g. the downloads of a hub-model grid).
Snakemake's own linter does not check this.

The stage rule files hold rules only, and the run's hooks and every other directive of which
Snakemake keeps one are the Snakefile's: a second `onsuccess:` in a rule file would replace
the first without a word (it once kept the hub revisions from ever being pinned)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from test_paper_grid import OFFLINE, REPO
from test_workflow import copy_workflow

# Parsed after the real Snakefile (same directory, so workflow.basedir is unchanged): every
# global each .smk function (and the comprehensions and lambdas inside it) reads.
CHECK = """
include: "Snakefile"


import builtins, dis, gc, json, types
from pathlib import Path as _Path


def _global_reads(code):
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_reads(const)


# Every function a rule file defines, its rules' lambdas included (the rules hold them, not
# the globals), by file:line and name.
_FUNCTIONS = {
    f"{_Path(obj.__code__.co_filename).name}:{obj.__code__.co_firstlineno} {obj.__name__}": obj
    for obj in gc.get_objects()
    if isinstance(obj, types.FunctionType) and obj.__code__.co_filename.endswith(".smk")
}
print("FUNCTIONS " + json.dumps(sorted(_FUNCTIONS)))
print("UNDEFINED " + json.dumps({
    name: sorted({n for n in _global_reads(f.__code__)
                  if n not in globals() and not hasattr(builtins, n)})
    for name, f in _FUNCTIONS.items()
}))
"""


def _reads(tmp_path: Path, configfile: Path) -> dict[str, list[str]]:
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "check.smk").write_text(CHECK)
    env = dict(os.environ, PYTHONPATH=str(workdir / "workflow"), **OFFLINE)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--list-rules",
            "--directory",
            str(workdir),
            "--snakefile",
            str(workdir / "check.smk"),
            "--configfile",
            str(configfile),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = dict(
        line.split(" ", 1)
        for line in proc.stdout.splitlines()
        if line.startswith(("FUNCTIONS ", "UNDEFINED "))
    )
    functions = json.loads(lines["FUNCTIONS"])
    # the rules' lambdas were found, in every stage's rule file
    lambdas = {name.split(":")[0] for name in functions if name.endswith(" <lambda>")}
    assert {"data.smk", "transfer.smk", "lapt.smk", "evaluation.smk"} <= lambdas, functions
    assert any(name.endswith(" script_hash") for name in functions), functions
    return json.loads(lines["UNDEFINED"])


def test_rule_file_functions_read_only_defined_globals(tmp_path):
    # the hub-model grid: every stage's helpers, downloads and pinning included
    undefined = _reads(tmp_path, REPO / "config" / "paper_salt.yaml")
    assert {name: names for name, names in undefined.items() if names} == {}


RULE_FILES = sorted((REPO / "workflow" / "rules").glob("*.smk"))
# Directives of which Snakemake keeps one (each call replaces the last); configfile,
# wildcard_constraints and the like add up instead.
ONE_OF_A_KIND = (
    "onstart",
    "onsuccess",
    "onerror",
    "report",
    "workdir",
    "container",
    "containerized",
    "conda",
    "pepfile",
    "pepschema",
)
DIRECTIVE = re.compile(rf"^({'|'.join(ONE_OF_A_KIND)})\s*:", re.MULTILINE)


def test_one_of_a_kind_directives_are_the_snakefiles_alone():
    found = {
        path.name: DIRECTIVE.findall(path.read_text()) for path in [REPO / "Snakefile", *RULE_FILES]
    }
    elsewhere = {name: kinds for name, kinds in found.items() if name != "Snakefile" and kinds}
    assert elsewhere == {}, "register these in the Snakefile (embtransfer/core/hooks.py)"
    assert sorted(found["Snakefile"]) == sorted(set(found["Snakefile"]))
    assert {"onstart", "onsuccess", "onerror", "report"} <= set(found["Snakefile"])


# A stage rule file's statements: rules, and rules inside an if/elif/else of a config choice.
RULE_LINE = re.compile(r"(rule|checkpoint) \w+:|use rule ")
CONDITION = re.compile(r"(if|elif) .*:$|else:$")


def test_stage_rule_files_hold_rules_only():
    for path in RULE_FILES:
        if path.name == "common.smk":
            continue
        in_condition = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.strip()
            if not code or code.startswith("#"):
                continue
            indent = len(line) - len(line.lstrip())
            if indent == 0:
                in_condition = bool(CONDITION.match(code))
                ok = in_condition or RULE_LINE.match(code)
            else:
                ok = indent > 4 or not in_condition or RULE_LINE.match(code)
            assert ok, (
                f"{path.name}:{number}: {code!r} is no rule; functions and checks go "
                "in the package (embtransfer/<stage>/inputs.py), imports and constants "
                "in common.smk, hooks and global directives in the Snakefile"
            )
