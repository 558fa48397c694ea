"""Hash the package source a rule depends on.

Snakemake reruns a job when its rule's own code or params change, but it does
not see edits to modules the rule's script imports. Each rule therefore carries
``code_hash("embtransfer.x", ...)`` in its params: the hash covers the named
modules and, transitively, every ``embtransfer`` module they import, so editing
a module reruns exactly the jobs whose code reaches it.

Only the source files are read (with :mod:`ast`), nothing is imported: the
Snakefile stays fast to parse and free of heavy dependencies.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

PACKAGE = "embtransfer"
PACKAGE_DIR = Path(__file__).resolve().parent


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
    tree = ast.parse(module_path(module).read_text(), filename=str(module_path(module)))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve_relative(module, node.level, node.module)
                if node.level
                else (node.module or "")
            )
            # `from embtransfer import vocab` imports a module, not a name.
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                try:
                    module_path(name)
                except ValueError:
                    continue
                found.add(name)
    found.discard(module)
    return frozenset(found)


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


def code_hash(*modules: str) -> str:
    """A short hex digest of the source of ``modules`` and their package imports."""
    digest = hashlib.sha256()
    for mod in module_closure(*modules):
        digest.update(mod.encode())
        digest.update(b"\0")
        digest.update(module_path(mod).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
