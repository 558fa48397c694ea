"""Atomic writes: a failure leaves nothing behind and never writes NaN."""

from __future__ import annotations

import numpy as np
import pytest

from embtransfer.core.atomic import NonFiniteError, atomic_path, save_npy, write_json


def test_failed_write_leaves_no_file_and_keeps_old(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_directory_is_replaced_whole(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "a").write_text("1")
    with atomic_path(target, directory=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    with pytest.raises(ValueError), atomic_path(target, directory=True) as tmp:
        (tmp / "c").write_text("3")
        raise ValueError
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_nan_is_refused_with_its_location(tmp_path):
    with pytest.raises(NonFiniteError, match=r"\$\.stats\.k\[1\]"):
        write_json(tmp_path / "x.json", {"stats": {"k": [1.0, float("nan")]}})
    arr = np.zeros((4, 3), np.float32)
    arr[2, 1] = np.inf
    with pytest.raises(NonFiniteError, match=r"rows \[2\]"):
        save_npy(tmp_path / "x.npy", arr)
    assert list(tmp_path.iterdir()) == []


def _killed_between_renames(target, tmp_path) -> None:
    """A real kill -9 of a writer between the two renames of a directory swap."""
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "from embtransfer.core import atomic\n"
        "calls = []\n"
        "real = os.replace\n"
        "def replace(a, b):\n"
        "    calls.append(1)\n"
        "    real(a, b)\n"
        "    if len(calls) == 1:\n"
        "        os.kill(os.getpid(), 9)\n"
        "atomic.os.replace = replace\n"
        f"with atomic.atomic_path({str(target)!r}, directory=True) as tmp:\n"
        "    (tmp / 'new').write_text('2')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_interrupted_directory_swap_is_recovered(tmp_path):
    from embtransfer.core.atomic import recover_directory

    target = tmp_path / "ckpt"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "old").write_text("1")
    _killed_between_renames(target, tmp_path)
    assert not target.exists() and list(tmp_path.glob(".ckpt.old-*"))
    note = recover_directory(target)
    assert note is not None and "recovered" in note
    assert (target / "old").read_text() == "1"  # the complete previous copy, not lost
    assert not list(tmp_path.glob(".ckpt.old-*"))
    assert recover_directory(target) is None


def test_next_directory_write_recovers_first(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "old").write_text("1")
    _killed_between_renames(target, tmp_path)
    with atomic_path(target, directory=True) as tmp:
        (tmp / "newer").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["newer"]
    assert not list(tmp_path.glob(".ckpt.old-*"))
