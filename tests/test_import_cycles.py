"""No import cycles in the package: between modules, and between its top-level units
(a top-level module, or a subpackage taken as one), function-level imports included.

The imports are read from the source with :mod:`ast` (embtransfer.core.codehash), so an
import hidden inside a function counts as much as one at the top of a module.
"""

from __future__ import annotations

from embtransfer.core import codehash


def package_modules() -> list[str]:
    modules = []
    for path in sorted(codehash.PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(codehash.PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join([codehash.PACKAGE, *parts]))
    return modules


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more nodes that reach each other (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def import_cycles() -> list[list[str]]:
    modules = {m: set(codehash.package_imports(m)) for m in package_modules()}

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    units: dict[str, set[str]] = {}
    for module, imports in modules.items():
        units.setdefault(unit(module), set()).update(
            unit(i) for i in imports if unit(i) != unit(module)
        )
    return sorted(strongly_connected(modules) + strongly_connected(units))


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    modules = package_modules()
    assert len(modules) > 50, "the module list was not built"
    assert import_cycles() == []
