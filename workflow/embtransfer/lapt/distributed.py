"""LAPT on several processes: ranks, their collectives, and the launch command.

``accelerate launch`` / ``torchrun`` set ``WORLD_SIZE``: the trainer then wraps its loss
module in PyTorch DDP; each rank runs its share of every global batch's micro batches
(gradient sync only on its last), the loss is scaled so DDP's average is the one-process
gradient, and rank 0 alone writes metrics, checkpoints and the output, so N processes
follow the same trajectory as one. Without CUDA the ranks talk over gloo (the tests).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


class Ranks:
    """This process's place among the training processes (one when not distributed)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.rank = dist.get_rank() if self.world > 1 else 0
        self.main = self.rank == 0
        local = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def total(self, value: float) -> float:
        """``value`` summed over the ranks."""
        if self.world == 1:
            return value
        summed = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(summed)
        return float(summed.item())

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank."""
        if self.world == 1:
            return flag
        flags = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def main_first(ranks: Ranks, fn: Callable[[], Any]) -> Any:
    """``fn()`` on rank 0, then on the others (what rank 0 writes, they read)."""
    out = None
    for turn in ("main", "others"):
        if (turn == "main") == ranks.main:
            out = fn()
        ranks.barrier()
    return out


def launch_command(spec_file: str | Path, processes: int, port: int = 29500) -> list[str]:
    """``accelerate launch`` of :func:`embtransfer.lapt.trainer.main` on ``processes``
    processes (one per GPU).

    ``--multi_gpu`` is accelerate's distributed launcher (it sets RANK, WORLD_SIZE,
    ...); without CUDA the ranks talk over gloo, which is how the tests run it.
    """
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
            "--num_processes", str(processes), "--num_machines", "1",
            "--main_process_port", str(port),
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "-m", "embtransfer.lapt.trainer", str(spec_file)]
