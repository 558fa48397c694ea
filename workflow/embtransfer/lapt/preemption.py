"""Stopping LAPT for preemption: a signal, or SLURM's time limit near.

SIGUSR1 or SIGTERM, or a timer ``stop_before_end_s`` before SLURM's time limit
(:func:`embtransfer.core.cluster.slurm_seconds_left`), sets a :class:`StopRequest`;
between two micro batches the trainer then drops the unfinished step, saves a
checkpoint of the state before it (with the RNG state of the step's start, so the
resumed run redoes it identically), logs it and raises :class:`Preempted` (the job
exits non-zero; a requeued job resumes).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embtransfer.core.cluster import slurm_seconds_left


class Preempted(RuntimeError):
    """A stop was asked (SIGUSR1/SIGTERM, or the job's time limit is near); a checkpoint
    was saved at ``step`` in ``checkpoint``. The job exits non-zero for requeueing."""

    def __init__(self, step: int, checkpoint: Path):
        super().__init__(f"stopped for preemption at step {step}; checkpoint saved in "
                         f"{checkpoint}; rerun (or requeue) to resume")
        self.step = step
        self.checkpoint = checkpoint


class StopRequest:
    """Set by SIGUSR1 / SIGTERM, or by a timer ``stop_before_end_s`` before SLURM's limit.

    SIGUSR1 is what ``sbatch --signal=USR1@<s>`` sends; the timer does the same job
    where the signal cannot reach this process (see slurm/config.yaml).
    """

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self, stop_before_end_s: int, log: Callable[[str], None]):
        self.event = threading.Event()
        self.reason = ""
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        self._timer = None
        left = slurm_seconds_left()
        if left is not None and stop_before_end_s > 0:
            # A limit shorter than the margin still leaves the first half for training.
            delay = max(left - stop_before_end_s, left / 2, 0.0)
            self._timer = threading.Timer(delay, self._set, args=("the SLURM time limit is near",))
            self._timer.daemon = True
            self._timer.start()
            log(f"[lapt] SLURM time limit in {left:.0f} s: a checkpoint will be saved and the "
                f"job stopped after {delay:.0f} s")

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._set(signal.Signals(signum).name)

    def _set(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def __enter__(self) -> StopRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._timer is not None:
            self._timer.cancel()
