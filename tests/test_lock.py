"""The lock files agree with what they were resolved from (`make lock`, Makefile).

envs/requirements.lock must pin, for Linux x86-64 on Python 3.11-3.13, one version of each
package pyproject.toml (dependencies, dev extra), envs/constraints.txt and envs/torch.txt
ask for, inside their specifiers; envs/reference.lock must pin exactly
tests/reference-requirements.txt. Both headers hold the digest of their inputs and of their
own entries, so a changed input without `make lock`, or a pin edited by hand, fails here.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from embtransfer.core import lockfile

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.11", "3.12", "3.13")
REMEDY = "run `make lock` and commit the lock"


def applies(marker: str | None, env: dict[str, str]) -> bool:
    return marker is None or Requirement(f"x; {marker}").marker.evaluate(env)  # type: ignore[union-attr]


def pins_in(entries: list[lockfile.Entry], env: dict[str, str]) -> dict[str, list[str]]:
    pins: dict[str, list[str]] = {}
    for entry in entries:
        if applies(entry.marker, env):
            pins.setdefault(entry.name, []).append(entry.version)
    return pins


def requirements_of(lock: str) -> list[Requirement]:
    """What a lock was resolved from, as requirements."""
    reqs = []
    for rel in lockfile.LOCK_INPUTS[lock]:
        path = ROOT / rel
        if path.suffix == ".toml":
            project = tomllib.loads(path.read_text())["project"]
            lines = project["dependencies"] + project["optional-dependencies"]["dev"]
        else:
            stripped = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
            lines = [ln for ln in stripped if ln]
        reqs += [Requirement(line) for line in lines]
    return reqs


def unmet(reqs: list[Requirement], entries: list[lockfile.Entry]) -> list[str]:
    """Each requirement that the lock's pins do not satisfy, on each Python of the lock."""
    problems = []
    for python in PYTHONS:
        env = lockfile.linux_env(python)
        pins = pins_in(entries, env)
        for name, versions in pins.items():
            if len(versions) > 1:
                problems.append(f"py{python}: {name} pinned {len(versions)} times: {versions}")
        for req in reqs:
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            versions = pins.get(lockfile.normalise(req.name), [])
            if not versions:
                problems.append(f"py{python}: {req} has no pin in the lock")
            elif not req.specifier.contains(Version(versions[0]), prereleases=True):
                problems.append(f"py{python}: {req} is not satisfied by the pin {versions[0]}")
    return problems


@pytest.fixture(scope="module", params=[lockfile.MAIN_LOCK, lockfile.REFERENCE_LOCK])
def lock(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param, (ROOT / request.param).read_text()


def test_lock_was_resolved_from_the_current_inputs(lock: tuple[str, str]) -> None:
    name, text = lock
    inputs = lockfile.lock_inputs(name, ROOT)
    assert lockfile.header_value(text, lockfile.INPUTS_KEY) == lockfile.inputs_digest(inputs), (
        f"{name} was resolved from other versions of {', '.join(lockfile.LOCK_INPUTS[name])}: "
        f"{REMEDY}"
    )


def test_lock_entries_are_as_make_lock_wrote_them(lock: tuple[str, str]) -> None:
    name, text = lock
    assert lockfile.header_value(text, lockfile.ENTRIES_KEY) == lockfile.entries_digest(text), (
        f"{name}'s entries were edited after `make lock`: {REMEDY}"
    )


def test_every_entry_is_pinned_with_hashes(lock: tuple[str, str]) -> None:
    name, text = lock
    entries = lockfile.parse_lock(text)
    assert len(entries) > 50
    assert [e.name for e in entries if not e.hashes] == []
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for e in entries for h in e.hashes)


def test_lock_satisfies_every_requirement(lock: tuple[str, str]) -> None:
    name, text = lock
    assert unmet(requirements_of(name), lockfile.parse_lock(text)) == [], REMEDY


def test_reference_lock_pins_exactly_the_reference_requirements() -> None:
    entries = lockfile.parse_lock((ROOT / lockfile.REFERENCE_LOCK).read_text())
    reqs = requirements_of(lockfile.REFERENCE_LOCK)
    for python in PYTHONS:
        env = lockfile.linux_env(python)
        wanted = {
            lockfile.normalise(r.name): [str(s.version) for s in r.specifier]
            for r in reqs if r.marker is None or r.marker.evaluate(env)
        }
        assert pins_in(entries, env) == wanted


def test_makefile_installs_the_locked_torch() -> None:
    """pip installs torch from TORCH_SPEC outside the hash check: its default must be the
    lock's version (the lock's +cpu build is what the CPU wheels call it)."""
    spec = re.search(r"^TORCH_SPEC \?= torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert spec is not None
    entries = lockfile.parse_lock((ROOT / lockfile.MAIN_LOCK).read_text())
    torch = [e for e in entries if e.name == "torch"]
    assert len(torch) == 1 and Version(torch[0].version).public == spec.group(1)


# The checks above can fail: a lock changed by hand, or one that pins outside a specifier.


def test_a_pin_changed_by_hand_is_caught() -> None:
    text = (ROOT / lockfile.MAIN_LOCK).read_text()
    entry = next(e for e in lockfile.parse_lock(text) if e.name == "numpy")
    edited = text.replace(f"numpy=={entry.version}", "numpy==1.26.0", 1)
    assert edited != text
    assert lockfile.entries_digest(edited) != lockfile.header_value(edited, lockfile.ENTRIES_KEY)


def test_a_pin_outside_a_specifier_is_caught() -> None:
    entries = lockfile.parse_lock((ROOT / lockfile.MAIN_LOCK).read_text())
    reqs = requirements_of(lockfile.MAIN_LOCK)
    assert unmet(reqs, entries) == []
    low = [lockfile.Entry(e.name, "1.25.0", e.marker, e.hashes) if e.name == "numpy" else e
           for e in entries]
    assert any("numpy>=1.26 is not satisfied by the pin 1.25.0" in p for p in unmet(reqs, low))
    missing = [e for e in entries if e.name != "pytablewriter"]
    assert any("pytablewriter>=1.2 has no pin" in p for p in unmet(reqs, missing))


def test_a_changed_input_is_caught(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    original = (ROOT / "pyproject.toml").read_text()
    pyproject.write_text(original)
    before = lockfile.inputs_digest([pyproject])
    pyproject.write_text(original.replace('"numpy>=1.26"', '"numpy>=2.5"'))
    assert lockfile.inputs_digest([pyproject]) != before
    # the rest of pyproject.toml (tool settings) is not an input
    pyproject.write_text(original + "\n[tool.example]\nkey = 1\n")
    assert lockfile.inputs_digest([pyproject]) == before


def test_stamp_writes_digests_that_check(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("# header\nsix==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via x\n")
    req = tmp_path / "req.txt"
    req.write_text("six==1.17.0\n")
    lockfile.stamp(lock, [req], ("req.txt",))
    lockfile.stamp(lock, [req], ("req.txt",))  # a second stamp replaces the first
    text = lock.read_text()
    assert text.count(lockfile.ENTRIES_KEY) == 1 and text.startswith("# header\n# inputs")
    assert lockfile.header_value(text, lockfile.ENTRIES_KEY) == lockfile.entries_digest(text)
    assert lockfile.header_value(text, lockfile.INPUTS_KEY) == lockfile.inputs_digest([req])
    six = lockfile.Entry("six", "1.17.0", None, ("sha256:" + "a" * 64,))
    assert lockfile.parse_lock(text) == [six]


def test_report_environment_records_versions_and_the_lock(tmp_path: Path) -> None:
    from importlib import metadata

    from embtransfer.core.atomic import read_json
    from embtransfer.report.environment import write_environment

    text = (ROOT / lockfile.MAIN_LOCK).read_text()
    out = tmp_path / "environment.json"
    write_environment(out, ROOT / lockfile.MAIN_LOCK)
    env = read_json(out)
    assert env["packages"]["torch"] == metadata.version("torch")
    assert env["lock"]["entries_sha256"] == lockfile.header_value(text, lockfile.ENTRIES_KEY)
    # an installed version other than the lock's is named
    installed = metadata.version("pyyaml")
    other = tmp_path / "requirements.lock"
    other.write_text(re.sub(r"(?m)^pyyaml==\S+", "pyyaml==0.0.1", text))
    write_environment(out, other)
    assert read_json(out)["lock"]["installed_off_lock"]["pyyaml"] == {
        "installed": installed, "lock": "0.0.1"}


@pytest.mark.parametrize("path", sorted(lockfile.CONDA_ENVS))
def test_conda_envs_pin_what_the_lock_pins(path: str) -> None:
    """envs/cpu.yaml and envs/cuda.yaml install the lock's versions (Python 3.11, Linux)."""
    import yaml

    entries = lockfile.parse_lock((ROOT / lockfile.MAIN_LOCK).read_text())
    text = (ROOT / path).read_text()
    assert text == lockfile.conda_yaml(path, entries), f"{path} is not the lock's: {REMEDY}"
    env = yaml.safe_load(text)
    assert env["channels"] == ["conda-forge"]  # not the retired `pytorch` channel
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pins = dict(line.split("==") for line in pip if "==" in line)
    linux = lockfile.linux_env("3.11")
    lock = {name: versions[0] for name, versions in pins_in(entries, linux).items()}
    assert Version(pins.pop("torch")).public == Version(lock.pop("torch")).public
    assert pins == lock


def test_the_suite_runs_with_the_bytecode_of_pips_packages() -> None:
    """pip installs torch and its dependencies with --no-compile and `make test` compiles
    them first (SITE_BYTECODE): under PYTHONDONTWRITEBYTECODE nothing else writes their
    bytecode, and every process importing torch outside a job server would compile them
    again."""
    import sympy
    import torch
    import torch.nn.functional

    for module in (torch, torch.nn.functional, sympy, importlib.import_module("networkx")):
        cached = Path(importlib.util.cache_from_source(module.__file__))
        assert cached.exists(), f"{module.__name__} has no bytecode ({cached}): make test"
