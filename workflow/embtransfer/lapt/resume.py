"""LAPT's resume checkpoint: which checkpoints a run keeps, whose they are, and where a
restarted run continues.

The work directory's ``checkpoints/`` holds one folder per saved step,
``step-<8 digits>/`` (its files: :mod:`embtransfer.lapt.checkpointing`), saved every
``checkpoint_every`` steps, every ``checkpoint_minutes`` and before a preempted job stops.
A new folder is renamed into place complete, its manifest written last; only then are
the folders beyond the newest ``keep_checkpoints`` removed, so a kill at any moment
leaves a complete checkpoint.

At the start (:meth:`ResumeCheckpoint.resume`) the folders are tried newest first. One
that is incomplete, differs from its manifest or does not load is moved aside, beside the
work directory, as ``<work>.<incomplete|corrupt>-step-<n>-<time>-<pid>/`` with
``SET_ASIDE.txt`` saying why, and the next older one is tried; when none is left the run
starts at step 0. A checkpoint of another run (its identity, :func:`run_identity`:
starting checkpoint hash, blocks hashes, trajectory settings, seed, step count) makes the
whole work directory stale: it is set aside as ``<work>.stale-<time>-<pid>/`` and the run
starts fresh.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch

from embtransfer.lapt.blocks import file_sha256
from embtransfer.lapt.checkpointing import (
    CheckpointError,
    load_checkpoint,
    read_state,
    set_rng_state,
    verify_checkpoint,
    write_checkpoint,
)
from embtransfer.lapt.distributed import Ranks, main_first
from embtransfer.lapt.metrics import CallMeasurements, Progress
from embtransfer.lapt.preemption import Preempted
from embtransfer.lapt.settings import LaptSettings

# Keys that may change between a checkpoint and its resumption: they change speed and
# memory (and float rounding), not the trajectory's definition.
RESUME_FREE = ("checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "stop_before_end_s",
               "threads", "log_every", "eval_batches", "micro_batch_size", "loss_chunk_rows",
               "activation_checkpointing", "compile", "attn_implementation")
STEP_FOLDER = re.compile(r"step-(\d{8})")


# ---------------------------------------------------------------- the run's identity


def starting_hash(model_dir: str | Path) -> str:
    """sha256 over the starting checkpoint's config and weight files."""
    model_dir = Path(model_dir)
    files = sorted([model_dir / "config.json", *model_dir.glob("*.safetensors")])
    digest = hashlib.sha256()
    for f in files:
        if f.is_file():
            digest.update(f.name.encode())
            digest.update(file_sha256(f).encode())
    return digest.hexdigest()


def run_identity(model_dir: str | Path, metas: dict[str, dict[str, Any]],
                 settings: LaptSettings, seed: int, total: int) -> dict[str, Any]:
    """What the run continues: a checkpoint resumes only when all of it matches."""
    return json.loads(json.dumps({
        "start_checkpoint_sha256": starting_hash(model_dir),
        "blocks": {k: blocks_identity(m) for k, m in metas.items()},
        # The replay text is identified by its blocks' hashes, not by its path.
        "settings": {k: ({"ratio": v["ratio"]} if k == "replay" and v else v)
                     for k, v in settings.as_dict().items() if k not in RESUME_FREE},
        "seed": seed, "total_steps": total,
    }))


def blocks_identity(meta: dict[str, Any]) -> dict[str, Any]:
    """What identifies a text's packed blocks (embtransfer.lapt.blocks' sidecar)."""
    return {k: meta[k] for k in ("tokenizer_sha256", "corpus_sha256", "max_length",
                                 "separator_id")}


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _differences(old.get(k), new.get(k), f"{where}.{k}" if where else k)
        return out
    return [] if old == new else [where or "identity"]


def _set_aside(path: Path, work: Path, label: str, reason: str) -> Path:
    """Rename ``path`` to ``<work>.<label>-<time>-<pid>`` (kept, with a note saying why)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = work.with_name(f"{work.name}.{label}-{stamp}-{os.getpid()}")
    os.replace(path, aside)
    (aside / "SET_ASIDE.txt").write_text(reason + "\n")
    return aside


# ---------------------------------------------------------------- the kept checkpoints


class ResumeCheckpoint:
    """``work/checkpoints/`` of the run with ``identity``, saving ``model`` and its optimizer."""

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
    def root(self) -> Path:
        return self.work / "checkpoints"

    def folder(self, step: int) -> Path:
        """Where the checkpoint after ``step`` optimizer steps is saved."""
        return self.root / f"step-{step:08d}"

    def saved(self) -> list[Path]:
        """The checkpoint folders, oldest first (temporaries of an unfinished save are not)."""
        found = [p for p in self.root.glob("step-*") if STEP_FOLDER.fullmatch(p.name)]
        return sorted(found, key=lambda p: p.name)

    # ------------------------------------------------------------ resume

    def resume(self, total_steps: int) -> Progress:
        """The newest usable checkpoint's progress, weights, optimizer and RNG.

        Rank 0 decides and sets unusable or stale checkpoints aside; the others follow.
        """
        found = main_first(self.ranks, self._newest_usable)
        if found is None:
            return Progress()
        folder, state = found
        set_rng_state(state["_rng"])
        progress = Progress(
            step=int(state["step"]),
            losses=list(state["losses"]),
            records=list(state["metrics"]),
            elapsed_before=float(state["elapsed_s"]),
        )
        self.log(f"[lapt] resuming from {folder} at step {progress.step}/{total_steps}")
        return progress

    def _newest_usable(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that is complete, intact, this run's and loads, with its
        state; the unusable ones newer than it set aside. None: start at step 0."""
        overwritten: CheckpointError | None = None  # a failed load that changed the model
        single = self.work / "checkpoint"  # one unverified checkpoint without a manifest
        if single.is_dir():
            aside = _set_aside(single, self.work, "unverified-checkpoint",
                               f"{single} has no manifest to verify it against")
            self.log(f"[lapt] {single} has no manifest (a single unverified checkpoint); "
                     f"set aside as {aside}")
        candidates = self.saved()
        for folder in reversed(candidates):
            try:
                verify_checkpoint(folder)
                differs = self._differs_from_this_run(folder)
                if differs:
                    reason = (f"{folder} was started from other inputs or settings (differs "
                              f"in: {', '.join(differs[:8])})")
                    aside = _set_aside(self.work, self.work, "stale", reason)
                    self.work.mkdir(parents=True)
                    self.log(f"[lapt] {reason}; the old work directory is kept as {aside}; "
                             f"starting fresh")
                    break
                state = load_checkpoint(folder, self.model, self.optimizer, self.scheduler)
                batch = self.settings.global_batch_size
                if int(state["sequences_seen"]) != int(state["step"]) * batch:
                    raise CheckpointError(folder, "corrupt", "its data position disagrees with "
                                                             "its step", touched=True)
                return folder, state
            except CheckpointError as exc:
                overwritten = overwritten or (exc if exc.touched else None)
                aside = _set_aside(folder, self.work, f"{exc.kind}-{folder.name}", str(exc))
                self.log(f"[lapt] {exc}; set aside as {aside}")
        else:
            if candidates:
                self.log(f"[lapt] no usable checkpoint left in {self.root}; starting at step 0")
        if overwritten is not None:
            raise CheckpointError(
                overwritten.folder, overwritten.kind,
                f"{overwritten.detail}; it had begun to overwrite the model, so this run "
                f"cannot start at step 0: rerun (the checkpoint is set aside)",
                touched=True,
            )
        return None

    def _differs_from_this_run(self, folder: Path) -> list[str]:
        """What of the run's identity ``folder`` was written for differs from this run's."""
        written_for = read_state(folder).get("identity")
        if not isinstance(written_for, dict):
            return ["identity (the checkpoint records none)"]
        return _differences(written_for, self.identity)

    # ------------------------------------------------------------ save

    def save(self, progress: Progress, measured: CallMeasurements, rng: dict[str, Any]) -> Path:
        """Checkpoint the state after step ``progress.step`` with the RNG state ``rng`` (rank
        0 writes), then remove the folders beyond the newest ``keep_checkpoints``."""
        folder = self.folder(progress.step)
        # A folder for this step already exists only when a stop came during the next step
        # (or right after resuming from it): the state it holds is this one, so it stays.
        if self.ranks.main and not folder.exists():
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
            write_checkpoint(folder, self.model, self.optimizer, self.scheduler, state, rng)
            for old in self.saved()[: -int(self.settings.keep_checkpoints)]:
                shutil.rmtree(old)
        self.ranks.barrier()
        return folder

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
        folder = self.save(progress, measured, rng)
        self.log(msg)
        raise Preempted(progress.step, folder)

    def discard(self) -> None:
        """Remove the kept checkpoints: the finished run's output supersedes them."""
        if self.ranks.main and self.root.exists():
            shutil.rmtree(self.root)
        self.ranks.barrier()

    def kept(self) -> str:
        """What a failed run says of its last checkpoint."""
        return (
            f"the last checkpoint in {self.root} is kept (a rerun with the same inputs resumes "
            f"from it; change lr or max_grad_norm, or delete {self.work} to start over)"
        )
