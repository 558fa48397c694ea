"""Atomic writes: a failure leaves nothing behind and never writes NaN."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from embtransfer.core import atomic
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


# -- temporaries: named after their writer, removed once it is gone -------------------------

DAY_AGO = time.time() - 25 * 3600


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _temporary(directory: Path, target: str, writer: str, *, is_dir: bool = False,
               mtime: float | None = None) -> Path:
    path = directory / f".{target}.tmp-{writer}-abcd_123"
    if is_dir:
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half")
    else:
        path.write_bytes(b"half")
    if mtime is not None:
        for p in (*path.rglob("*"), path):
            os.utime(p, (mtime, mtime))
    return path


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_temporary_names_its_host_pid_and_process_start(tmp_path):
    with atomic_path(tmp_path / "out.json") as tmp:
        host, pid, start, rand = tmp.name.removeprefix(".out.json.tmp-").rsplit("-", 3)
    assert host == re.sub(r"[^\w.-]", "_", socket.gethostname())[:64]
    assert int(pid) == os.getpid() and int(start) == _start_time(os.getpid())
    assert len(rand) == 8
    with atomic_path(tmp_path / "ckpt", directory=True) as tmp:
        assert tmp.name.startswith(f".ckpt.tmp-{atomic.writer_tag()}-") and tmp.is_dir()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_write_removes_the_temporaries_of_its_target_whose_writers_are_gone(tmp_path):
    me = atomic.writer_tag()
    host, pid, start = me.rsplit("-", 2)
    zombie = subprocess.Popen(["true"])  # exits; not reaped until the end
    while _process_state(zombie.pid) != "Z":
        time.sleep(0.01)
    gone = {
        "dead": _temporary(tmp_path, "out.bin", f"{host}-{_dead_pid()}-{start}"),
        "pid reused": _temporary(tmp_path, "out.bin", f"{host}-{pid}-{int(start) + 1}"),
        "zombie": _temporary(tmp_path, "out.bin", f"{host}-{zombie.pid}-{_start_time(zombie.pid)}",
                             is_dir=True),
        "old, other host": _temporary(tmp_path, "out.bin", "node-7.cluster-4242-99",
                                      mtime=DAY_AGO),
        "old, unnamed": tmp_path / ".out.bin.tmp-k2j4_x9a",
    }
    gone["old, unnamed"].write_bytes(b"half")
    os.utime(gone["old, unnamed"], (DAY_AGO, DAY_AGO))
    kept = {
        "live": _temporary(tmp_path, "out.bin", me),
        "young, other host": _temporary(tmp_path, "out.bin", "node-9.cluster-4242-99",
                                        mtime=time.time() - 3600),
        "other host, old dir written lately": _temporary(
            tmp_path, "out.bin", "node-8-4242-99", is_dir=True, mtime=DAY_AGO),
        "another target's": _temporary(tmp_path, "other.bin", f"{host}-{_dead_pid()}-{start}"),
        "a swap's old copy": tmp_path / ".out.bin.old-12345",
        "set aside": tmp_path / "out.bin.stale-20240101T000000Z-12345",
    }
    kept["a swap's old copy"].mkdir()
    kept["set aside"].mkdir()
    (kept["other host, old dir written lately"] / "optimizer.pt").write_bytes(b"new")
    with atomic_path(tmp_path / "out.bin") as tmp:
        tmp.write_bytes(b"whole")
    zombie.wait()
    assert not [k for k, p in gone.items() if p.exists()]
    assert not [k for k, p in kept.items() if not p.exists()]
    assert (tmp_path / "out.bin").read_bytes() == b"whole"


def test_without_proc_a_pid_that_exists_counts_as_the_writer(tmp_path, monkeypatch):
    # Where there is no /proc (macOS), a reused pid keeps the temporary: never a live one lost.
    monkeypatch.setattr(atomic, "_HAVE_PROC", False)
    monkeypatch.setattr(atomic, "_STARTS", {})
    host, pid, start = atomic.writer_tag().rsplit("-", 2)
    assert start == "0"
    dead = _temporary(tmp_path, "out.bin", f"{host}-{_dead_pid()}-0")
    mine = _temporary(tmp_path, "out.bin", f"{host}-{pid}-0")
    reused = _temporary(tmp_path, "out.bin", f"{host}-1-0")  # pid 1 exists
    assert [p for p, _ in atomic.stale_temporaries(tmp_path / "out.bin")] == [dead]
    assert mine.exists() and reused.exists()


def _process_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rindex(b")") + 2:].split()[0].decode()


def test_a_run_reports_stray_temporaries_and_removes_them_on_request(tmp_path):
    from embtransfer.core.hooks import report_stray_temporaries

    me = atomic.writer_tag()
    host, _, start = me.rsplit("-", 2)
    results = tmp_path / "results"
    deep = results / "transfer" / "de" / "src" / "tgt"
    deep.mkdir(parents=True)
    dead = f"{host}-{_dead_pid()}-{start}"
    stale = [_temporary(deep, "model.safetensors", dead),
             _temporary(results / "transfer", "salt", dead, is_dir=True),
             _temporary(deep, "x.parquet", "node-3-77-88", mtime=DAY_AGO)]
    rust = deep / ".tmpAb12Cd"  # safetensors' own, beside its target, written a day ago
    rust.write_bytes(b"x" * 1000)
    os.utime(rust, (DAY_AGO, DAY_AGO))
    stale.append(rust)
    live = _temporary(deep, "table.csv", me)
    young = deep / ".tmpZz99Yy"
    young.write_bytes(b"y")
    young_other_host = _temporary(deep, "y.npy", "node-3-77-88")
    inside = _temporary(stale[1], "state.json", dead)  # within a temporary: not counted apart
    in_aside = []  # folders set aside are kept as they were, for inspection
    for aside in ("out.work.stale-20240101T000000Z-1",
                  "out.work.corrupt-step-00000012-20240101T000000Z-1"):
        (results / "lapt" / aside).mkdir(parents=True)
        in_aside.append(_temporary(results / "lapt" / aside, "checkpoint", dead, is_dir=True))
    found = atomic.find_stray_temporaries(results)
    assert {t.path for t in found} == {*stale, live, young, young_other_host}
    assert {t.path for t in found if t.stale} == set(stale)
    size = 4 + (4 + 4) + 4 + 1000  # the directory counts what is inside
    line = report_stray_temporaries(results, remove=False)
    assert line.startswith(f"4 stray temporaries of killed writers under {results}/ ({size:,} "
                           f"bytes): ")
    assert str(sorted(stale)[0]) in line and "and 1 more" in line
    assert "3 of live or other hosts' writers kept" in line
    assert "--config clean_temporaries=True" in line
    assert all(p.exists() for p in (*stale, live, young, inside, *in_aside))
    line = report_stray_temporaries(results, remove=True)
    assert line.startswith(f"removed 4 stray temporaries of killed writers under {results}/ "
                           f"({size:,} bytes): ")
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in (live, young, young_other_host, *in_aside))
    assert report_stray_temporaries(results, remove=True) is None
    one = _temporary(deep, "model.safetensors", dead)
    line = report_stray_temporaries(results, remove=False)
    assert line.startswith(f"1 stray temporary of killed writers under {results}/ (4 bytes): "
                           f"{one};") and line.endswith("removes it")
