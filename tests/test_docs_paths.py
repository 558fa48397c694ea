"""Every promise of a place the docs make points true.

The README, the pages under docs/, the READMEs of benchmarks/, analysis/ and tools/ and the
package's (and its scripts') docstrings and comments name repository paths, rule files,
modules and their functions, Snakemake rules and config keys. Each one named must exist.
What is not a repository path is recognised by one narrow rule each, never by a list of
allowed names:

* a template or glob (``{lang}``, ``<stage>``, ``*``, ``...``) names no single file: only the
  directory before its first placeholder must exist;
* ``results/`` and ``resources/`` hold what the workflow makes or downloads: a path there is
  checked only where the repository tracks its directory (``resources/reference/``);
* another repository's path (a hub id, a GitHub ``owner/name``, a dataset's folder) starts
  with a name that is no directory of this repository; a bare file name (``clp.py``) is
  another repository's when the same line names that repository (``malteos/clp-transfer``).

And the README's Status paragraph leaves what the default run shows to that section: it
states no score and calls no table "at chance", which the section it points to could
contradict.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from embtransfer.config.validation import load_schema

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow" / "embtransfer"
MARKDOWN = ["README.md", "benchmarks/README.md", "analysis/README.md", "tools/README.md",
            *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
GENERATED = ("results", "resources")
PLACEHOLDER = re.compile(r"[{<*\[]|\.\.\.|…")
# A path: components joined by "/", not inside a URL, a home or an absolute path.
PATH = re.compile(r"(?<![\w.:/@~$-])(\.?[\w-][\w.-]*(?:/[\w.{}<>*,\[\]…-]*)+)")
BARE_FILE = re.compile(r"(?<![\w./-])([\w-][\w.-]*\.(?:py|smk))\b")
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w/])")
SPAN = re.compile(r"``?([^`\n]+?)``?")
FILE_NAME = re.compile(r"\.(jsonl?|md|ya?ml|py|smk|csv|txt|npy|png|parquet|safetensors|bin|tsv)$")
# "rule `x`", "the `x` rule", and the rules column of the design's artifact table
RULE_MENTION = re.compile(
    r"\brule `+(\w+)`+|`+(\w+)`+ rule\b|^\| `results/\w+/` \| \w+ \| ([^|]+) \|", re.M)


# --- what exists ------------------------------------------------------------------------------


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return tuple(p for p in out.splitlines() if (REPO / p).exists())


@cache
def directory_names() -> frozenset[str]:
    """Names of the repository's directories (fixture data aside) and top-level files."""
    names = set()
    for path in tracked():
        if path.startswith("tests/fixtures/"):
            continue
        parts = path.split("/")
        names.update(parts[:-1])
        if len(parts) == 1:
            names.add(parts[0])
    return frozenset(names)


@cache
def known_paths() -> frozenset[str]:
    """Every tracked file and directory, as written from the root or from any directory below
    it (the docs write ``core/paths.py`` for ``workflow/embtransfer/core/paths.py``)."""
    known = set()
    for path in tracked():
        parts = path.split("/")
        for start in range(len(parts)):
            for end in range(start + 1, len(parts) + 1):
                known.add("/".join(parts[start:end]))
    return frozenset(known)


def exists(path: str) -> bool:
    return path.rstrip("/") in known_paths()


@cache
def rule_names() -> frozenset[str]:
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile",
                                             *(REPO / "workflow" / "rules").glob("*.smk")])
    return frozenset(re.findall(r"^\s*(?:use rule \w+ as |rule )(\w+)", text, re.M))


@cache
def package_names() -> dict[str, set[str]]:
    """Top-level names (functions, classes, constants) of the package's modules -> the
    qualifiers that may stand before them: the module's name and its packages'."""
    qualifiers: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names = {p for p in parts if p != "__init__"}
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in defined:
                qualifiers.setdefault(name, set()).update(names)
    return qualifiers


# --- where names are written ------------------------------------------------------------------


def prose_of_code(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                yield node.body[0].lineno, doc
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def documents() -> Iterator[tuple[str, str]]:
    """(where, text): each Markdown line, each docstring and comment of the code."""
    for name in MARKDOWN:
        for number, line in enumerate((REPO / name).read_text().splitlines(), start=1):
            yield f"{name}:{number}", line
    code = [*PACKAGE.rglob("*.py"), *(REPO / "workflow" / "scripts").rglob("*.py")]
    for path in sorted(code):
        for number, text in prose_of_code(path):
            for offset, line in enumerate(text.splitlines()):
                yield f"{path.relative_to(REPO)}:{number + offset}", line


# --- the checks -------------------------------------------------------------------------------


def external(first: str) -> bool:
    """Another repository's path: its first component names no directory of this one."""
    return first not in directory_names()


def path_finding(token: str) -> str | None:
    token = token.rstrip(".,;:)'\"")
    if token.endswith("]") and "[" not in token:  # a Markdown link's text: [docs/x.md](...)
        token = token[:-1]
    first = token.split("/", 1)[0]
    if external(first) or "/" not in token.strip("/"):
        return None
    if first in GENERATED:
        if "/".join(token.split("/")[:2]) not in {"/".join(p.split("/")[:2]) for p in tracked()}:
            return None  # made by the workflow or its downloads
    if PLACEHOLDER.search(token):
        static = PLACEHOLDER.split(token, 1)[0].rsplit("/", 1)[0]
        return None if not static or exists(static) else f"{token} (no {static}/)"
    if exists(token):
        return None
    module, _, name = token.rpartition(".")  # world/corpus.passage_text: a module's function
    if module and exists(module + ".py"):
        qualifier = module.rsplit("/", 1)[-1]
        return None if qualifier in package_names().get(name, ()) else f"{token} (no {name})"
    return token


def test_every_repository_path_named_exists():
    findings = []
    for where, text in documents():
        for token in PATH.findall(text):
            if (problem := path_finding(token)) is not None:
                findings.append(f"{where}: {problem}")
        repos = [t for t in PATH.findall(text) if external(t.split("/", 1)[0])]
        for name in BARE_FILE.findall(text):
            if not repos and not exists(name):
                findings.append(f"{where}: {name} (no such file here; if it is another "
                                "repository's, name that owner/name on the same line)")
    assert not findings, "\n".join(findings)


def module_finding(dotted: str) -> str | None:
    """``embtransfer.a.b.name``: the module exists and defines ``name`` (read from the files,
    not imported)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        where = PACKAGE.parent.joinpath(*parts[:cut])
        if where.with_suffix(".py").is_file() or (where / "__init__.py").is_file():
            break
    else:
        return dotted
    module, rest = ".".join(parts[:cut]), parts[cut:]
    if not rest:
        return None
    defined = {n for n, q in package_names().items() if parts[cut - 1] in q}
    return None if rest[0] in defined else f"{dotted} ({module} has no {rest[0]})"


@cache
def importable(name: str) -> bool:
    """A top-level module outside the package (torch, numpy), found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def qualified_finding(dotted: str) -> str | None:
    """``module.name`` (and ``module.name.attribute``) with ``name`` a package function, class
    or constant: ``module`` is the module (or a package) that defines it."""
    qualifier, name = dotted.split(".")[:2]
    owners = package_names().get(name)
    if not owners or qualifier in owners:
        return None
    if importable(qualifier):
        return None  # another library's (torch.load, numpy.linalg)
    return f"{dotted} ({name} is defined in {sorted(owners)})"


def test_every_module_and_function_named_exists():
    findings = []
    schema = load_schema()
    for where, text in documents():
        for span in SPAN.findall(text):
            if config_key(span, schema):
                continue  # transfer.device is the config key, not a method named device
            for dotted in DOTTED.findall(span):
                check = module_finding if dotted.startswith("embtransfer.") else qualified_finding
                if (problem := check(dotted)) is not None:
                    findings.append(f"{where}: {problem}")
    assert not findings, "\n".join(findings)


def test_every_rule_named_exists():
    findings = []
    for where, text in documents():
        for quoted, before, row in RULE_MENTION.findall(text):
            row = re.sub(r"\([^)]*\)", "", row)  # the design's table: "transfer (its ...)"
            for name in [quoted, before, *re.findall(r"\w+\*?", row)]:
                # "fetch_*": the rules whose names start so
                known = (any(r.startswith(name[:-1]) for r in rule_names())
                         if name.endswith("*") else name in rule_names())
                if name and not known:
                    findings.append(f"{where}: rule {name}")
    assert not findings, "\n".join(findings)


def schema_has(node: dict[str, Any], keys: list[str], defs: dict[str, Any]) -> bool:
    """Whether the dotted key ``keys`` is one the schema ``node`` allows; a wildcard segment
    (``{lang}``, ``<key>``, ``{a,b}``) stands for any key."""
    if not keys:
        return True
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    branches = [node, *(b for k in ("allOf", "anyOf", "oneOf") for b in node.get(k, [])),
                *(b[k] for b in node.get("allOf", []) for k in ("then", "else") if k in b)]
    head, *rest = keys
    wildcard = PLACEHOLDER.search(head) or "," in head
    for branch in branches:
        if branch is not node and schema_has(branch, keys, defs):
            return True
        props = branch.get("properties", {})
        extra = branch.get("additionalProperties")
        if head in props and schema_has(props[head], rest, defs):
            return True
        if wildcard and any(schema_has(child, rest, defs) for child in props.values()):
            return True
        if isinstance(extra, dict) and schema_has(extra, rest, defs):
            return True
        if branch is node and "properties" not in branch and extra is not False and any(
                k not in ("description", "default", "title") for k in branch) is False:
            return True  # a free-form mapping
        if branch.get("type") == "object" and not props and extra in (None, True):
            return True
    return False


def config_key(span: str, schema: dict[str, Any]) -> str | None:
    """The dotted config key ``span`` names (``lapt.max_steps``, ``evaluation.scoring.nfc:
    true``), if it reads as one: a config section, then keys; not a file name, not a module
    of the package (``evaluation.task_catalog``)."""
    key = span.split(":", 1)[0].strip()
    if not re.fullmatch(r"[a-z_]+(\.[\w{}<>,*-]+)+", key) or FILE_NAME.search(key):
        return None
    if key.split(".", 1)[0] not in schema["properties"]:
        return None
    return key if module_finding(f"embtransfer.{key}") is not None else None


def test_every_config_key_named_exists():
    schema = load_schema()
    findings = []
    for where, text in documents():
        for span in SPAN.findall(text):
            key = config_key(span, schema)
            if key and not schema_has(schema, key.split("."), schema["$defs"]):
                findings.append(f"{where}: config key {key}")
    assert not findings, "\n".join(findings)


# --- the README's Status paragraph -----------------------------------------------------------


def test_the_status_paragraph_leaves_the_results_to_their_section():
    readme = (REPO / "README.md").read_text()
    status = re.search(r"^\*\*Status\.\*\*(.*?)(?:\n\n|\Z)", readme, re.M | re.S)
    assert status, "README.md has no **Status.** paragraph"
    text = " ".join(status.group(1).split())
    claims = re.findall(r"[^.]*\b(?:chance|\d+(?:\.\d+)? ?%)[^.]*", text)
    assert not claims, f"the Status paragraph states results of its own: {claims}"
    assert '"What the default run shows"' in text
    assert "## What the default run shows" in readme


@pytest.mark.parametrize(("token", "problem"), [
    ("workflow/rules/evaluate.smk", True),
    ("core/paths.py", False),  # below workflow/embtransfer/
    ("results/eval/{stage}/x.json", False),  # made by the workflow
    ("workflow/rulez/<stage>.smk", True),  # the static part of a template must exist
    ("google/gemma-2b", False),  # a hub id
    ("resources/reference/nothing.csv", True),  # tracked directory: checked
])
def test_the_path_rules_are_narrow(token, problem):
    assert (path_finding(token) is not None) == problem


def test_the_name_rules_find_stale_names():
    assert qualified_finding("transfer_job.load_inputs") is not None
    assert qualified_finding("job.load_inputs") is None
    assert module_finding("embtransfer.transfer.job.load_inputs") is None
    assert module_finding("embtransfer.transfer.transfer_job") is not None
    schema = load_schema()
    assert schema_has(schema, "evaluation.scoring.xquad".split("."), schema["$defs"])
    assert schema_has(schema, "languages.{lang}.corpus".split("."), schema["$defs"])
    assert not schema_has(schema, "evaluation.scoring.squad".split("."), schema["$defs"])


# --- the README's timings ------------------------------------------------------------------


def test_the_readme_quotes_the_timings_benchmarks_measured():
    """The README's set-up, `make test` and `make run` times are the ones benchmarks/README.md
    derives from its fresh-clone rows ("In brief"), not figures written by hand."""
    def quoted(text: str) -> tuple[str, str]:
        text = " ".join(text.split())
        test = re.search(r"`make test` (\d+(?:-\d+)?) min", text)
        run = re.search(r"`make run` about (\d+) min", text)
        assert test and run, text[:200]
        return test.group(1), run.group(1)

    readme = (REPO / "README.md").read_text()
    brief = (REPO / "benchmarks" / "README.md").read_text().split("## In brief", 1)[1]
    brief = brief.split("\n## ", 1)[0].split("The README rounds these to", 1)[1]
    assert quoted(readme.split("## The two commands", 1)[1]) == quoted(brief)
