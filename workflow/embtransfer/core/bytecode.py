"""The bytecode of the modules a Snakemake process imports, written at set-up.

Where Python runs with ``PYTHONDONTWRITEBYTECODE`` nothing writes ``.pyc`` files, so every
process compiles each module it imports again (a dry run spends seconds in ``compile()``).
Compiling the whole environment at set-up costs 10-14 s on 2 cores for ~13,000 modules, of
which a dry run imports about a tenth. So ``make setup`` runs a dry run of the default
config in this process and compiles what it imported: the packages Snakemake, its plugins
and the Snakefile load. ``make test`` compiles every package (the suite's many processes win
that back); ``make run``'s jobs fork from one job server, which compiles its imports once.
"""

from __future__ import annotations

import contextlib
import io
import os
import py_compile
import sys
from concurrent.futures import ProcessPoolExecutor
from importlib.util import cache_from_source
from multiprocessing import get_context
from pathlib import Path


def imported_sources(prefixes: tuple[str, ...]) -> list[Path]:
    """The source files of the imported modules that lie under one of ``prefixes``."""
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return sorted(Path(f) for f in files
                  if f and f.endswith(".py") and f.startswith(prefixes) and Path(f).is_file())


def _compile_one(source: Path) -> int:
    """Write ``source``'s bytecode if its ``.pyc`` is missing or older: 1 if written."""
    cached = Path(cache_from_source(str(source)))
    if cached.exists() and cached.stat().st_mtime >= source.stat().st_mtime:
        return 0
    # a file that does not compile here (another Python's syntax) is left to the import
    with contextlib.suppress(py_compile.PyCompileError, OSError):
        py_compile.compile(str(source), cfile=str(cached), doraise=True)
        return 1
    return 0


def compile_stale(sources: list[Path], workers: int | None = None) -> int:
    """Write the bytecode of each source whose ``.pyc`` is missing or older; their count.
    Over ``workers`` processes (default: every core; 5.3 s to about 3.5 s for a dry run's
    1,238 modules on 2 cores): each file is compiled on its own, so the order is free."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(sources) < 64:
        return sum(map(_compile_one, sources))
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        return sum(pool.map(_compile_one, sources, chunksize=32))


def warm_plan(argv: list[str]) -> int:
    """Run ``snakemake`` with ``argv`` (a dry run) here, then compile what it imported from
    the environment and this package. The plan's outcome does not matter: a config that
    stops it still leaves its imports compiled."""
    from snakemake.cli import main as snakemake_main  # noqa: PLC0415 (the warm-up's import)

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit, Exception):
            snakemake_main(argv)
    package = str(Path(__file__).resolve().parents[1])
    prefixes = (*{p for p in sys.path if "-packages" in p}, package)
    return compile_stale(imported_sources(prefixes))


if __name__ == "__main__":
    count = warm_plan(sys.argv[1:] or ["--dry-run", "--quiet"])
    print(f"bytecode: {count} modules a dry run imports compiled")
