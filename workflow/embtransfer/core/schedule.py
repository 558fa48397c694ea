"""The one learning-rate schedule: linear warm-up, then half a cosine to zero.

LAPT and the miniature world's pretraining both use it, so a step's learning rate means
the same in either. It is ``transformers.get_cosine_schedule_with_warmup``'s formula
(step 0 gets factor 0, the warm-up ends at factor 1), with the progress capped at 1: a
step past ``total`` stays at 0 instead of climbing the cosine back up.
"""

from __future__ import annotations

import math

import torch


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    """LR multiplier of the optimizer step with 0-based index ``step``."""
    if step < warmup:
        return step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_scheduler(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The optimizer's learning rate times :func:`cosine_with_warmup` of its step index."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: cosine_with_warmup(step, warmup, total)
    )
