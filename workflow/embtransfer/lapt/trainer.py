"""Language-adaptive continual pre-training (LAPT) of a transferred causal LM, resumable.

:func:`train_lapt` continues causal-LM training of a Hugging Face checkpoint on
target-language text (docs/design.md §5) and writes the result, atomically, as a
checkpoint directory (safetensors + tokenizer + ``lapt.json``).

Settings: :class:`embtransfer.lapt.settings.LaptSettings` (the one place of the
defaults, the SALT paper's: max length 1024, lr 1e-5, linear warmup (5%) then cosine
to 0, a global batch of 512 sequences reached by gradient accumulation, one epoch,
bf16 autocast over fp32 master weights where the device supports it). Variants: an
embedding-only first stage (``embedding_only_steps``), English replay at an exact ratio
(:func:`embtransfer.lapt.data.epoch_order`), LoRA (:mod:`embtransfer.lapt.lora`, merged
at the end).

This module is the loop: :func:`train_lapt` sets up a
:class:`~embtransfer.lapt.training_run.TrainingRun` (model, blocks, plan, optimizer, resume
checkpoint: :mod:`embtransfer.lapt.training_run`), starts it (:func:`_start`: seed; resume or set
aside), then, step by step, calls :func:`_train_step` and :func:`_evaluate_and_checkpoint`,
and at the end :func:`_finish`. Around it, one module per concern:
:mod:`~embtransfer.lapt.data` (blocks and the data order), :mod:`~embtransfer.lapt.plan`
(steps, learning rate, evaluation points), :mod:`~embtransfer.lapt.loss` (the loss over the
vocabulary in chunks), :mod:`~embtransfer.lapt.metrics` (progress, timings,
``metrics.jsonl``), :mod:`~embtransfer.lapt.resume` (the resume checkpoint; one
checkpoint folder's files: :mod:`~embtransfer.lapt.checkpointing`),
:mod:`~embtransfer.lapt.distributed` (several processes) and
:mod:`~embtransfer.lapt.preemption` (signals and SLURM's time limit).

The work directory (``work_dir``, default ``out_dir + ".work"``) holds ``metrics.jsonl``
(one JSON line per logging step: ``step``, ``train_loss``, ``lr``, ``tokens_per_s``
(training only, without eval/checkpoint time), ``elapsed_s``, ``eta_s``; one per
evaluation: ``{"step", "eval_loss", "fraction"}`` at ``eval_fractions`` of the steps;
and a final line: ``final_train_loss``, ``peak_memory_bytes``, ...), ``checkpoints/``
until the final model is written, and ``blocks/`` (the packed blocks of text inputs).
The metrics file is rewound to the checkpoint on resume, so a resumed run's trajectory
equals an uninterrupted one's. ``stop_after_steps`` stops *without* saving, like a
hard kill, and returns ``{"status": "stopped", ...}``: tests use it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from embtransfer.core.atomic import atomic_path, write_json
from embtransfer.core.logs import without_run_values
from embtransfer.core.threads import torch_threads
from embtransfer.lapt import lora as lora_mod
from embtransfer.lapt.checkpointing import rng_state
from embtransfer.lapt.data import GlobalBatches
from embtransfer.lapt.distributed import Ranks
from embtransfer.lapt.metrics import (
    CallMeasurements,
    Progress,
    final_record,
    held_out_loss,
    log_evaluations,
    log_train_loss,
)
from embtransfer.lapt.preemption import StopRequest
from embtransfer.lapt.resume import blocks_identity
from embtransfer.lapt.settings import LaptSettings
from embtransfer.lapt.training_run import (
    ModelTrainer,
    TrainingRun,
    log_start,
    set_up_run,
    wrap_loss,
)
from embtransfer.models.hf import save_safetensors


class MicroBatchOOMError(MemoryError):
    pass


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in msg or "can't allocate memory" in msg
    )


# ---------------------------------------------------------------- the start


def _start(run: TrainingRun, seed: int) -> Progress:
    """Seed the RNGs, then continue the newest usable checkpoint of this run, if any.

    The metrics file is rewound to the checkpoint: lines of steps after it will be redone.
    """
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    progress = run.checkpoint.resume(run.setup.plan.total_steps)
    run.metrics.rewrite(progress.records)
    return progress


# ---------------------------------------------------------------- one optimizer step


def _train_step(run: TrainingRun, step: int, idx: np.ndarray, stop: StopRequest) -> float | None:
    """Optimizer step ``step`` (0-based) over the global batch ``idx``; its mean loss.

    Returns None, leaving the weights and optimizer untouched, when a stop is asked
    between two micro batches: the caller checkpoints the state before this step
    and the resumed run redoes the step from its start (same data, same RNG).
    """
    settings, trainer = run.setup.settings, run.trainer
    trainer.optimizer.zero_grad(set_to_none=True)
    try:
        step_loss = _accumulate_gradients(run, idx, stop)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        raise MicroBatchOOMError(
            f"micro batch of {settings.micro_batch_size} x {settings.max_length} tokens does not "
            f"fit in memory; set a smaller micro_batch_size (global_batch_size "
            f"{settings.global_batch_size} stays, reached by gradient accumulation), or "
            f"lapt.activation_checkpointing: true"
        ) from exc
    if step_loss is None:
        trainer.optimizer.zero_grad(set_to_none=True)
        return None
    total_loss = run.setup.ranks.total(float(step_loss))
    if not math.isfinite(total_loss):
        raise FloatingPointError(
            f"non-finite train loss {total_loss} at step {step + 1}; {run.checkpoint.kept()}"
        )
    _update(trainer, step < settings.embedding_only_steps, float(settings.max_grad_norm))
    return total_loss


def _accumulate_gradients(
    run: TrainingRun, idx: np.ndarray, stop: StopRequest
) -> torch.Tensor | None:
    """This rank's share of the global batch ``idx``, forward and backward, micro batch by
    micro batch; the step's mean loss over them (None: a stop was asked in between)."""
    ranks, n_micro, device = run.setup.ranks, run.setup.plan.micro_batches, run.setup.device
    micro, loss_calls = run.setup.settings.micro_batch_size, run.loss
    own_micro_batches = list(range(ranks.rank, n_micro, ranks.world))
    step_loss = torch.zeros((), dtype=torch.float64, device=device)  # no sync per micro
    for n, k in enumerate(own_micro_batches):
        if n > 0 and ranks.any(stop.is_set()):
            return None
        ids = run.blocks.training.rows(idx[k * micro : (k + 1) * micro]).to(device)
        last = n == len(own_micro_batches) - 1
        # DDP syncs the gradients once, on the last micro batch
        no_sync = loss_calls.ddp is not None and not last
        with loss_calls.ddp.no_sync() if no_sync else contextlib.nullcontext():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.setup.bf16):
                loss = loss_calls.training(ids)
            # Equal-length rows: the mean of the micro batches' means is exact. DDP
            # averages over ranks, hence x world: the sum = the one-process gradient.
            (loss * (ranks.world / n_micro)).backward()
        step_loss += loss.detach().double() / n_micro
    return step_loss


def _update(trainer: ModelTrainer, embeddings_only: bool, max_grad_norm: float) -> None:
    """Clip the gradients and step the optimizer and the schedule."""
    if embeddings_only:  # AdamW skips grad-less parameters: the rest stays bit-identical
        for param in trainer.params:
            if id(param) not in trainer.embedding_ids:
                param.grad = None
    torch.nn.utils.clip_grad_norm_(
        [param for param in trainer.params if param.grad is not None], max_grad_norm
    )
    trainer.optimizer.step()
    trainer.scheduler.step()


# ---------------------------------------------------------------- the run


def train_lapt(
    model_dir: str | Path,
    train_file: str | Path,
    valid_file: str | Path,
    out_dir: str | Path,
    cfg: LaptSettings | dict | None,
    seed: int,
    *,
    log: Callable[[str], None] = print,
    stop_after_steps: int | None = None,
    work_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Continue causal-LM training of ``model_dir`` on ``train_file``; write ``out_dir``.

    ``cfg``: :class:`LaptSettings`, or a dict of them (missing keys take the defaults).
    ``train_file``, ``valid_file`` (and the replay file) are text, tokenised once
    into ``work_dir/blocks/``, or ``.npy`` blocks from :mod:`embtransfer.lapt.blocks`.
    Returns a summary (``status`` "done" or "stopped", steps, losses, tokens/s, peak
    memory). Raises :class:`~embtransfer.lapt.preemption.Preempted` after saving a
    checkpoint on SIGUSR1/SIGTERM or near SLURM's time limit,
    :class:`~embtransfer.lapt.checkpointing.CheckpointError` when a checkpoint that failed
    to load had already overwritten part of the model (a rerun continues without it),
    :class:`~embtransfer.lapt.data.CorpusTooSmallError` for a corpus smaller than one
    global batch and :class:`MicroBatchOOMError` when one micro batch does not fit in memory.
    """
    settings = cfg if isinstance(cfg, LaptSettings) else LaptSettings.from_dict(cfg)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else Path(f"{out_dir}.work")
    work.mkdir(parents=True, exist_ok=True)
    with torch_threads(settings.threads):
        run = set_up_run(model_dir, train_file, valid_file, settings, seed, work, log)
        progress = _start(run, seed)
        wrap_loss(run)
        log_start(run)
        with StopRequest(int(settings.stop_before_end_s), run.setup.log) as stop:
            measured = CallMeasurements(progress.step)
            stopped = _train_steps(run, progress, measured, stop, seed, stop_after_steps)
            if stopped is not None:
                return stopped
        return _finish(run, progress, measured, model_dir, out_dir, seed)


def _train_steps(
    run: TrainingRun,
    progress: Progress,
    measured: CallMeasurements,
    stop: StopRequest,
    seed: int,
    stop_after_steps: int | None,
) -> dict[str, Any] | None:
    """The steps from ``progress.step`` to the plan's end; the summary of a run that
    ``stop_after_steps`` ends early, else None."""
    settings, plan, checkpoint = run.setup.settings, run.setup.plan, run.checkpoint
    total, training = plan.total_steps, run.blocks.training
    batches = GlobalBatches(
        training, settings.global_batch_size, plan.steps_per_epoch, plan.replay_ratio, seed
    )
    while progress.step < total:
        idx = batches.at(progress.step)
        lr = run.trainer.optimizer.param_groups[0]["lr"]
        rng_at_start = rng_state()  # a step stopped midway restarts from here
        step_loss = _train_step(run, progress.step, idx, stop)
        if step_loss is None:
            checkpoint.preempt(
                progress,
                measured,
                rng_at_start,
                f"[lapt] {stop.reason}: stopped between micro batches of step "
                f"{progress.step + 1}; checkpoint saved at step {progress.step} "
                f"in {checkpoint.folder(progress.step)} (the step is redone on resume)",
            )
        measured.count(idx, training.n_target, settings.max_length)
        progress.step += 1
        progress.losses.append(step_loss)
        log_train_loss(run.metrics, progress, measured, lr, max(1, int(settings.log_every)), total)
        with measured.overhead():
            _evaluate_and_checkpoint(run, progress, measured, stop)
        if stop_after_steps is not None and stop_after_steps <= progress.step < total:
            run.setup.log(
                f"[lapt] stop_after_steps: stopping at step {progress.step} without a checkpoint"
            )
            return {"status": "stopped", "step": progress.step, "total_steps": total}
    return None


def _evaluate_and_checkpoint(
    run: TrainingRun, progress: Progress, measured: CallMeasurements, stop: StopRequest
) -> None:
    """After a step: the evaluations that fall on it; a checkpoint when one is due, or
    before stopping when a stop is asked."""
    total, checkpoint = run.setup.plan.total_steps, run.checkpoint
    log_evaluations(
        run.metrics,
        progress,
        run.setup.plan.eval_at.get(progress.step, []),
        functools.partial(_held_out_loss, run),
    )
    if progress.step < total and run.setup.ranks.any(stop.is_set()):
        checkpoint.preempt(
            progress,
            measured,
            rng_state(),
            f"[lapt] {stop.reason}: checkpoint saved at step "
            f"{progress.step} in {checkpoint.folder(progress.step)}; stopping",
        )
    if checkpoint.due(progress.step, measured) and progress.step < total:
        checkpoint.save(progress, measured, rng_state())
        measured.last_save = time.monotonic()


def _held_out_loss(run: TrainingRun) -> float:
    settings = run.setup.settings
    return held_out_loss(
        run.loss.plain,
        run.blocks.valid,
        settings.micro_batch_size,
        settings.eval_batches,
        run.setup.device,
        run.setup.bf16,
    )


# ---------------------------------------------------------------- the end


def _finish(
    run: TrainingRun,
    progress: Progress,
    measured: CallMeasurements,
    model_dir: str | Path,
    out_dir: Path,
    seed: int,
) -> dict[str, Any]:
    """The final metrics line and summary; the output checkpoint; the resume ones removed."""
    setup, plan, training = run.setup, run.setup.plan, run.blocks.training
    final = final_record(progress, measured, setup.device, max(1, int(setup.settings.log_every)))
    run.metrics.record(progress, final)
    summary = {
        "status": "done",
        "total_steps": plan.total_steps,
        "steps_per_epoch": plan.steps_per_epoch,
        "warmup_steps": plan.warmup_steps,
        "target_blocks": training.n_target,
        "replay_blocks": training.n_replay,
        "sequences_this_run": measured.sequences,
        "eval": [r for r in progress.records if "eval_loss" in r],
        **{k: v for k, v in final.items() if k != "final"},
        "seed": seed,
        "config": setup.settings.as_dict(),
        "blocks": {k: blocks_identity(m) for k, m in run.blocks.metas.items()},
    }
    _write_output(run.trainer, setup.settings, setup.ranks, summary, out_dir, model_dir)
    run.checkpoint.discard()
    setup.log(
        f"[lapt] done: {progress.step} steps, final train loss "
        f"{final['final_train_loss']:.4f}, {final['tokens_per_s']:,.0f} tok/s, "
        f"wrote {out_dir}"
    )
    return summary


def _write_output(
    trainer: ModelTrainer,
    settings: LaptSettings,
    ranks: Ranks,
    summary: dict[str, Any],
    out_dir: Path,
    model_dir: str | Path,
) -> None:
    trainer.model.eval()
    model = trainer.model
    if settings.lora is not None:
        model = lora_mod.merge(model, model_dir, settings.lora)
    if not ranks.main:
        return
    with atomic_path(out_dir, directory=True) as tmp:
        save_safetensors(model.to(trainer.saved_dtype), tmp)
        trainer.tokenizer.save_pretrained(tmp)
        # timings and this run's share stay in metrics.jsonl and the log: a resumed or
        # repeated run writes the same bytes
        write_json(tmp / "lapt.json", without_run_values(summary))


# ---------------------------------------------------------------- multi-process entry point


def main(argv: list[str] | None = None) -> None:
    """``python -m embtransfer.lapt.trainer spec.json``: train_lapt with the spec's arguments.

    The spec holds model_dir, train_file, valid_file, out_dir, cfg, seed, work_dir.
    """
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        raise SystemExit("usage: python -m embtransfer.lapt.trainer SPEC.json")
    spec = json.loads(Path(args[0]).read_text())
    train_lapt(
        spec["model_dir"],
        spec["train_file"],
        spec["valid_file"],
        spec["out_dir"],
        spec["cfg"],
        int(spec["seed"]),
        work_dir=spec.get("work_dir"),
        log=lambda msg: print(msg, flush=True),
    )
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
