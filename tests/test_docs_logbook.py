"""The docs and the code's prose say how the project is, not how it got there.

History lives in git. The README, the pages under docs/, the READMEs of benchmarks/, analysis/
and tools/, the comments of the YAML configs and schemas and of the Snakefile and rule files,
and the docstrings and comments of the package, its scripts, the tests, the benchmarks, the
analyses and the tools are searched for the words of a logbook: issue numbers, done-when
items, the session or task that did something, a change named by what came before it, a
state "at" a commit. A measurement names the commit it ran on as "commit <hash>" (with its
date), never "at <hash>".

This file is not searched: its patterns would find themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_docs_paths import prose_of_code

REPO = Path(__file__).resolve().parents[1]
HEX = "[0-9a-f]"
#: What a logbook writes -> the pattern that finds it.
LOGBOOK = {
    "an issue number": r"\bissues?\s+#?\d+|(?<![\w/&#])#\d{2,}\b",
    "the issue itself": r"\bthe issue'?s?\b",
    "a done-when item": r"\bdone[- ]when\b",
    "the task or session that did it": r"\bthis (?:task|session)\b"
                                       r"|\b(?:that|next|earlier|another|later) session\b",
    "a machine lent or not": r"\b(?:was|were|is) lent\b",
    "a change named by what came before": r"\bbefore (?:this|the|these) changes?\b"
                                          r"|\bthe default now\b"
                                          r"|\b\d[\d.,]* until (?:the|it|LAPT)\b",
    "a state at a commit": rf"\bat (?={HEX}*[a-f])(?={HEX}*\d){HEX}{{7,40}}\b",
    "a hand-over": r"\bhand-over\b",
    "what the code used to do": r"(?<!is )(?<!are )(?<!was )(?<!were )(?<!be )(?<!been )"
                                r"\bused to\b|\bonce did\b",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in LOGBOOK.values()), re.IGNORECASE)
MARKDOWN = ["README.md", "benchmarks/README.md", "analysis/README.md", "tools/README.md", *sorted(
    str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
YAML_COMMENT = re.compile(r"(?:^|\s)(#.*)$")


def _files(*globs: str) -> list[Path]:
    return sorted({p for g in globs for p in REPO.glob(g)} - {Path(__file__).resolve()})


def prose() -> Iterator[tuple[str, str]]:
    """(where, text) of every line the test reads."""
    for name in MARKDOWN:
        for number, line in enumerate((REPO / name).read_text().splitlines(), start=1):
            yield f"{name}:{number}", line
    for path in _files("config/*.yaml", ".test/*.yaml", "workflow/**/*.yaml", "profiles/**/*.yaml",
                       "slurm/*.yaml", "Snakefile", "workflow/rules/*.smk"):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if comment := YAML_COMMENT.search(line):
                yield f"{path.relative_to(REPO)}:{number}", comment.group(1)
    for path in _files("workflow/**/*.py", "tests/**/*.py", "benchmarks/*.py",
                        "analysis/*.py", "tools/*.py"):
        for number, text in prose_of_code(path):
            for offset, line in enumerate(text.splitlines()):
                yield f"{path.relative_to(REPO)}:{number + offset}", line


def test_no_logbook_words():
    found = [f"{where}: {match.group(0)!r}" for where, line in prose()
             if (match := PATTERN.search(line))]
    assert found == []


@pytest.mark.parametrize(("line", "logbook"), [
    ("shows them side by side (issue 35, item 2)", True),
    ("fixed in #42", True),
    ("done-when (c) does not hold", True),
    ("not measured: no GPU was lent to this task", True),
    ("measured while this session did light work beside it", True),
    ("the issue's own measurement", True),
    ("before this change the suite took 15 min", True),
    ("Zipf exponent 1.1 (the default now)", True),
    ("max_steps: 12  # 40 until the oracle came", True),
    ("`config/config.yaml` at 939c327 builds both", True),
    ("the column used to stop at the vocab stage", True),
    ("the dictionary is used to align the spaces", False),
    ("sampled with py-spy (snakemake/snakemake#3744)", False),
    ("`time make run` with commit 6718f1b (2026-11-26)", False),
    ("the checkpoint holds the state before the interrupted step", False),
    ("at 1024 columns, 16.4 s", False),
    ("### Where the default world stands", False),
])
def test_the_patterns_find_a_logbook_and_nothing_else(line, logbook):
    assert bool(PATTERN.search(line)) is logbook
