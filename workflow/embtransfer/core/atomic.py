"""Atomic artifact writes: a half-written file is never taken for a finished one.

Every writer goes through :func:`atomic_path`: the content is written to a temporary
sibling and renamed into place only when the writer returned without error. A failure
removes the temporary and leaves any previous artifact alone. A full disk (ENOSPC, or
EDQUOT for a quota) is raised as :class:`DiskFullError`, which names the target, the bytes
written, the free space left and what to free.

A temporary is named ``.{name}.tmp-{host}-{pid}-{start}-{random}``: the writer's host,
process id and process start time (field 22 of ``/proc/<pid>/stat``, clock ticks since
boot), so that a new process that got a killed writer's pid is not taken for it. Without
``/proc`` the start is 0 and a pid that exists counts as the writer. A killed writer's
temporary stays behind until the next write of the same target removes it
(:func:`stale_temporaries`), when

* it is this host's and its writer is gone: no process has that pid, or the one that has
  it started at another time, or it is a zombie;
* or it is another host's (or its name names no writer) and nothing in it was modified for
  :data:`FOREIGN_MAX_AGE_S` (24 hours): on a cluster's shared file system another host's
  writer may be alive, and it cannot be asked.

A temporary of a live writer on this host is never removed, nor a younger one of another
host; neither are folders set aside on purpose (LAPT's ``<work>.stale-*``,
``<work>.corrupt-step-*``) or a directory swap's old copy (``.<name>.old-*``,
:func:`recover_directory`'s). The same rules find stray temporaries in a whole tree
(:func:`find_stray_temporaries`, which also counts the ``.tmpXXXXXX`` files safetensors
writes beside its target, their writer unnamed), which the start of a run reports for
``results/`` (:mod:`embtransfer.core.hooks`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: Another host's temporary (or one whose name names no writer) untouched this long is
#: taken for a dead writer's: that host cannot be asked, and no write here takes a day.
FOREIGN_MAX_AGE_S = 24 * 3600
#: A write that fails with an I/O error while less than this is free failed for space
#: (torch.save and numpy report a full disk without its errno).
NEARLY_FULL_BYTES = 1 << 20
#: What a writer's part of a temporary's name looks like (after ``.{name}.tmp-``);
#: tempfile's random part is 8 characters. Names without the writer's part are older.
_WRITER = r"(?:(?P<host>[\w.-]+)-(?P<pid>\d+)-(?P<start>\d+)-)?[a-z0-9_]{8}"
_TEMPORARY = re.compile(rf"\.(?P<target>.+)\.tmp-{_WRITER}")
_WRITER_ONLY = re.compile(_WRITER)
#: A folder set aside on purpose and kept for inspection (LAPT's ``<work>.stale-<time>-<pid>``,
#: ``<work>.corrupt-step-<n>-<time>-<pid>``): the scan of a tree does not enter it.
_SET_ASIDE = re.compile(r"\.[\w-]+-\d{8}T\d{6}Z-\d+$")
#: safetensors (Rust's tempfile crate) writes ``.tmp`` and 6 letters or digits, renamed.
_SAFETENSORS_TEMPORARY = re.compile(r"\.tmp[A-Za-z0-9]{6}")
_HAVE_PROC = os.path.exists("/proc/self/stat")


@contextmanager
def atomic_path(path: str | os.PathLike, directory: bool = False,
                expected_bytes: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` on success.

    With ``directory=True`` the temporary is an (empty) directory and a finished
    directory replaces any previous one as a whole. A writer that knows the size of what
    it writes passes ``expected_bytes`` for the message of a :class:`DiskFullError`.
    Stale temporaries of ``path`` (module docstring) are removed first.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale, why in stale_temporaries(final):
        remove_path(stale)
        print(f"removed {stale}: {why}", file=sys.stderr)
    prefix = f".{final.name}.tmp-{writer_tag()}-"
    try:
        if directory:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
        else:
            fd, name = tempfile.mkstemp(prefix=prefix, dir=final.parent)
            os.close(fd)
            tmp = Path(name)
    except OSError as exc:
        if (code := _full_errno(exc, final.parent)) is None:
            raise
        raise DiskFullError.describe(final, code, 0, expected_bytes, exc) from exc
    if directory:
        recover_directory(final)
    try:
        yield tmp
    except BaseException as exc:
        code = _full_errno(exc, final.parent) if isinstance(exc, Exception) else None
        written = size_of(tmp) if code is not None and os.path.lexists(tmp) else None
        remove_path(tmp)
        if code is None:
            raise
        # A writer's file object, still referenced from the finished frames of the
        # tracebacks (torch.save's, in the error it raised while closing), keeps the
        # removed partial's space until collected: drop those frames' locals (the
        # tracebacks' lines stay).
        for link in _chain(exc):
            traceback.clear_frames(link.__traceback__)
        raise DiskFullError.describe(final, code, written, expected_bytes, exc) from exc
    if directory:
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            remove_path(old)
        else:
            os.replace(tmp, final)
    else:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)


# ---------------------------------------------------------------- a full disk


class DiskFullError(OSError):
    """A write failed for want of space; the previous artifact is kept, the partial removed.

    Attributes: ``path`` (the target), ``written`` (bytes in the temporary when the write
    failed; None where the writer had removed it), ``expected`` (the whole write's size
    where the writer knew it), ``free`` (bytes free on the target's file system once the
    partial file is removed).
    """

    def __init__(self, code: int, message: str, path: Path, written: int | None,
                 expected: int | None, free: int) -> None:
        super().__init__(code, message)
        self.filename = str(path)
        self.path, self.written, self.expected, self.free = path, written, expected, free
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def describe(cls, final: Path, code: int, written: int | None,
                 expected: int | None, cause: BaseException) -> DiskFullError:
        if isinstance(cause, DiskFullError) and cause.__cause__ is not None:
            cause = cause.__cause__  # a write inside a directory being written: say it once
        free = free_bytes(final.parent)
        what = "disk quota exceeded" if code == errno.EDQUOT else "disk full"
        held = ("its writer had removed its partial file" if written is None
                else f"its temporary held {human_bytes(written)} when the write failed")
        whole = (f", of {human_bytes(expected)} to write" if expected is not None
                 else " (the whole size was not known in advance)")
        kept = f"; the previous {final.name} is kept" if os.path.lexists(final) else ""
        message = (
            f"{what} writing {final} ({type(cause).__name__}: {cause}): {held}{whole}; "
            f"{human_bytes(free)} free on its file system now"
            f"{' (the quota can leave less)' if code == errno.EDQUOT else ''}. The partial "
            f"file was removed{kept}. Free space, then rerun: older LAPT checkpoints in "
            f"results/seed*/lapt/**/*.work/, the results/ of finished runs, stray temporaries of "
            f"killed writers (--config clean_temporaries=True)."
        )
        return cls(code, message, final, written, expected, free)


def free_bytes(directory: str | os.PathLike) -> int:
    """Bytes an unprivileged writer may still use on ``directory``'s file system."""
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def payload_bytes(tensors: Mapping[str, Any]) -> int:
    """The bytes of a name -> tensor (torch or numpy) mapping: a safetensors file's size
    less its header, for ``atomic_path(expected_bytes=...)``."""
    return sum(int(t.nbytes) for t in tensors.values())


def _full_errno(exc: BaseException, directory: Path) -> int | None:
    """ENOSPC or EDQUOT when ``exc`` says, or an I/O error suggests, that space ran out."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return link.errno
        text = str(link)
        for code in (errno.ENOSPC, errno.EDQUOT):
            # safetensors (Rust) says "os error 28", the C library "No space left on device"
            if os.strerror(code) in text or f"os error {code}" in text:
                return code
    # torch.save says "file write failed"/"unexpected pos", numpy "N requested and M written"
    if isinstance(exc, RuntimeError) or (isinstance(exc, OSError) and exc.errno is None):
        try:
            if free_bytes(directory) < NEARLY_FULL_BYTES:
                return errno.ENOSPC
        except OSError:
            pass
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or while handling, and so on."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def human_bytes(n: int) -> str:
    """``1,234,567 bytes (1.2 MiB)``."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{n:,} bytes" + (f" ({size:.1f} {unit})" if unit != "B" else "")


# ---------------------------------------------------------------- stray temporaries


def _host() -> str:
    return re.sub(r"[^\w.-]", "_", socket.gethostname())[:64] or "unknown"


def _process(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of process ``pid``; None when there is none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(b")") + 2:].split()  # the command name may hold spaces
    return fields[0].decode(), int(fields[19])  # fields 3 and 22 of proc(5)


_STARTS: dict[int, int] = {}


def writer_tag() -> str:
    """``{host}-{pid}-{start}`` of this process, as its temporaries' names carry it."""
    pid = os.getpid()  # a forked job has its own
    if pid not in _STARTS:
        own = _process(pid) if _HAVE_PROC else None
        _STARTS[pid] = own[1] if own else 0
    return f"{_host()}-{pid}-{_STARTS[pid]}"


def _writer_alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` (0: unknown) runs on this host."""
    if _HAVE_PROC:
        try:
            found = _process(pid)
        except OSError:
            return True  # /proc hidden from us: assume alive, never remove a live write
        return found is not None and found[0] not in "ZX" and start in (0, found[1])
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    return True


def _last_modified(path: Path) -> float:
    """The newest modification time of ``path`` and, for a directory, of all inside."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
                except FileNotFoundError:
                    pass
    return newest


def _why_stale(path: Path, writer: re.Match[str] | None, now: float) -> str | None:
    """Why the temporary ``path`` (its writer's part parsed; None: a name without one) can
    go; None while its writer may be alive."""
    host = writer["host"] if writer else None
    if writer and host == _host():
        pid, start = int(writer["pid"]), int(writer["start"])
        return None if _writer_alive(pid, start) else f"its writer (pid {pid} on this host) is gone"
    try:
        age = now - _last_modified(path)
    except FileNotFoundError:
        return None
    if age < FOREIGN_MAX_AGE_S:
        return None
    whose = f"another host's ({host})" if host else "its name names no writer"
    return f"{whose}, untouched for {age / 3600:.0f} h"


def stale_temporaries(final: str | os.PathLike) -> list[tuple[Path, str]]:
    """The temporaries of the target ``final`` that can be removed, each with why."""
    final = Path(final)
    prefix = f".{final.name}.tmp-"
    found = []
    now = time.time()
    try:
        entries = list(os.scandir(final.parent))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        writer = _WRITER_ONLY.fullmatch(entry.name[len(prefix):])
        if writer is not None and (why := _why_stale(Path(entry.path), writer, now)):
            found.append((Path(entry.path), why))
    return found


@dataclass(frozen=True)
class StrayTemporary:
    """A temporary found in a tree; ``stale``: why it can go, None when its writer may live."""

    path: Path
    stale: str | None


def find_stray_temporaries(root: str | os.PathLike) -> list[StrayTemporary]:
    """Every temporary under ``root``: :func:`atomic_path`'s, and the ``.tmpXXXXXX`` that
    safetensors writes a file to beside its target (its writer unnamed). By names only
    (os.walk; a stat for another host's); temporaries, swap copies and the LAPT work
    directories set aside are not entered."""
    found = []
    now = time.time()
    for directory, dirs, files in os.walk(root):
        skip = set()
        for name in [*dirs, *files]:
            if not (name.startswith(".") and ".tmp" in name):
                continue
            ours = _TEMPORARY.fullmatch(name)
            if ours is not None or _SAFETENSORS_TEMPORARY.fullmatch(name):
                path = Path(directory, name)
                found.append(StrayTemporary(path, _why_stale(path, ours, now)))
                skip.add(name)
        dirs[:] = [d for d in dirs if d not in skip and not _SET_ASIDE.search(d)
                   and not (d.startswith(".") and ".old-" in d)]
    return sorted(found, key=lambda t: t.path)


def size_of(path: str | os.PathLike) -> int:
    """Bytes of a file, or of every file in a directory tree."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def recover_directory(path: str | os.PathLike) -> str | None:
    """Finish a directory swap that a kill interrupted; say what was done (None: nothing).

    :func:`atomic_path` swaps a directory in three moves: ``final -> .final.old-<pid>``,
    ``tmp -> final``, remove the old one. Killed after the first move, only the old
    copy is left: it is complete, so it is moved back (the newest, if several).
    Killed after the second, the old copy is superseded and removed. A leftover
    ``.final.tmp-*`` was never committed and is left for the next writer to replace.
    """
    final = Path(path)
    olds = sorted(final.parent.glob(f".{final.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if not olds:
        return None
    if final.exists():
        for old in olds:
            remove_path(old)
        return f"removed {len(olds)} superseded copies of {final}"
    os.replace(olds[-1], final)
    for old in olds[:-1]:
        remove_path(old)
    return f"recovered {final} from {olds[-1].name} (a directory swap was interrupted)"


def remove_path(path: Path) -> None:
    """Remove a file or a whole directory tree; gone already is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class NonFiniteError(ValueError):
    """Raised instead of writing NaN or Inf into an artifact."""


def _check_finite_json(obj: Any, where: str = "$") -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise NonFiniteError(f"refusing to write non-finite value {obj!r} at {where}")
    if isinstance(obj, dict):
        for key, value in obj.items():
            _check_finite_json(value, f"{where}.{key}")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _check_finite_json(value, f"{where}[{i}]")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically; NaN/Inf anywhere is refused."""
    _check_finite_json(obj)
    data = (json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n").encode()
    with atomic_path(path, expected_bytes=len(data)) as tmp:
        tmp.write_bytes(data)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def check_finite(name: str, array: np.ndarray) -> None:
    """Raise :class:`NonFiniteError` naming the first bad rows of ``array``."""
    if array.dtype.kind not in "fc":
        return
    bad = ~np.isfinite(array)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise NonFiniteError(
            f"refusing to write {name}: {int(bad.sum())} non-finite values in rows "
            f"{rows[:10].tolist()}{' ...' if rows.size > 10 else ''}"
        )


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """Save one array as ``.npy`` atomically, refusing NaN/Inf."""
    check_finite(str(path), array)
    # the header adds about a hundred bytes
    with atomic_path(path, expected_bytes=array.nbytes) as tmp, open(tmp, "wb") as fh:
        np.save(fh, array, allow_pickle=False)


def write_table(frame: Any, markdown: str, csv_path: str | os.PathLike,
                md_path: str | os.PathLike) -> None:
    """A report table, each file atomically: ``frame`` (a pandas DataFrame) as CSV without
    its index, and its Markdown text."""
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(markdown, encoding="utf-8")


def write_text_lines(path: str | os.PathLike, lines: Iterator[str] | list[str]) -> int:
    """Write one line per item, atomically; returns the number of lines."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line.rstrip("\n") + "\n")
            n += 1
    return n


def write_parquet(
    path: str | os.PathLike, table: Any, metadata: dict[str, Any] | None = None
) -> None:
    """Write a pandas DataFrame or pyarrow Table as parquet, atomically.

    ``metadata`` is stored as JSON under the schema key ``embtransfer``.
    """
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    if metadata is not None:
        _check_finite_json(metadata)
        meta = dict(table.schema.metadata or {})
        meta[b"embtransfer"] = json.dumps(metadata, allow_nan=False).encode()
        table = table.replace_schema_metadata(meta)
    # Written through a file of ours: given a path, pyarrow removes a partial file itself
    # and a full disk's message could not say how far it got.
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        pq.write_table(table, sink)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, Any]:
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"embtransfer")
    return json.loads(raw) if raw else {}
