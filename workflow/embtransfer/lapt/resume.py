"""The LAPT loop's resume checkpoint: when it is saved, what it records, how a run resumes.

:class:`ResumeCheckpoint` ties the work directory's ``checkpoint/`` (its files and
identity: :mod:`embtransfer.lapt.checkpointing`) to one run's model, optimizer and
progress: resume or set aside at the start, save when due, save and raise
:class:`~embtransfer.lapt.preemption.Preempted` when asked to stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch

from embtransfer.lapt.checkpointing import resume_state, save_checkpoint, set_rng_state
from embtransfer.lapt.distributed import Ranks, main_first
from embtransfer.lapt.metrics import CallMeasurements, Progress
from embtransfer.lapt.preemption import Preempted
from embtransfer.lapt.settings import LaptSettings


class ResumeCheckpoint:
    """``work/checkpoint`` of the run with ``identity``, saving ``model`` and its optimizer."""

    def __init__(
        self,
        work: Path,
        identity: dict[str, Any],
        model: Any,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        settings: LaptSettings,
        steps_per_epoch: int,
        ranks: Ranks,
        log: Callable[[str], None],
    ):
        self.work, self.identity, self.ranks, self.log = work, identity, ranks, log
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.settings, self.steps_per_epoch = settings, steps_per_epoch

    @property
    def path(self) -> Path:
        return self.work / "checkpoint"

    def resume(self, total_steps: int) -> Progress:
        """The checkpoint's progress, weights, optimizer and RNG if it is this run's.

        Rank 0 decides and sets a stale checkpoint aside; the others follow.
        """
        state = main_first(
            self.ranks,
            lambda: resume_state(
                self.work,
                self.identity,
                self.model,
                self.optimizer,
                self.scheduler,
                self.settings.global_batch_size,
                self.log,
            ),
        )
        if state is None:
            return Progress()
        set_rng_state(state["_rng"])
        progress = Progress(
            step=int(state["step"]),
            losses=list(state["losses"]),
            records=list(state["metrics"]),
            elapsed_before=float(state["elapsed_s"]),
        )
        self.log(f"[lapt] resuming from {self.path} at step {progress.step}/{total_steps}")
        return progress

    def save(self, progress: Progress, measured: CallMeasurements, rng: dict[str, Any]) -> None:
        """Checkpoint the state after step ``progress.step`` with the RNG state ``rng`` (rank
        0 writes)."""
        if self.ranks.main:
            step = progress.step
            state = {
                "step": step,
                "sequences_seen": step * self.settings.global_batch_size,
                "epoch": step // max(1, self.steps_per_epoch),
                "losses": progress.losses,
                "metrics": progress.records,
                "identity": self.identity,
                "elapsed_s": progress.elapsed_before + measured.run_s(),
            }
            save_checkpoint(self.path, self.model, self.optimizer, self.scheduler, state, rng)
        self.ranks.barrier()

    def due(self, step: int, measured: CallMeasurements) -> bool:
        # Every rank asks (a collective) unless the step count decides it for all of them.
        settings = self.settings
        return step % max(1, int(settings.checkpoint_every)) == 0 or self.ranks.any(
            settings.checkpoint_minutes is not None
            and time.monotonic() - measured.last_save >= 60 * float(settings.checkpoint_minutes)
        )

    def preempt(
        self, progress: Progress, measured: CallMeasurements, rng: dict[str, Any], msg: str
    ) -> NoReturn:
        """Checkpoint (the step to redo comes with ``rng``), say why, raise :class:`Preempted`."""
        self.save(progress, measured, rng)
        self.log(msg)
        raise Preempted(progress.step, self.path)

    def kept(self) -> str:
        """What a failed run says of its last checkpoint."""
        ckpt = self.path
        return (
            f"the last checkpoint in {ckpt} is kept (a rerun with the same inputs resumes "
            f"from it; change lr or max_grad_norm, or delete {ckpt.parent} to start over)"
        )
