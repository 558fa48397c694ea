"""Hash the package source a rule depends on.

Snakemake reruns a job when its rule's own code or params change, but it does
not see edits to modules the rule's script imports. Each rule therefore carries
``code_hash("embtransfer.transfer.job", ...)`` in its params: the hash covers the named
modules and, transitively, every ``embtransfer`` module they import, so editing
a module reruns exactly the jobs whose code reaches it.

Only the source files are read (with :mod:`ast`), nothing is imported: the
Snakefile stays fast to parse and free of heavy dependencies. Parsing the ~130 files
took a second of every ``snakemake -n``, so :func:`keep_parses_in` lets the Snakefile
keep each file's parsed imports across invocations, keyed by the file's content.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path

PACKAGE = "embtransfer"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def module_path(module: str) -> Path:
    """The source file of an ``embtransfer`` module (a package maps to its ``__init__``)."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        raise ValueError(f"{module!r} is not a module of the {PACKAGE} package")
    rel = Path(*module.split(".")[1:])
    candidate = PACKAGE_DIR / rel
    if candidate.is_dir():
        return candidate / "__init__.py"
    path = candidate.with_suffix(".py")
    if not path.exists():
        raise ValueError(f"no source file for module {module!r} (looked for {path})")
    return path


def _resolve_relative(module: str, level: int, name: str | None) -> str:
    is_package = module_path(module).name == "__init__.py"
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


@cache
def package_imports(module: str) -> frozenset[str]:
    """The ``embtransfer`` modules imported anywhere in ``module``'s source."""
    found = set(_imports_in(module_path(module), module))
    found.discard(module)
    return frozenset(found)


def _imports_in(path: Path, module: str | None) -> set[str]:
    """Package modules imported in the file at ``path`` (``module``: its own name, if any)."""
    found: set[str] = set()
    for name in _import_names(path, module):
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            try:
                module_path(name)
            except ValueError:
                continue
            found.add(name)
    return found


class _Parses:
    """The import names of each parsed file, keyed "<module>:<file name>:<sha256 of source>"
    (the file name too: a relative import resolves differently in a package's __init__)."""

    def __init__(self) -> None:
        self.names: dict[str, list[str]] = {}
        self.used: set[str] = set()  # the keys asked for in this process: what is saved
        self.kept_in: Path | None = None  # the file keep_parses_in() named
        self.kept_keys: set[str] = set()  # the keys that file held

    def save(self) -> None:
        """Write this process's parses to the kept file, unless it holds exactly those."""
        if self.kept_in is None or self.used == self.kept_keys:
            return
        path = self.kept_in
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # write then rename: jobs and a second Snakemake may save at the same time
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as out:
                json.dump({k: self.names[k] for k in self.used}, out, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only directory: the next invocation parses again


_PARSES = _Parses()


def keep_parses_in(path: str | os.PathLike) -> None:
    """Load the parses kept in the JSON file ``path`` and save them there at exit.

    A key holds the source's hash, so an edited file is parsed again; which names are
    modules is still decided on each call (a new module file counts at once). An unreadable
    file is ignored: the parses are made again and the file rewritten.
    """
    path = Path(path)
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    if isinstance(kept, dict):
        _PARSES.names.update({k: v for k, v in kept.items() if isinstance(v, list)})
        _PARSES.kept_keys = set(kept)
    if _PARSES.kept_in is None:
        atexit.register(lambda: _PARSES.save())  # the store the module holds at exit
    _PARSES.kept_in = path


def _import_names(path: Path, module: str | None) -> list[str]:
    """Every module name the file's import statements mention (relative ones resolved)."""
    source = _source_bytes(path)  # the same read the hash uses
    key = f"{module}:{path.name}:{hashlib.sha256(source).hexdigest()}"
    _PARSES.used.add(key)
    if key in _PARSES.names:
        return _PARSES.names[key]
    names: list[str] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level and module is None:
                continue  # a relative import outside the package cannot reach it
            base = (
                _resolve_relative(module, node.level, node.module)
                if node.level and module is not None
                else (node.module or "")
            )
            # `from embtransfer.vocab import canonical as vocab` imports a module, not a name.
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    _PARSES.names[key] = names
    return names


def module_closure(*modules: str) -> list[str]:
    """``modules`` plus every package module they import, transitively, sorted."""
    seen: set[str] = set()
    stack = list(modules)
    while stack:
        mod = stack.pop()
        if mod in seen:
            continue
        seen.add(mod)
        stack.extend(package_imports(mod) - seen)
    return sorted(seen)


@cache
def _read_stamped(path: Path, mtime_ns: int, size: int) -> bytes:
    return path.read_bytes()


def _source_bytes(path: Path) -> bytes:
    """A file's bytes, read once per version (the Snakefile hashes the same modules for
    a hundred rules; an edited file has a new stamp and is read again)."""
    stat = path.stat()
    return _read_stamped(path, stat.st_mtime_ns, stat.st_size)


def code_hash(*modules: str) -> str:
    """A short hex digest of the source of ``modules`` and their package imports."""
    digest = hashlib.sha256()
    for mod in module_closure(*modules):
        digest.update(mod.encode())
        digest.update(b"\0")
        digest.update(_source_bytes(module_path(mod)))
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def script_hash(script: str | Path) -> str:
    """Hash of a workflow script and every package module it reaches through its imports.

    A rule passes this in its params, so an edit to the script or to any module
    it uses (directly or transitively) reruns the rule's jobs, and nothing else.
    """
    path = Path(script)
    digest = hashlib.sha256(path.read_bytes())
    modules = sorted(_imports_in(path, None))
    digest.update(code_hash(*modules).encode() if modules else b"")
    return digest.hexdigest()[:16]
