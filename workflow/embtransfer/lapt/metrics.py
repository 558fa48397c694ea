"""What a LAPT run measures, and ``metrics.jsonl``, where it goes.

:class:`Progress` is what a checkpoint carries across a resume (step, losses, the metrics
lines so far, earlier wall time); :class:`CallMeasurements` is what one call of the
trainer measures alone (timings, tokens, its share of sequences). :class:`MetricsLog`
appends the lines (rank 0 writes the file, every rank keeps them) and shows them in the
job's log: the train loss every ``log_every`` steps (:func:`log_train_loss`), the held-out
loss at the evaluation points (:func:`log_evaluations`), a final line (:func:`final_record`).
"""

from __future__ import annotations

import contextlib
import json
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embtransfer.core.atomic import atomic_path


@dataclass
class Progress:
    """What a checkpoint saves and a resume restores (with weights, optimizer and RNG)."""

    step: int = 0
    losses: list[float] = field(default_factory=list)  # one per optimizer step
    records: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl lines so far
    elapsed_before: float = 0.0  # wall time of the runs this one continues


class CallMeasurements:
    """What this call measures (timings, tokens, its share of sequences): not resumed."""

    def __init__(self, start_step: int):
        self.start_step = start_step
        self.started = time.perf_counter()
        self.last_save = time.monotonic()
        self.tokens = 0
        self.overhead_s = 0.0  # eval and checkpoint time, kept out of tokens/s
        self.sequences = {"target": 0, "replay": 0}

    def count(self, idx: np.ndarray, n_target: int, length: int) -> None:
        """A finished step over the global batch ``idx`` (indices >= n_target: replay)."""
        n_rep = int((idx >= n_target).sum())
        self.sequences["replay"] += n_rep
        self.sequences["target"] += len(idx) - n_rep
        self.tokens += len(idx) * length

    def run_s(self) -> float:
        return time.perf_counter() - self.started

    def tokens_per_s(self, run_s: float) -> float:
        return round(self.tokens / max(run_s - self.overhead_s, 1e-9), 1)

    @contextlib.contextmanager
    def overhead(self) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.overhead_s += time.perf_counter() - start


@dataclass(frozen=True)
class MetricsLog:
    """``metrics.jsonl`` (written by rank 0 only) and the job's log."""

    path: Path
    writes: bool
    log: Callable[[str], None]

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """The file holds ``records`` only: a resumed run redoes the lines after them."""
        if self.writes:
            with atomic_path(self.path) as tmp:
                tmp.write_text("".join(json.dumps(r) + "\n" for r in records))

    def record(self, progress: Progress, rec: dict[str, Any]) -> None:
        progress.records.append(rec)
        if self.writes:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")


def log_train_loss(
    metrics: MetricsLog,
    progress: Progress,
    measured: CallMeasurements,
    lr: float,
    every: int,
    total: int,
) -> None:
    """Every ``every`` steps and at the last: the mean train loss since the last line."""
    step = progress.step
    if step % every and step != total:
        return
    run_s = measured.run_s()
    window = progress.losses[(step - 1) // every * every :]
    rec = {
        "step": step,
        "train_loss": sum(window) / len(window),
        "lr": lr,
        "tokens_per_s": measured.tokens_per_s(run_s),
        "elapsed_s": round(progress.elapsed_before + run_s, 3),
        "eta_s": round(run_s / (step - measured.start_step) * (total - step), 1),
    }
    metrics.record(progress, rec)
    metrics.log(
        f"[lapt] step {step}/{total} loss {rec['train_loss']:.4f} lr {lr:.3e} "
        f"{rec['tokens_per_s']:,.0f} tok/s eta {rec['eta_s']:.0f}s"
    )


@torch.no_grad()
def held_out_loss(
    loss_fn: torch.nn.Module,
    blocks: np.ndarray,
    micro: int,
    n_batches: int | None,
    device: torch.device,
    bf16: bool,
) -> float:
    """Mean loss over the first ``n_batches`` micro batches of ``blocks`` (all: None)."""
    loss_fn.eval()
    total, rows = 0.0, 0
    stop = len(blocks) if n_batches is None else min(len(blocks), micro * int(n_batches))
    for start in range(0, stop, micro):
        ids = torch.from_numpy(np.asarray(blocks[start : start + micro], dtype=np.int64))
        ids = ids.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(ids)
        total += float(loss) * len(ids)  # packed blocks: same token count per row
        rows += len(ids)
    loss_fn.train()
    return total / max(rows, 1)


def log_evaluations(
    metrics: MetricsLog, progress: Progress, fractions: list[float], evaluate: Callable[[], float]
) -> None:
    """The held-out loss ``evaluate()`` once for each of ``fractions`` (this step's)."""
    for frac in fractions:
        ev = evaluate()
        metrics.record(progress, {"step": progress.step, "eval_loss": ev, "fraction": frac})
        metrics.log(f"[lapt] eval at {frac:.0%} (step {progress.step}): loss {ev:.4f}")


def peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    # Linux reports ru_maxrss in KiB.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu_max_rss"


def final_record(
    progress: Progress, measured: CallMeasurements, device: torch.device, every: int
) -> dict[str, Any]:
    """The last metrics line: the mean loss of the last ``every`` steps, peak memory, speed."""
    run_s = measured.run_s()
    peak, peak_kind = peak_memory(device)
    tail = progress.losses[-every:]
    return {
        "final": True,
        "step": progress.step,
        "final_train_loss": sum(tail) / max(1, len(tail)),
        "peak_memory_bytes": peak,
        "peak_memory_kind": peak_kind,
        "tokens_per_s": measured.tokens_per_s(run_s),
        "elapsed_s": round(progress.elapsed_before + run_s, 3),
    }
