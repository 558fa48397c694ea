"""The rule files' functions (workflow/rules/common.smk and any other .smk) name only
globals the workflow defines: moving a function or constant between rule files must not
leave a name behind that only fails when a rarely-taken branch runs (e.g. the revision
pinning after a hub download). Snakemake's own linter does not check this."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_paper_grid import OFFLINE, REPO
from test_workflow import copy_workflow

# Parsed after the real Snakefile (same directory, so workflow.basedir is unchanged): every
# global each .smk function (and the comprehensions and lambdas inside it) reads.
CHECK = '''
include: "Snakefile"


import builtins, dis, json, types


def _global_reads(code):
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_reads(const)


_FUNCTIONS = {
    name: obj for name, obj in globals().items()
    if isinstance(obj, types.FunctionType) and obj.__code__.co_filename.endswith(".smk")
}
print("FUNCTIONS " + json.dumps(sorted(_FUNCTIONS)))
print("UNDEFINED " + json.dumps({
    name: sorted({n for n in _global_reads(f.__code__)
                  if n not in globals() and not hasattr(builtins, n)})
    for name, f in _FUNCTIONS.items()
}))
'''


def _reads(tmp_path: Path, configfile: Path) -> dict[str, list[str]]:
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "check.smk").write_text(CHECK)
    env = dict(os.environ, PYTHONPATH=str(workdir / "workflow"), **OFFLINE)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-rules", "--directory", str(workdir),
         "--snakefile", str(workdir / "check.smk"), "--configfile", str(configfile)],
        capture_output=True, text=True, env=env, cwd=workdir,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines()
                 if line.startswith(("FUNCTIONS ", "UNDEFINED ")))
    functions = json.loads(lines["FUNCTIONS"])
    assert {"transfer_inputs", "pin_revisions", "all_downloads"} <= set(functions)
    return json.loads(lines["UNDEFINED"])


def test_rule_file_functions_read_only_defined_globals(tmp_path):
    # the hub-model grid: every stage's helpers, downloads and pinning included
    undefined = _reads(tmp_path, REPO / "config" / "paper_salt.yaml")
    assert {name: names for name, names in undefined.items() if names} == {}
