"""The set-up's bytecode of what a dry run imports (embtransfer/core/bytecode.py)."""

from __future__ import annotations

import importlib
import os
import sys
from importlib.util import cache_from_source
from pathlib import Path

from embtransfer.core import bytecode


def test_stale_bytecode_is_written_and_fresh_bytecode_left(tmp_path: Path) -> None:
    source = tmp_path / "warm_me.py"
    source.write_text("VALUE = 1\n")
    broken = tmp_path / "not_311.py"
    broken.write_text("def f(:\n")  # a file another Python's syntax would be: skipped
    cached = Path(cache_from_source(str(source)))
    assert bytecode.compile_stale([source, broken]) == 1
    assert cached.is_file()
    assert not Path(cache_from_source(str(broken))).exists()
    first = cached.stat().st_mtime_ns
    assert bytecode.compile_stale([source]) == 0  # up to date: not written again
    assert cached.stat().st_mtime_ns == first
    later = cached.stat().st_mtime + 10
    os.utime(source, (later, later))  # the source edited after its bytecode
    assert bytecode.compile_stale([source]) == 1


def test_only_imported_modules_under_the_prefixes_are_listed(tmp_path: Path,
                                                             monkeypatch) -> None:
    (tmp_path / "inside_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("inside_mod")
    try:
        listed = bytecode.imported_sources((str(tmp_path),))
        assert listed == [tmp_path / "inside_mod.py"]
        assert all(str(p).startswith(str(tmp_path)) for p in listed)
    finally:
        sys.modules.pop("inside_mod", None)


def test_workers_write_what_one_process_writes(tmp_path: Path) -> None:
    """Over 64 sources the compile runs in a pool: the same files, the same count, and
    the broken one still skipped."""
    sources = []
    for i in range(80):
        source = tmp_path / f"mod_{i}.py"
        source.write_text(f"VALUE = {i}\n")
        sources.append(source)
    broken = tmp_path / "not_311.py"
    broken.write_text("def f(:\n")
    assert bytecode.compile_stale([*sources, broken], workers=2) == 80
    assert all(Path(cache_from_source(str(s))).is_file() for s in sources)
    assert not Path(cache_from_source(str(broken))).exists()
    assert bytecode.compile_stale(sources, workers=2) == 0
