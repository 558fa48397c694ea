"""A Snakefile parse that stays light (import cycles: tests/test_import_cycles.py).

Every ``snakemake`` call (``-n`` included) parses the Snakefile and the rule files, which
import parts of the package; heavy libraries are imported inside the functions that need
them there, each marked ``# noqa: PLC0415 (Snakefile start-up)``. This test fails when a
change makes the parse import one of them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Libraries a Snakefile parse must not load (seconds each, or memory on a login node);
# the last three are the ones the `# noqa: PLC0415 (Snakefile start-up)` imports defer.
HEAVY = ("torch", "transformers", "lm_eval", "datasets", "matplotlib", "nltk")
# `from embtransfer... import name` or `import embtransfer...`, parenthesised lists included.
PACKAGE_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+embtransfer[\w.]*[ \t]+import[ \t]+(?:\([^)]*\)|.*)"
    r"|import[ \t]+embtransfer[\w.]*.*)$",
    re.MULTILINE,
)


def snakefile_import_statements() -> list[str]:
    """The package import statements of the Snakefile and the rule files, as written."""
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    return [m.group(0).strip() for f in files for m in PACKAGE_IMPORT.finditer(f.read_text())]


def test_snakefile_parse_imports_no_heavy_library():
    statements = snakefile_import_statements()
    script = "\n".join(["import json, sys", *statements, f"""
print(json.dumps({{
    "package": sorted(m for m in sys.modules if m.startswith("embtransfer")),
    "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
}}))"""])
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=REPO, check=True)
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    # The statements were found and run (a broken pattern would import nothing).
    for module in ("embtransfer.config.validation", "embtransfer.evaluation.task_catalog",
                   "embtransfer.report.build", "embtransfer.data.download"):
        assert module in seen["package"], (module, statements)
    assert seen["heavy"] == [], (
        f"the Snakefile's imports load {seen['heavy']}; import them inside the function "
        "that needs them, marked `# noqa: PLC0415 (Snakefile start-up)`"
    )

