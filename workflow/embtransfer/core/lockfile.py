"""The set-up's lock files: what `make lock` writes into their headers and beside them (the
conda environments), and the parsing tests/test_lock.py checks them with.

A lock is `uv pip compile` output (one pinned, hashed entry per package, with markers)
plus two header lines this module adds: the digest of the inputs it was resolved from
and the digest of its own entries. A lock whose inputs changed since `make lock`, or
whose pins were edited by hand, no longer matches its header.

    python -m embtransfer.core.lockfile stamp LOCK...   # add the digests (make lock)
    python -m embtransfer.core.lockfile conda           # envs/cpu.yaml, envs/cuda.yaml

Standard library only at import: `make lock` runs it before the package is installed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

#: The main environment's lock (pyproject.toml's dependencies and dev extra) and the
#: reference packages' lock (tests/reference-requirements.txt); `make lock` writes both.
MAIN_LOCK = "envs/requirements.lock"
REFERENCE_LOCK = "envs/reference.lock"
#: Each lock's inputs, relative to the repository root (its digest covers them).
LOCK_INPUTS = {
    MAIN_LOCK: ("pyproject.toml", "envs/constraints.txt", "envs/torch.txt"),
    REFERENCE_LOCK: ("tests/reference-requirements.txt",),
}
INPUTS_KEY = "inputs-sha256"
ENTRIES_KEY = "entries-sha256"

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


@dataclass(frozen=True)
class Entry:
    """One pinned package of a lock."""

    name: str  # normalised (PEP 503)
    version: str
    marker: str | None
    hashes: tuple[str, ...]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_lines(text: str) -> list[str]:
    """The lock's entries as logical lines (continuations joined), comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        current = f"{current} {line}".strip() if current else line
        if current.endswith("\\"):
            current = current[:-1].strip()
            continue
        logical.append(current)
        current = ""
    if current:
        logical.append(current)
    return logical


def parse_lock(text: str) -> list[Entry]:
    """Every ``name==version [; marker] --hash=...`` entry of a lock."""
    entries = []
    for line in _requirement_lines(text):
        parts = line.split(" --hash=")
        match = _ENTRY.match(parts[0].strip())
        if match is None:
            raise ValueError(f"not a pinned lock entry: {line!r}")
        name, version, marker = match.groups()
        entries.append(Entry(normalise(name), version, marker, tuple(h.strip() for h in parts[1:])))
    return entries


def entries_digest(text: str) -> str:
    """sha256 of the lock's entries (pins, markers, hashes), comments and layout left out:
    a pin changed by hand changes it."""
    return hashlib.sha256("\n".join(_requirement_lines(text)).encode()).hexdigest()


def _plain_lines(path: Path) -> list[str]:
    return [s for s in (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()) if s]


def inputs_digest(paths: list[Path]) -> str:
    """sha256 of what a lock is resolved from: of a pyproject.toml its Python range, its
    dependencies and its dev extra (not the rest of the file); of a requirements file its
    lines without comments."""
    parts: dict[str, object] = {}
    for path in paths:
        if path.suffix == ".toml":
            project = tomllib.loads(path.read_text())["project"]
            parts[path.name] = {
                "requires-python": project.get("requires-python"),
                "dependencies": project.get("dependencies", []),
                "dev": project.get("optional-dependencies", {}).get("dev", []),
            }
        else:
            parts[path.name] = _plain_lines(path)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def header_value(text: str, key: str) -> str | None:
    match = re.search(rf"^# {re.escape(key)}: ([0-9a-f]{{64}})", text, re.MULTILINE)
    return match.group(1) if match else None


def lock_inputs(lock: str, root: Path) -> list[Path]:
    return [root / p for p in LOCK_INPUTS[lock]]


def stamp(lock: Path, inputs: list[Path], names: tuple[str, ...]) -> None:
    """Write both digests into the header of ``lock`` (after uv's own header lines)."""
    text = lock.read_text()
    body = "\n".join(
        ln for ln in text.splitlines() if not ln.startswith((f"# {INPUTS_KEY}", f"# {ENTRIES_KEY}"))
    )
    head = (
        f"# {INPUTS_KEY}: {inputs_digest(inputs)}  ({', '.join(names)})\n"
        f"# {ENTRIES_KEY}: {entries_digest(body)}  (the entries below; `make lock` rewrites both)\n"
    )
    lines = body.splitlines(keepends=False)
    at = next((i for i, ln in enumerate(lines) if not ln.startswith("#")), len(lines))
    lock.write_text("\n".join(lines[:at]) + ("\n" if at else "") + head
                    + "\n".join(lines[at:]) + "\n")


def lock_digest(lock: Path) -> str | None:
    """The lock's entries digest as its header records it (None: no such lock)."""
    return header_value(lock.read_text(), ENTRIES_KEY) if lock.is_file() else None


#: The conda environments (`snakemake --sdm conda`): Python from conda-forge, torch from
#: the PyTorch wheel index of each build, every other package at the lock's pin for
#: Linux x86-64 and CONDA_PYTHON (`make lock` writes them; tests/test_lock.py compares).
CONDA_PYTHON = "3.11"
CONDA_ENVS = {
    "envs/cpu.yaml": ("embtransfer-cpu", "CPU machines", "https://download.pytorch.org/whl/cpu"),
    "envs/cuda.yaml": ("embtransfer-cuda", "CUDA 12.8 GPU nodes",
                       "https://download.pytorch.org/whl/cu128"),
}


def linux_env(python: str) -> dict[str, str]:
    """Marker variables of CPython ``python`` on Linux x86-64 (the lock's target)."""
    return {
        "python_version": python, "python_full_version": f"{python}.0",
        "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
        "os_name": "posix", "implementation_name": "cpython",
        "platform_python_implementation": "CPython", "extra": "",
    }


def linux_pins(entries: list[Entry], python: str) -> dict[str, str]:
    """name -> version of the entries that apply on Linux x86-64 CPython ``python``."""
    from packaging.markers import Marker  # noqa: PLC0415 (stdlib only at import: stamp)

    env = linux_env(python)
    return {
        e.name: e.version for e in entries if e.marker is None or Marker(e.marker).evaluate(env)
    }


def conda_yaml(path: str, entries: list[Entry]) -> str:
    """The conda environment file ``path`` of :data:`CONDA_ENVS`, pinned as the lock."""
    name, where, index = CONDA_ENVS[path]
    pins = linux_pins(entries, CONDA_PYTHON)
    torch = pins.pop("torch")
    if not index.endswith("/cpu"):
        torch = torch.split("+")[0]  # the CUDA index's build of the same version
    lines = [
        f"# Conda environment for `snakemake --sdm conda` on {where}. Written by `make lock`",
        f"# from {MAIN_LOCK} (Python {CONDA_PYTHON}, Linux x86-64): torch from the PyTorch",
        "# wheels of this build, every other package at the lock's version (without hashes:",
        "# the torch build's own dependencies are not in the lock).",
        f"name: {name}",
        "channels: [conda-forge]",
        "dependencies:",
        f"  - python={CONDA_PYTHON}",
        "  - pip",
        "  - pip:",
        f"      - --extra-index-url {index}",
        f"      - torch=={torch}",
        *(f"      - {n}=={v}" for n, v in sorted(pins.items())),
        "      - -e ../",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["conda"] and len(argv) == 1:
        entries = parse_lock(Path(MAIN_LOCK).read_text())
        for path in CONDA_ENVS:
            Path(path).write_text(conda_yaml(path, entries))
        return 0
    if len(argv) < 2 or argv[0] != "stamp" or not set(argv[1:]) <= set(LOCK_INPUTS):
        print(__doc__, f"locks: {sorted(LOCK_INPUTS)}", file=sys.stderr)
        return 2
    for lock in argv[1:]:
        stamp(Path(lock), lock_inputs(lock, Path()), LOCK_INPUTS[lock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
