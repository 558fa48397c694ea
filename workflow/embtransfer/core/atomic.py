"""Atomic artifact writes: a half-written file is never taken for a finished one.

Every writer goes through :func:`atomic_path`: the content is written to a
temporary sibling and renamed into place only when the writer returned without
error. A failure removes the temporary and leaves any previous artifact alone.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


@contextmanager
def atomic_path(path: str | os.PathLike, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` on success.

    With ``directory=True`` the temporary is an (empty) directory and a finished
    directory replaces any previous one as a whole.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{final.name}.tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=final.parent)
        os.close(fd)
        tmp = Path(name)
    if directory:
        recover_directory(final)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if directory:
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            _remove(old)
        else:
            os.replace(tmp, final)
    else:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)


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
            _remove(old)
        return f"removed {len(olds)} superseded copies of {final}"
    os.replace(olds[-1], final)
    for old in olds[:-1]:
        _remove(old)
    return f"recovered {final} from {olds[-1].name} (a directory swap was interrupted)"


def _remove(path: Path) -> None:
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
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


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
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
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
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, Any]:
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"embtransfer")
    return json.loads(raw) if raw else {}
