"""The benchmarks, the analyses and the tools import the package (and each other), never
the tests.

What a script and a test both need lives in the package (``embtransfer.core.workflow_copy``,
``embtransfer.data.npm_tokenizers``): a script that imported a test module would run
under the tests' import path and fixtures, and change whenever a test changes.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Each folder of scripts that run outside pytest.
SCRIPT_DIRS = [REPO / "benchmarks", REPO / "analysis", REPO / "tools"]


def scripts() -> list[Path]:
    return sorted(p for d in SCRIPT_DIRS for p in d.glob("*.py"))


def module_names_under_tests() -> frozenset[str]:
    """Module names importable from under tests/ that no script or package module has."""
    own = {p.stem for p in scripts()}
    own |= {p.stem for p in (REPO / "workflow").rglob("*.py")}
    return frozenset(p.stem for p in (REPO / "tests").rglob("*.py")) - own


def imports_of_tests(source: str, tests: frozenset[str]) -> list[str]:
    """What in ``source`` imports from the tests: an import of a tests module, or a
    ``sys.path`` change that names the tests directory."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = []
        found += [f"line {node.lineno}: import {n}" for n in names
                  if n.split(".")[0] in tests or n.split(".")[0] == "tests"]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) == "sys.path"):
            strings = [c.value for arg in node.args for c in ast.walk(arg)
                       if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if any(s == "tests" or s.startswith(("tests/", "conftest")) for s in strings):
                found.append(f"line {node.lineno}: sys.path names tests/")
    return found


def test_benchmarks_never_import_the_tests():
    tests = module_names_under_tests()
    assert {"test_workflow", "conftest", "fetch"} <= tests
    assert {"bench_real", "real_shared_tokens", "compare_results"} <= {p.stem for p in scripts()}
    found = {str(path.relative_to(REPO)): hits for path in scripts()
             if (hits := imports_of_tests(path.read_text(), tests))}
    assert found == {}


def test_an_import_of_the_tests_is_found():
    tests = module_names_under_tests()
    for source in ("from test_workflow import copy_workflow\n",
                   "import conftest\n",
                   "import sys\nsys.path.insert(0, str(REPO / 'tests' / 'fixtures'))\n",
                   "def f():\n    import fetch\n"):
        assert imports_of_tests(source, tests), source
    assert imports_of_tests("from embtransfer.core.workflow_copy import job_stats\n", tests) == []
