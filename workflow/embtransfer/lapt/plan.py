"""LAPT's plan: how many optimizer steps, their learning rate, and where evaluations fall.

:func:`make_plan` fixes the run's shape from the settings and the number of blocks
before the first step; a resumed run computes the same. The learning rate over those
steps is the project's one schedule, :mod:`embtransfer.core.schedule`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from embtransfer.lapt.data import TrainingRows, replay_count
from embtransfer.lapt.settings import LaptSettings


def warmup_steps(total: int, warmup_ratio: float) -> int:
    return math.ceil(total * warmup_ratio)  # as the Hugging Face Trainer rounds it


@dataclass(frozen=True)
class RunPlan:
    """The run's shape, fixed before the first step (a resumed run computes the same)."""

    total_steps: int  # optimizer steps
    warmup_steps: int
    steps_per_epoch: int  # the last partial global batch of an epoch is dropped
    micro_batches: int  # per optimizer step, over all processes
    replay_ratio: float  # replay share of an epoch
    eval_at: dict[int, list[float]]  # step -> eval fractions that fall on it


def make_plan(settings: LaptSettings, training: TrainingRows, world: int) -> RunPlan:
    """The plan of ``settings`` over ``training``'s blocks on ``world`` processes."""
    ratio = float(settings.replay.ratio) if settings.replay else 0.0
    batch_size = settings.global_batch_size
    per_epoch = training.n_target + (
        replay_count(training.n_target, ratio) if training.n_replay else 0
    )
    steps_per_epoch = per_epoch // batch_size
    total = (
        int(settings.max_steps)
        if settings.max_steps is not None
        else int(settings.epochs) * steps_per_epoch
    )
    micro_batches = batch_size // settings.micro_batch_size
    if micro_batches % world:
        raise ValueError(
            f"{micro_batches} micro batches per step (global_batch_size {batch_size} / "
            f"micro_batch_size {settings.micro_batch_size}) do not split evenly over {world} "
            f"processes"
        )
    eval_at: dict[int, list[float]] = {}
    for frac in settings.eval_fractions:
        eval_at.setdefault(min(total, max(1, round(frac * total))), []).append(float(frac))
    return RunPlan(
        total_steps=total,
        warmup_steps=warmup_steps(total, float(settings.warmup_ratio)),
        steps_per_epoch=steps_per_epoch,
        micro_batches=micro_batches,
        replay_ratio=ratio,
        eval_at=eval_at,
    )
