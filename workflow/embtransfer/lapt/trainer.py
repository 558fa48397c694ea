"""Language-adaptive continual pre-training (LAPT) of a transferred causal LM, resumable.

:func:`train_lapt` continues causal-LM training of a Hugging Face checkpoint on
target-language text (docs/design.md §5) and writes the result, atomically, as a
checkpoint directory (safetensors + tokenizer + ``lapt.json``).

Settings: :class:`embtransfer.lapt.settings.LaptSettings` (the one place of the
defaults, the SALT paper's: max length 1024, lr 1e-5, linear warmup (5%) then cosine
to 0, a global batch of 512 sequences reached by gradient accumulation, one epoch,
bf16 autocast over fp32 master weights where the device supports it). Data: packed
blocks tokenised once (:mod:`embtransfer.lapt.blocks`), memory-mapped; the loss over
the vocabulary in chunks (:mod:`embtransfer.lapt.loss`). Variants: an embedding-only
first stage (``embedding_only_steps``), English replay at an exact ratio
(:func:`epoch_order`), LoRA (:mod:`embtransfer.lapt.lora`, merged at the end).

This module is the loop and its parts: :func:`train_lapt` runs over optimizer steps,
calling :func:`_setup` (model, blocks, plan, optimizer, identity), :func:`_start` (seed;
resume or set aside), :func:`_train_step`, :func:`_evaluate_due`, :func:`_save` when a
checkpoint is due and :func:`_finish`, which share one :class:`_Trainer`;
:class:`_Progress` is what a checkpoint carries across a resume. Around it:
:mod:`~embtransfer.lapt.checkpointing` (the work directory's resume checkpoint and the
run's identity), :mod:`~embtransfer.lapt.distributed` (several processes) and
:mod:`~embtransfer.lapt.preemption` (signals and SLURM's time limit).

The work directory (``work_dir``, default ``out_dir + ".work"``) holds ``metrics.jsonl``
(one JSON line per logging step: ``step``, ``train_loss``, ``lr``, ``tokens_per_s``
(training only, without eval/checkpoint time), ``elapsed_s``, ``eta_s``; one per
evaluation: ``{"step", "eval_loss", "fraction"}`` at ``eval_fractions`` of the steps;
and a final line: ``final_train_loss``, ``peak_memory_bytes``, ...), ``checkpoint/``
until the final model is written, and ``blocks/`` (the packed blocks of text inputs).
The metrics file is rewound to the checkpoint on resume, so a resumed run's trajectory
equals an uninterrupted one's. ``stop_after_steps`` stops *without* saving, like a
hard kill, and returns ``{"status": "stopped", ...}``: tests use it.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoConfig, AutoTokenizer

from embtransfer.core.atomic import atomic_path, write_json
from embtransfer.core.logs import without_run_values
from embtransfer.core.threads import torch_threads
from embtransfer.lapt import lora as lora_mod
from embtransfer.lapt.blocks import blocks_for
from embtransfer.lapt.checkpointing import (
    blocks_identity,
    resume_state,
    rng_state,
    run_identity,
    save_checkpoint,
    set_rng_state,
)
from embtransfer.lapt.distributed import Ranks, main_first
from embtransfer.lapt.loss import causal_lm_loss
from embtransfer.lapt.preemption import Preempted, StopRequest
from embtransfer.lapt.settings import LaptSettings


class CorpusTooSmallError(ValueError):
    pass


class MicroBatchOOMError(MemoryError):
    pass


# ---------------------------------------------------------------- schedule, data order


def warmup_steps(total: int, warmup_ratio: float) -> int:
    return math.ceil(total * warmup_ratio)  # as the Hugging Face Trainer rounds it


def lr_factor(step: int, warmup: int, total: int) -> float:
    """LR multiplier of the optimizer step with 0-based index ``step``.

    get_cosine_schedule_with_warmup's formula: linear from 0 over ``warmup`` steps,
    then half a cosine reaching 0 at ``total``.
    """
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def replay_count(n_target: int, ratio: float) -> int:
    """Replay sequences per epoch so that replay / (target + replay) == ratio, rounded."""
    return round(n_target * ratio / (1.0 - ratio)) if ratio > 0 else 0


def epoch_order(n_target: int, n_replay_blocks: int, ratio: float, seed: int,
                epoch: int) -> np.ndarray:
    """Indices into ``cat(target_blocks, replay_blocks)`` for one epoch.

    Every target block once, in a permutation seeded by (seed, epoch); plus
    :func:`replay_count` replay blocks (cycled through permutations if the replay
    file is shorter) at evenly spread positions, so every prefix of the epoch holds
    ``floor(k * n_replay / n)`` of them.
    """
    rng = np.random.default_rng([seed, epoch])
    target = rng.permutation(n_target)
    n_rep = replay_count(n_target, ratio) if n_replay_blocks > 0 else 0
    if n_rep == 0:
        return target
    reps = np.concatenate(
        [rng.permutation(n_replay_blocks) for _ in range(-(-n_rep // n_replay_blocks))]
    )[:n_rep] + n_target
    n = n_target + n_rep
    pos = np.arange(n, dtype=np.int64)
    is_rep = ((pos + 1) * n_rep // n - pos * n_rep // n).astype(bool)
    order = np.empty(n, dtype=np.int64)
    order[is_rep] = reps
    order[~is_rep] = target
    return order


# ---------------------------------------------------------------- training pieces


class _LossModule(torch.nn.Module):
    """The micro batch's mean next-token loss; the module DDP / torch.compile wrap."""

    def __init__(self, model: Any, chunk_rows: int):
        super().__init__()
        self.model = model
        self.chunk_rows = chunk_rows

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.chunk_rows:
            return causal_lm_loss(self.model, ids, self.chunk_rows)
        return self.model(input_ids=ids, labels=ids).loss


class _Data:
    """Target (and replay) blocks, memory-mapped, indexed by one epoch order."""

    def __init__(self, target: np.ndarray, replay: np.ndarray | None):
        self.target, self.replay = target, replay
        self.n_target = len(target)
        self.n_replay = 0 if replay is None else len(replay)

    def rows(self, idx: np.ndarray) -> torch.Tensor:
        out = np.empty((len(idx), self.target.shape[1]), dtype=np.int64)
        is_t = idx < self.n_target
        out[is_t] = self.target[idx[is_t]]
        if not is_t.all():
            out[~is_t] = self.replay[idx[~is_t] - self.n_target]
        return torch.from_numpy(out)


def _peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    # Linux reports ru_maxrss in KiB.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu_max_rss"


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in msg or "can't allocate memory" in msg
    )


# ---------------------------------------------------------------- the run's shared state


@dataclass(frozen=True)
class _Plan:
    """The run's shape, fixed before the first step (a resumed run computes the same)."""

    total: int  # optimizer steps
    warmup: int
    steps_per_epoch: int  # the last partial global batch of an epoch is dropped
    accum: int  # micro batches per optimizer step, over all processes
    ratio: float  # replay share of an epoch
    eval_at: dict[int, list[float]]  # step -> eval fractions that fall on it


@dataclass
class _Progress:
    """What a checkpoint saves and a resume restores (with weights, optimizer and RNG)."""

    step: int = 0
    losses: list[float] = field(default_factory=list)  # one per optimizer step
    records: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl lines so far
    elapsed_before: float = 0.0  # wall time of the runs this one continues


class _ThisRun:
    """What this call measures (timings, tokens, its share of sequences): not resumed."""

    def __init__(self, start_step: int):
        self.start_step = start_step
        self.t0 = time.perf_counter()
        self.last_save = time.monotonic()
        self.tokens = 0
        self.overhead_s = 0.0  # eval and checkpoint time, kept out of tokens/s
        self.counts = {"target": 0, "replay": 0}

    def count(self, idx: np.ndarray, n_target: int, length: int) -> None:
        """A finished step over the global batch ``idx`` (indices >= n_target: replay)."""
        n_rep = int((idx >= n_target).sum())
        self.counts["replay"] += n_rep
        self.counts["target"] += len(idx) - n_rep
        self.tokens += len(idx) * length

    def run_s(self) -> float:
        return time.perf_counter() - self.t0

    def tokens_per_s(self, run_s: float) -> float:
        return round(self.tokens / max(run_s - self.overhead_s, 1e-9), 1)

    @contextlib.contextmanager
    def overhead(self) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.overhead_s += time.perf_counter() - start


@dataclass
class _Trainer:
    """What the step, evaluation, checkpoint and resume functions share."""

    settings: LaptSettings
    plan: _Plan
    ranks: Ranks
    bf16: bool
    model: Any
    tokenizer: Any
    saved_dtype: torch.dtype
    params: list[torch.nn.Parameter]  # trained, in a fixed order (the optimizer state's)
    embedding_ids: set[int]
    data: _Data
    valid: np.ndarray
    metas: dict[str, dict[str, Any]]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    identity: dict[str, Any]
    work: Path
    log: Callable[[str], None]
    loss_fn: torch.nn.Module | None = None  # the plain loss (evaluation)
    step_fn: Any = None  # what a training micro batch calls: loss_fn, DDP-wrapped, compiled
    ddp: Any = None

    @property
    def device(self) -> torch.device:
        return self.ranks.device

    @property
    def ckpt(self) -> Path:
        return self.work / "checkpoint"

    @property
    def metrics_file(self) -> Path:
        return self.work / "metrics.jsonl"


# ---------------------------------------------------------------- setup


def _setup_model(model_dir: str | Path, settings: LaptSettings, seed: int, device: torch.device
                 ) -> tuple[Any, list[torch.nn.Parameter], list[torch.nn.Parameter], torch.dtype]:
    """The model to train (fp32 master weights), its trained and embedding parameters."""
    lora = settings.lora
    model = lora_mod.load_base(model_dir, lora, device,
                               attn_implementation=settings.attn_implementation)
    saved_dtype = getattr(AutoConfig.from_pretrained(model_dir), "dtype", None) or torch.float32
    if isinstance(saved_dtype, str):
        saved_dtype = getattr(torch, saved_dtype)
    model.config.use_cache = False
    if settings.activation_checkpointing:
        kwargs = {"use_reentrant": False}  # keeps the RNG of dropout: same trajectory
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    embeddings = lora_mod.embedding_params(model)
    if lora is not None:
        torch.manual_seed(seed)  # the adapters' initialisation comes from the seed
        model = lora_mod.add_adapters(model, lora)
    # The parameters this run trains (all, or adapters + embeddings for LoRA), in a
    # fixed order for the optimizer state of a resumed run.
    params = [param for param in model.parameters() if param.requires_grad]
    model.train()
    return model, params, embeddings, saved_dtype


def _load_blocks(model: Any, tokenizer: Any, sources: dict[str, str | Path],
                 settings: LaptSettings, work: Path, ranks: Ranks
                 ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Memory-mapped blocks of every text, tokenised once (rank 0 builds, the others wait)."""
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    if max_pos is not None and settings.max_length > max_pos:
        raise ValueError(f"max_length {settings.max_length} exceeds the model's {max_pos} "
                         "positions")
    config_eos = getattr(model.config, "eos_token_id", None)

    def build() -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        blocks, metas = {}, {}
        for name, src in sources.items():
            blocks[name], metas[name] = blocks_for(src, tokenizer, config_eos, settings.max_length,
                                                   work / "blocks", name)
        return blocks, metas

    blocks, metas = main_first(ranks, build)
    n_tokens = int(metas["train"]["tokens"])
    glob, length = settings.global_batch_size, settings.max_length
    if n_tokens // length < glob:
        raise CorpusTooSmallError(
            f"{sources['train']}: {n_tokens} tokens, fewer than one global batch "
            f"({glob} sequences x {length} tokens = {glob * length}); lower global_batch_size "
            f"or max_length, or give more text"
        )
    return blocks, metas


def _make_plan(settings: LaptSettings, data: _Data, world: int) -> _Plan:
    ratio = float(settings.replay.ratio) if settings.replay else 0.0
    glob = settings.global_batch_size
    per_epoch = data.n_target + (replay_count(data.n_target, ratio) if data.n_replay else 0)
    steps_per_epoch = per_epoch // glob
    total = (int(settings.max_steps) if settings.max_steps is not None
             else int(settings.epochs) * steps_per_epoch)
    accum = glob // settings.micro_batch_size
    if accum % world:
        raise ValueError(
            f"{accum} micro batches per step (global_batch_size {glob} / micro_batch_size "
            f"{settings.micro_batch_size}) do not split evenly over {world} processes"
        )
    eval_at: dict[int, list[float]] = {}
    for frac in settings.eval_fractions:
        eval_at.setdefault(min(total, max(1, round(frac * total))), []).append(float(frac))
    return _Plan(total=total, warmup=warmup_steps(total, float(settings.warmup_ratio)),
                 steps_per_epoch=steps_per_epoch, accum=accum, ratio=ratio, eval_at=eval_at)


def _setup(model_dir: str | Path, train_file: str | Path, valid_file: str | Path,
           settings: LaptSettings, seed: int, work: Path, log: Callable[[str], None]) -> _Trainer:
    """Model, blocks, plan, optimizer and the run's identity; nothing trained or resumed yet."""
    ranks = Ranks()
    device = ranks.device
    if not ranks.main:
        log = lambda _msg: None  # noqa: E731 - one log, from rank 0
    bf16 = (device.type == "cuda" and torch.cuda.is_bf16_supported()) if settings.bf16 == "auto" \
        else bool(settings.bf16)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, params, embeddings, saved_dtype = _setup_model(model_dir, settings, seed, device)
    sources = {"train": train_file, "valid": valid_file}
    if settings.replay:
        sources["replay"] = settings.replay.file
    blocks, metas = _load_blocks(model, tokenizer, sources, settings, work, ranks)
    data = _Data(blocks["train"], blocks.get("replay"))
    plan = _make_plan(settings, data, ranks.world)
    optimizer = torch.optim.AdamW(
        params, lr=float(settings.lr), betas=tuple(settings.adam_betas),
        eps=float(settings.adam_eps), weight_decay=float(settings.weight_decay),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i, plan.warmup, plan.total)
    )
    return _Trainer(settings=settings, plan=plan, ranks=ranks, bf16=bf16, model=model,
                    tokenizer=tokenizer, saved_dtype=saved_dtype, params=params,
                    embedding_ids={id(param) for param in embeddings}, data=data,
                    valid=blocks["valid"], metas=metas, optimizer=optimizer, scheduler=scheduler,
                    identity=run_identity(model_dir, metas, settings, seed, plan.total), work=work,
                    log=log)


def _wrap_loss(trainer: _Trainer) -> None:
    """The loss module, and what training calls: it under DDP (several processes), compiled."""
    trainer.loss_fn = _LossModule(trainer.model, int(trainer.settings.loss_chunk_rows))
    if trainer.ranks.world > 1:
        device = trainer.device
        trainer.ddp = DistributedDataParallel(
            trainer.loss_fn, device_ids=[device.index] if device.type == "cuda" else None)
    trainer.step_fn = trainer.ddp if trainer.ddp is not None else trainer.loss_fn
    if trainer.settings.compile:
        trainer.step_fn = torch.compile(trainer.step_fn)


def _log_start(trainer: _Trainer) -> None:
    settings, plan, glob = trainer.settings, trainer.plan, trainer.settings.global_batch_size
    world = trainer.ranks.world
    n_params = sum(param.numel() for param in trainer.params)
    loss = (f"in chunks of {settings.loss_chunk_rows} tokens" if settings.loss_chunk_rows
            else "on whole logits")
    trainer.log(f"[lapt] {n_params:,} trained parameters{' (LoRA)' if settings.lora else ''}"
                f"{f' on {world} processes' if world > 1 else ''}; "
                f"{trainer.data.n_target} target + {trainer.data.n_replay} replay blocks of "
                f"{settings.max_length}; {plan.total} steps x {glob} sequences ({plan.accum} x "
                f"{settings.micro_batch_size}), warmup {plan.warmup}, "
                f"{'bf16' if trainer.bf16 else 'fp32'} on {trainer.device.type}, loss {loss}")


# ---------------------------------------------------------------- resume and checkpoint


def _start(trainer: _Trainer, seed: int) -> _Progress:
    """Seed the RNGs, then continue the work directory's checkpoint if it is this run's.

    Rank 0 decides and sets a stale checkpoint aside; the others follow. The metrics
    file is rewound to the checkpoint: lines of steps after it will be redone.
    """
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    state = main_first(trainer.ranks, lambda: resume_state(
        trainer.work, trainer.identity, trainer.model, trainer.optimizer, trainer.scheduler,
        trainer.settings.global_batch_size, trainer.log))
    progress = _Progress()
    if state is not None:
        set_rng_state(state["_rng"])
        progress = _Progress(step=int(state["step"]), losses=list(state["losses"]),
                             records=list(state["metrics"]),
                             elapsed_before=float(state["elapsed_s"]))
        trainer.log(f"[lapt] resuming from {trainer.ckpt} at step "
                    f"{progress.step}/{trainer.plan.total}")
    if trainer.ranks.main:
        with atomic_path(trainer.metrics_file) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in progress.records))
    return progress


def _save(trainer: _Trainer, progress: _Progress, this_run: _ThisRun,
          rng: dict[str, Any]) -> None:
    """Checkpoint the state after step ``progress.step`` with the RNG state ``rng`` (rank 0
    writes)."""
    if trainer.ranks.main:
        step = progress.step
        state = {"step": step, "sequences_seen": step * trainer.settings.global_batch_size,
                 "epoch": step // max(1, trainer.plan.steps_per_epoch),
                 "losses": progress.losses, "metrics": progress.records,
                 "identity": trainer.identity,
                 "elapsed_s": progress.elapsed_before + this_run.run_s()}
        save_checkpoint(trainer.ckpt, trainer.model, trainer.optimizer, trainer.scheduler, state,
                        rng)
    trainer.ranks.barrier()


def _checkpoint_due(trainer: _Trainer, step: int, this_run: _ThisRun) -> bool:
    # Every rank asks (a collective) unless the step count decides it for all of them.
    settings = trainer.settings
    return step % max(1, int(settings.checkpoint_every)) == 0 or trainer.ranks.any(
        settings.checkpoint_minutes is not None
        and time.monotonic() - this_run.last_save >= 60 * float(settings.checkpoint_minutes))


def _preempt(trainer: _Trainer, progress: _Progress, this_run: _ThisRun, rng: dict[str, Any],
             msg: str) -> NoReturn:
    """Checkpoint (the step to redo comes with ``rng``), say why, raise :class:`Preempted`."""
    _save(trainer, progress, this_run, rng)
    trainer.log(msg)
    raise Preempted(progress.step, trainer.ckpt)


# ---------------------------------------------------------------- metrics and evaluation


def _record(trainer: _Trainer, progress: _Progress, rec: dict[str, Any]) -> None:
    progress.records.append(rec)
    if trainer.ranks.main:
        with open(trainer.metrics_file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")


def _log_train_loss(trainer: _Trainer, progress: _Progress, this_run: _ThisRun,
                    lr: float) -> None:
    """Every ``log_every`` steps and at the last: the mean train loss since the last line."""
    every, step, total = max(1, int(trainer.settings.log_every)), progress.step, trainer.plan.total
    if step % every and step != total:
        return
    run_s = this_run.run_s()
    window = progress.losses[(step - 1) // every * every :]
    rec = {"step": step, "train_loss": sum(window) / len(window), "lr": lr,
           "tokens_per_s": this_run.tokens_per_s(run_s),
           "elapsed_s": round(progress.elapsed_before + run_s, 3),
           "eta_s": round(run_s / (step - this_run.start_step) * (total - step), 1)}
    _record(trainer, progress, rec)
    trainer.log(f"[lapt] step {step}/{total} loss {rec['train_loss']:.4f} lr {lr:.3e} "
                f"{rec['tokens_per_s']:,.0f} tok/s eta {rec['eta_s']:.0f}s")


@torch.no_grad()
def _evaluate(loss_fn: torch.nn.Module, blocks: np.ndarray, micro: int, n_batches: int | None,
              device: torch.device, bf16: bool) -> float:
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


def _evaluate_due(trainer: _Trainer, progress: _Progress) -> None:
    """The held-out loss at each of ``eval_fractions`` that falls on this step."""
    for frac in trainer.plan.eval_at.get(progress.step, []):
        ev = _evaluate(trainer.loss_fn, trainer.valid, trainer.settings.micro_batch_size,
                       trainer.settings.eval_batches, trainer.device, trainer.bf16)
        _record(trainer, progress, {"step": progress.step, "eval_loss": ev, "fraction": frac})
        trainer.log(f"[lapt] eval at {frac:.0%} (step {progress.step}): loss {ev:.4f}")


# ---------------------------------------------------------------- one optimizer step


class _Batches:
    """The global batch of each step: a slice of its epoch's order (one epoch cached)."""

    def __init__(self, trainer: _Trainer, seed: int):
        self.trainer, self.seed = trainer, seed
        self.orders: dict[int, np.ndarray] = {}

    def at(self, step: int) -> np.ndarray:
        glob, data = self.trainer.settings.global_batch_size, self.trainer.data
        epoch, offset = divmod(step * glob, max(1, self.trainer.plan.steps_per_epoch) * glob)
        if epoch not in self.orders:
            self.orders = {epoch: epoch_order(data.n_target, data.n_replay,
                                              self.trainer.plan.ratio, self.seed, epoch)}
        return self.orders[epoch][offset : offset + glob]


def _train_step(trainer: _Trainer, step: int, idx: np.ndarray,
                stop: StopRequest) -> float | None:
    """Optimizer step ``step`` (0-based) over the global batch ``idx``; its mean loss.

    Returns None, leaving the weights and optimizer untouched, when a stop is asked
    between two micro batches: the caller checkpoints the state before this step
    and the resumed run redoes the step from its start (same data, same RNG).
    """
    settings, ranks, accum = trainer.settings, trainer.ranks, trainer.plan.accum
    micro, ddp, device = settings.micro_batch_size, trainer.ddp, trainer.device
    trainer.optimizer.zero_grad(set_to_none=True)
    mine = list(range(ranks.rank, accum, ranks.world))  # this rank's micro batches
    step_loss = torch.zeros((), dtype=torch.float64, device=device)  # no sync per micro
    try:
        for n, k in enumerate(mine):
            if n > 0 and ranks.any(stop.is_set()):
                trainer.optimizer.zero_grad(set_to_none=True)
                return None
            ids = trainer.data.rows(idx[k * micro : (k + 1) * micro]).to(device)
            last = n == len(mine) - 1
            sync = ddp.no_sync() if (ddp is not None and not last) else contextlib.nullcontext()
            with sync:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=trainer.bf16):
                    loss = trainer.step_fn(ids)
                # Equal-length rows: the mean of the micro batches' means is exact. DDP
                # averages over ranks, hence x world: the sum = the one-process gradient.
                (loss * (ranks.world / accum)).backward()
            step_loss += loss.detach().double() / accum
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        raise MicroBatchOOMError(
            f"micro batch of {micro} x {settings.max_length} tokens does not fit in memory; set a "
            f"smaller micro_batch_size (global_batch_size {settings.global_batch_size} stays, "
            f"reached by gradient accumulation), or lapt.activation_checkpointing: true"
        ) from exc
    total_loss = ranks.total(float(step_loss))
    if not math.isfinite(total_loss):
        raise FloatingPointError(f"non-finite train loss {total_loss} at step {step + 1}; "
                                 f"{_kept(trainer.ckpt)}")
    if step < settings.embedding_only_steps:  # AdamW skips grad-less parameters: the rest
        for param in trainer.params:          # stays bit-identical
            if id(param) not in trainer.embedding_ids:
                param.grad = None
    torch.nn.utils.clip_grad_norm_(
        [param for param in trainer.params if param.grad is not None],
        float(settings.max_grad_norm),
    )
    trainer.optimizer.step()
    trainer.scheduler.step()
    return total_loss


def _kept(ckpt: Path) -> str:
    return (f"the last checkpoint in {ckpt} is kept (a rerun with the same inputs resumes from "
            f"it; change lr or max_grad_norm, or delete {ckpt.parent} to start over)")


# ---------------------------------------------------------------- the trainer


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
    :class:`~embtransfer.lapt.checkpointing.CheckpointError` for a corrupt checkpoint,
    :class:`CorpusTooSmallError` for a corpus smaller than one global batch and
    :class:`MicroBatchOOMError` when one micro batch does not fit in memory.
    """
    settings = cfg if isinstance(cfg, LaptSettings) else LaptSettings.from_dict(cfg)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else Path(f"{out_dir}.work")
    work.mkdir(parents=True, exist_ok=True)
    with torch_threads(settings.threads):
        trainer = _setup(model_dir, train_file, valid_file, settings, seed, work, log)
        progress = _start(trainer, seed)
        _wrap_loss(trainer)
        _log_start(trainer)
        batches, total = _Batches(trainer, seed), trainer.plan.total
        with StopRequest(int(settings.stop_before_end_s), trainer.log) as stop:
            this_run = _ThisRun(progress.step)
            while progress.step < total:
                idx = batches.at(progress.step)
                lr = trainer.optimizer.param_groups[0]["lr"]
                rng_at_start = rng_state()  # a step stopped midway restarts from here
                step_loss = _train_step(trainer, progress.step, idx, stop)
                if step_loss is None:
                    _preempt(trainer, progress, this_run, rng_at_start,
                             f"[lapt] {stop.reason}: stopped between micro batches of step "
                             f"{progress.step + 1}; checkpoint saved at step {progress.step} in "
                             f"{trainer.ckpt} (the step is redone on resume)")
                this_run.count(idx, trainer.data.n_target, settings.max_length)
                progress.step += 1
                progress.losses.append(step_loss)
                _log_train_loss(trainer, progress, this_run, lr)
                with this_run.overhead():
                    _evaluate_due(trainer, progress)
                    if progress.step < total and trainer.ranks.any(stop.is_set()):
                        _preempt(trainer, progress, this_run, rng_state(),
                                 f"[lapt] {stop.reason}: checkpoint saved at step "
                                 f"{progress.step} in {trainer.ckpt}; stopping")
                    if _checkpoint_due(trainer, progress.step, this_run) and progress.step < total:
                        _save(trainer, progress, this_run, rng_state())
                        this_run.last_save = time.monotonic()
                if stop_after_steps is not None and stop_after_steps <= progress.step < total:
                    trainer.log(f"[lapt] stop_after_steps: stopping at step {progress.step} "
                                f"without a checkpoint")
                    return {"status": "stopped", "step": progress.step, "total_steps": total}
        return _finish(trainer, progress, this_run, model_dir, out_dir, seed)


def _finish(trainer: _Trainer, progress: _Progress, this_run: _ThisRun, model_dir: str | Path,
            out_dir: Path, seed: int) -> dict[str, Any]:
    """The final metrics line and summary; the output checkpoint; the resume one removed."""
    run_s = this_run.run_s()
    peak, peak_kind = _peak_memory(trainer.device)
    tail = progress.losses[-max(1, int(trainer.settings.log_every)) :]
    final = {"final": True, "step": progress.step,
             "final_train_loss": sum(tail) / max(1, len(tail)),
             "peak_memory_bytes": peak, "peak_memory_kind": peak_kind,
             "tokens_per_s": this_run.tokens_per_s(run_s),
             "elapsed_s": round(progress.elapsed_before + run_s, 3)}
    _record(trainer, progress, final)
    summary = {
        "status": "done", "total_steps": trainer.plan.total,
        "steps_per_epoch": trainer.plan.steps_per_epoch, "warmup_steps": trainer.plan.warmup,
        "target_blocks": trainer.data.n_target, "replay_blocks": trainer.data.n_replay,
        "sequences_this_run": this_run.counts,
        "eval": [r for r in progress.records if "eval_loss" in r],
        **{k: v for k, v in final.items() if k != "final"}, "seed": seed,
        "config": trainer.settings.as_dict(),
        "blocks": {k: blocks_identity(m) for k, m in trainer.metas.items()},
    }
    _write_output(trainer, summary, out_dir, model_dir)
    if trainer.ranks.main and trainer.ckpt.exists():
        shutil.rmtree(trainer.ckpt)  # the final model supersedes it
    trainer.ranks.barrier()
    trainer.log(f"[lapt] done: {progress.step} steps, final train loss "
                f"{final['final_train_loss']:.4f}, {final['tokens_per_s']:,.0f} tok/s, "
                f"wrote {out_dir}")
    return summary


def _write_output(trainer: _Trainer, summary: dict[str, Any], out_dir: Path,
                  model_dir: str | Path) -> None:
    trainer.model.eval()
    model = trainer.model
    if trainer.settings.lora is not None:
        model = lora_mod.merge(model, model_dir, trainer.settings.lora)
    if not trainer.ranks.main:
        return
    with atomic_path(out_dir, directory=True) as tmp:
        model.to(trainer.saved_dtype).save_pretrained(tmp)
        trainer.tokenizer.save_pretrained(tmp)
        if not any(tmp.glob("*.safetensors")):
            raise RuntimeError(f"save_pretrained wrote no safetensors into {tmp}")
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
    train_lapt(spec["model_dir"], spec["train_file"], spec["valid_file"], spec["out_dir"],
               spec["cfg"], int(spec["seed"]), work_dir=spec.get("work_dir"),
               log=lambda msg: print(msg, flush=True))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
