"""Logging for workflow jobs: to the rule's log file and to stderr."""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any


def job_logger(log_file: str | Path | None, name: str = "embtransfer") -> logging.Logger:
    """Configure the root logger for one job and return a named logger.

    Warnings raised with :func:`warnings.warn` are routed into the log too, so
    a warning (e.g. degenerate sparsemax rows) is never lost in a cluster job.
    """
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    logging.captureWarnings(True)
    warnings.simplefilter("default")
    logger = logging.getLogger(name)

    # An uncaught error lands in the job's log file too, where users look first.
    def log_uncaught(exc_type, exc, tb):  # type: ignore[no-untyped-def]
        logger.error("job failed: %s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))

    sys.excepthook = log_uncaught
    return logger


class Timer:
    """Wall-clock seconds of a block: ``with Timer() as t: ...; t.seconds``."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


#: Keys of run-to-run values (wall-clock times, throughput, thread counts). Jobs log them and
#: the artifacts written through :func:`without_run_values` leave them out, so the same config
#: gives byte-identical files; LAPT's ``metrics.jsonl`` keeps them beside the losses
#: (:mod:`embtransfer.lapt.metrics`), and the report reads its losses only.
RUN_VALUES = frozenset({"seconds", "elapsed_s", "tokens_per_second", "tokens_per_s", "eta_s",
                        "threads", "peak_memory_bytes", "sequences_this_run"})


def without_run_values(stats: Any) -> Any:
    """``stats`` (nested dicts and lists) without the :data:`RUN_VALUES` keys, at any depth."""
    if isinstance(stats, dict):
        return {k: without_run_values(v) for k, v in stats.items() if k not in RUN_VALUES}
    if isinstance(stats, list | tuple):
        return [without_run_values(v) for v in stats]
    return stats
