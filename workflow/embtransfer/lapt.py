"""Language-adaptive continual pre-training (LAPT) of a transferred causal LM, resumable.

:func:`train_lapt` continues causal-LM training of a Hugging Face checkpoint on
target-language text (docs/design.md §5) and writes the result, atomically, as a
checkpoint directory (safetensors + tokenizer + ``lapt.json``).

Settings: :class:`LaptSettings` (defaults in one place, :data:`DEFAULT_LAPT` is its
dict), following the SALT paper: max length 1024, lr 1e-5, linear warmup (5%) then
cosine to 0, a global batch of 512 sequences reached by gradient accumulation, one
epoch, bf16 autocast over fp32 master weights where the device supports it (fp32 on
CPU). Weight decay 0.0 (the Hugging Face Trainer default; the paper names none),
AdamW betas (0.9, 0.999), gradient clipping at 1.0.

Memory and speed: SDPA attention; the loss over the vocabulary in chunks
(:mod:`embtransfer.lapt_loss`, never the whole logits); optional activation
checkpointing and ``torch.compile``. Data: packed blocks tokenised once
(:mod:`embtransfer.lapt_blocks`), memory-mapped.

Variants:

* ``embedding_only_steps > 0``: the first optimizer steps update only the input
  and output embeddings (TransInner, Gosal et al.); then all weights train. One
  LR schedule spans both stages.
* ``replay = {"file": english.txt or .npy, "ratio": r}``: a bilingual mix in which a
  fraction ``r`` of the sequences of every epoch are English replay blocks,
  spread evenly through the epoch (see :func:`epoch_order`).
* ``lora = {...}`` (see :mod:`embtransfer.lora`): LoRA adapters on every linear
  layer with trainable embeddings, merged into a plain checkpoint at the end.

Several processes (``accelerate launch`` / ``torchrun`` set ``WORLD_SIZE``): the
loss module is wrapped in PyTorch DDP; each rank runs its share of every global
batch's micro batches (gradient sync only on its last), the loss is scaled so DDP's
average is the one-process gradient, and rank 0 alone writes metrics, checkpoints
and the output, so N processes follow the same trajectory as one.

Work directory (``work_dir``, default ``out_dir + ".work"``):

* ``metrics.jsonl``: one JSON line per logging step (``step``, ``train_loss``,
  ``lr``, ``tokens_per_s`` (training only, without eval/checkpoint time), ``elapsed_s``,
  ``eta_s``), one per evaluation
  (``{"step", "eval_loss", "fraction"}`` at ``eval_fractions`` of the steps) and a
  final line (``final_train_loss``, ``peak_memory_bytes``, ...).
* ``checkpoint/``: written atomically every ``checkpoint_every`` steps (and every
  ``checkpoint_minutes``): weights (safetensors), optimizer, scheduler and RNG
  states (``torch.save`` of plain tensors/containers, loaded with
  ``weights_only=True``) and ``state.json`` (step, data position, losses, metrics
  lines so far, and the run's identity: starting checkpoint hash, blocks hashes,
  trajectory settings, seed). A restarted call continues from it only when the
  identity matches (else the work directory is set aside as
  ``<work>.stale-<time>-<pid>`` and the run starts fresh, saying why); the metrics
  file is rewound to the checkpoint, so the trajectory of a resumed run equals that
  of an uninterrupted one. An interrupted checkpoint swap is recovered
  (:func:`embtransfer.atomic.recover_directory`). The checkpoint is removed once the
  final model is written.
* ``blocks/``: the packed blocks of text inputs (not of ``.npy`` ones).

Preemption: SIGUSR1 or SIGTERM, or a timer ``stop_before_end_s`` before SLURM's
time limit, sets a flag; between two micro batches the loop drops the unfinished
step, saves a checkpoint of the state before it (with the RNG state of the step's
start, so the resumed run redoes it identically), logs it and raises
:class:`Preempted` (the job exits non-zero; a requeued job resumes).
``stop_after_steps`` instead stops *without* saving, like a hard kill, and returns
``{"status": "stopped", ...}``: tests use it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import random
import resource
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from . import lora as lora_mod
from .atomic import atomic_path, recover_directory, write_json
from .lapt_blocks import blocks_for, file_sha256
from .lapt_loss import causal_lm_loss
from .logs import without_run_values


@dataclass(frozen=True)
class LaptSettings:
    """Every LAPT setting and its default, in one place.

    The keys shared with ``workflow/schemas/lapt.schema.yaml`` have the same defaults
    there (``tests/test_lapt.py`` checks it); the schema adds what only the workflow
    needs (``variant``, ``gpus``, ...), :func:`settings_from_config` maps them here.
    """

    max_length: int = 1024
    lr: float = 1e-5
    schedule: str = "cosine"  # the only one: linear warmup, then cosine to 0
    warmup_ratio: float = 0.05
    global_batch_size: int = 512  # sequences per optimizer step
    micro_batch_size: int = 8  # sequences per forward pass; accumulation = global / micro
    epochs: int = 1
    max_steps: int | None = None  # None: `epochs` full epochs
    bf16: bool | str = "auto"  # "auto": bf16 autocast on a CUDA device that supports it
    weight_decay: float = 0.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    log_every: int = 10  # optimizer steps
    eval_fractions: list[float] = field(default_factory=lambda: [0.3, 0.6, 0.9])
    eval_batches: int | None = None  # micro batches of the valid file per evaluation
    checkpoint_every: int = 100  # optimizer steps
    checkpoint_minutes: float | None = None  # also checkpoint after this much wall time
    stop_before_end_s: int = 900  # under SLURM: checkpoint and stop this long before the limit
    embedding_only_steps: int = 0
    replay: dict[str, Any] | None = None  # {"file": path, "ratio": fraction} or None
    threads: int | None = None  # torch CPU threads; None: leave torch's setting alone
    lora: dict[str, Any] | None = None  # None: full training; embtransfer.lora settings: LoRA
    loss_chunk_rows: int = 1024  # tokens per chunk of the vocabulary loss; 0: whole logits
    activation_checkpointing: bool = False  # recompute layer activations in backward
    compile: bool = False  # torch.compile the model (pays on a GPU; slow to start)
    attn_implementation: str = "sdpa"  # PyTorch scaled_dot_product_attention (flash on GPU)


DEFAULT_LAPT: dict[str, Any] = asdict(LaptSettings())

# Keys that may change between a checkpoint and its resumption: they change speed and
# memory (and float rounding), not the trajectory's definition.
_RESUME_FREE = ("checkpoint_every", "checkpoint_minutes", "stop_before_end_s", "threads",
                "log_every", "eval_batches", "micro_batch_size", "loss_chunk_rows",
                "activation_checkpointing", "compile", "attn_implementation")
_CKPT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")


class Preempted(RuntimeError):
    """A stop was asked (SIGUSR1/SIGTERM, or the job's time limit is near); a checkpoint
    was saved at ``step`` in ``checkpoint``. The job exits non-zero for requeueing."""

    def __init__(self, step: int, checkpoint: Path):
        super().__init__(f"stopped for preemption at step {step}; checkpoint saved in "
                         f"{checkpoint}; rerun (or requeue) to resume")
        self.step = step
        self.checkpoint = checkpoint


class CheckpointError(RuntimeError):
    """A resume checkpoint that cannot be used; never silently replaced by a fresh start."""


class CorpusTooSmallError(ValueError):
    pass


class MicroBatchOOMError(MemoryError):
    pass


# ---------------------------------------------------------------- config, schedule, data


def lapt_config(cfg: dict | None) -> dict[str, Any]:
    unknown = set(cfg or {}) - set(DEFAULT_LAPT)
    if unknown:
        raise ValueError(f"unknown LAPT keys {sorted(unknown)}")
    out = {**DEFAULT_LAPT, **(cfg or {})}
    if int(out["loss_chunk_rows"]) < 0:
        raise ValueError(f"loss_chunk_rows must be >= 0 (0 = whole logits), got "
                         f"{out['loss_chunk_rows']}")
    if out["schedule"] != "cosine":
        raise ValueError(f"unknown schedule {out['schedule']!r}; only 'cosine'")
    g, m = int(out["global_batch_size"]), int(out["micro_batch_size"])
    if g <= 0 or m <= 0 or g % m:
        raise ValueError(
            f"global_batch_size {g} must be a positive multiple of micro_batch_size {m}"
        )
    if out["lora"] is not None:
        out["lora"] = lora_mod.lora_settings(out["lora"])
    replay = out["replay"]
    if replay is not None and not 0.0 <= float(replay["ratio"]) < 1.0:
        raise ValueError(f"replay ratio must lie in [0, 1), got {replay['ratio']}")
    return out


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


# ---------------------------------------------------------------- checkpoint I/O


def _rng_state() -> dict[str, Any]:
    # numpy's and python's states become plain tensors/ints: weights_only-loadable.
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": int(version), "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(("MT19937", np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["gauss"]))
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _save_checkpoint(ckpt: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                     scheduler: Any, state: dict[str, Any], rng: dict[str, Any]) -> None:
    from safetensors.torch import save_model

    with atomic_path(ckpt, directory=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied weights
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng, tmp / "rng.pt")
        write_json(tmp / "state.json", state)


def _load_checkpoint(ckpt: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                     scheduler: Any) -> dict[str, Any]:
    from safetensors.torch import load_model

    missing = [f for f in _CKPT_FILES if not (ckpt / f).is_file()]
    if missing:
        raise CheckpointError(
            f"resume checkpoint {ckpt} is incomplete (missing {missing}); "
            f"remove the directory to start from scratch"
        )
    try:
        state = json.loads((ckpt / "state.json").read_text())
        load_model(model, str(ckpt / "model.safetensors"))
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
        rng = torch.load(ckpt / "rng.pt", weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"resume checkpoint {ckpt} is corrupt ({type(exc).__name__}: {exc}); "
            f"remove the directory to start from scratch"
        ) from exc
    state["_rng"] = rng
    return state


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


@torch.no_grad()
def _evaluate(loss_fn: torch.nn.Module, blocks: np.ndarray, micro: int, n_batches: int | None,
              device: torch.device, bf16: bool) -> float:
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


class _Ranks:
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
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def any(self, flag: bool) -> bool:
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def _slurm_seconds_left() -> float | None:
    """Seconds until this SLURM job's time limit, or None outside SLURM / when unknown."""
    end = os.environ.get("SLURM_JOB_END_TIME")
    if end:
        return float(end) - time.time()
    job = os.environ.get("SLURM_JOB_ID")
    if not job or shutil.which("squeue") is None:
        return None
    import subprocess

    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    days, _, hms = out.rpartition("-")
    parts = hms.split(":")
    if not out or not all(p.isdigit() for p in parts) or (days and not days.isdigit()):
        return None  # UNLIMITED, NOT_SET, ...
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return seconds + 86400 * int(days or 0)


class _StopRequest:
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
        left = _slurm_seconds_left()
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

    def close(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._timer is not None:
            self._timer.cancel()


# ---------------------------------------------------------------- identity and resume


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


def _blocks_identity(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in ("tokenizer_sha256", "corpus_sha256", "max_length",
                                 "separator_id")}


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _differences(old.get(k), new.get(k), f"{where}.{k}" if where else k)
        return out
    return [] if old == new else [where or "identity"]


def _set_aside(work: Path, reason: str, log: Callable[[str], None]) -> Path:
    """Rename ``work`` out of the way (kept, with a note saying why); returns the new name."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = work.with_name(f"{work.name}.stale-{stamp}-{os.getpid()}")
    os.replace(work, aside)
    (aside / "SET_ASIDE.txt").write_text(reason + "\n")
    work.mkdir(parents=True)
    log(f"[lapt] {reason}; the old work directory is kept as {aside}; starting fresh")
    return aside


def _resume_state(work: Path, identity: dict[str, Any], model: PreTrainedModel,
                  optimizer: torch.optim.Optimizer, scheduler: Any, glob: int,
                  log: Callable[[str], None]) -> dict[str, Any] | None:
    """The checkpoint's state when it continues this run; None (after setting aside) if not."""
    ckpt = work / "checkpoint"
    recovered = recover_directory(ckpt)
    if recovered:
        log(f"[lapt] {recovered}")
    if not ckpt.exists():
        return None
    try:
        written_for = json.loads((ckpt / "state.json").read_text()).get("identity")
    except (OSError, ValueError):
        written_for = "unreadable"  # _load_checkpoint names the problem below
    if written_for != "unreadable":
        diff = _differences(written_for, identity) if isinstance(written_for, dict) else [
            "identity (the checkpoint records none)"]
        if diff:
            _set_aside(work, f"{ckpt} was started from other inputs or settings (differs in: "
                             f"{', '.join(diff[:8])})", log)
            return None
    state = _load_checkpoint(ckpt, model, optimizer, scheduler)
    if int(state["sequences_seen"]) != int(state["step"]) * glob:
        raise CheckpointError(f"resume checkpoint {ckpt}: inconsistent data position")
    return state


# ---------------------------------------------------------------- one optimizer step


class _Run:
    """What the step, evaluation and checkpoint functions share."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)


def _train_step(run: Any, idx: np.ndarray, embedding_only: bool,
                stop: _StopRequest) -> float | None:
    """One optimizer step over the global batch ``idx``; its mean loss.

    Returns None, leaving the weights and optimizer untouched, when a stop is asked
    between two micro batches: the caller checkpoints the state before this step
    and the resumed run redoes the step from its start (same data, same RNG).
    """
    ranks, micro, accum = run.ranks, run.micro, run.accum
    run.optimizer.zero_grad(set_to_none=True)
    mine = list(range(ranks.rank, accum, ranks.world))  # this rank's micro batches
    step_loss = torch.zeros((), dtype=torch.float64, device=run.device)  # no sync per micro
    try:
        for n, k in enumerate(mine):
            if n > 0 and ranks.any(stop.is_set()):
                run.optimizer.zero_grad(set_to_none=True)
                return None
            ids = run.data.rows(idx[k * micro : (k + 1) * micro]).to(run.device)
            last = n == len(mine) - 1
            sync = run.ddp.no_sync() if (run.ddp is not None and not last) else _nullcontext()
            with sync:
                with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.bf16):
                    loss = run.loss_fn(ids)
                # Equal-length rows: the mean of the micro batches' means is exact. DDP
                # averages over ranks, hence x world: the sum = the one-process gradient.
                (loss * (ranks.world / accum)).backward()
            step_loss += loss.detach().double() / accum
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        raise MicroBatchOOMError(
            f"micro batch of {micro} x {run.length} tokens does not fit in memory; set a "
            f"smaller micro_batch_size (global_batch_size {run.glob} stays, reached by "
            f"gradient accumulation), or lapt.activation_checkpointing: true"
        ) from exc
    total_loss = ranks.total(float(step_loss))
    if not math.isfinite(total_loss):
        raise FloatingPointError(f"non-finite train loss {total_loss}")
    if embedding_only:  # AdamW skips grad-less parameters: the rest stays bit-identical
        for p in run.params:
            if id(p) not in run.embedding_ids:
                p.grad = None
    torch.nn.utils.clip_grad_norm_(
        [p for p in run.params if p.grad is not None], float(run.s.max_grad_norm)
    )
    run.optimizer.step()
    run.scheduler.step()
    return total_loss


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


# ---------------------------------------------------------------- the trainer


def _setup_model(model_dir: str | Path, s: LaptSettings, seed: int, device: torch.device
                 ) -> tuple[Any, list[torch.nn.Parameter], list[torch.nn.Parameter], torch.dtype]:
    """The model to train (fp32 master weights), its trained and embedding parameters."""
    lora = s.lora
    model = lora_mod.load_base(model_dir, lora, device, attn_implementation=s.attn_implementation)
    saved_dtype = getattr(AutoConfig.from_pretrained(model_dir), "dtype", None) or torch.float32
    if isinstance(saved_dtype, str):
        saved_dtype = getattr(torch, saved_dtype)
    model.config.use_cache = False
    if s.activation_checkpointing:
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
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    return model, params, embeddings, saved_dtype


def train_lapt(
    model_dir: str | Path,
    train_file: str | Path,
    valid_file: str | Path,
    out_dir: str | Path,
    cfg: dict | None,
    seed: int,
    *,
    log: Callable[[str], None] = print,
    stop_after_steps: int | None = None,
    work_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Continue causal-LM training of ``model_dir`` on ``train_file``; write ``out_dir``.

    ``train_file``, ``valid_file`` (and the replay file) are text, tokenised once
    into ``work_dir/blocks/``, or ``.npy`` blocks from :mod:`embtransfer.lapt_blocks`.
    Returns a summary (``status`` "done" or "stopped", steps, losses, tokens/s, peak
    memory). Raises :class:`Preempted` after saving a checkpoint on SIGUSR1/SIGTERM
    or near SLURM's time limit, :class:`CheckpointError` for a corrupt checkpoint,
    :class:`CorpusTooSmallError` for a corpus smaller than one global batch and
    :class:`MicroBatchOOMError` when one micro batch does not fit in memory.
    """
    cfg = lapt_config(cfg)
    s = LaptSettings(**cfg)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else Path(f"{out_dir}.work")
    work.mkdir(parents=True, exist_ok=True)
    old_threads = torch.get_num_threads()
    if s.threads:
        torch.set_num_threads(int(s.threads))
    try:
        return _train(model_dir, train_file, valid_file, out_dir, s, cfg, seed, work, log,
                      stop_after_steps)
    finally:
        torch.set_num_threads(old_threads)


def _train(model_dir: str | Path, train_file: str | Path, valid_file: str | Path, out_dir: Path,
           s: LaptSettings, cfg: dict[str, Any], seed: int, work: Path,
           log: Callable[[str], None], stop_after_steps: int | None) -> dict[str, Any]:
    ranks = _Ranks()
    device = ranks.device
    if not ranks.main:
        log = lambda _msg: None  # noqa: E731 - one log, from rank 0
    bf16 = (device.type == "cuda" and torch.cuda.is_bf16_supported()) if s.bf16 == "auto" \
        else bool(s.bf16)
    ckpt, metrics_file = work / "checkpoint", work / "metrics.jsonl"

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, params, embeddings, saved_dtype = _setup_model(model_dir, s, seed, device)
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    length, glob, micro = s.max_length, s.global_batch_size, s.micro_batch_size
    if max_pos is not None and length > max_pos:
        raise ValueError(f"max_length {length} exceeds the model's {max_pos} positions")

    # -- data: memory-mapped blocks, tokenised once (rank 0 builds, the others wait)
    config_eos = getattr(model.config, "eos_token_id", None)
    sources = {"train": train_file, "valid": valid_file}
    if s.replay:
        sources["replay"] = s.replay["file"]
    blocks: dict[str, np.ndarray] = {}
    metas: dict[str, dict[str, Any]] = {}
    for turn in ("main", "others"):
        if (turn == "main") == ranks.main:
            for name, src in sources.items():
                blocks[name], metas[name] = blocks_for(src, tokenizer, config_eos, length,
                                                       work / "blocks", name)
        ranks.barrier()
    n_tokens = int(metas["train"]["tokens"])
    if n_tokens // length < glob:
        raise CorpusTooSmallError(
            f"{train_file}: {n_tokens} tokens, fewer than one global batch "
            f"({glob} sequences x {length} tokens = {glob * length}); lower global_batch_size "
            f"or max_length, or give more text"
        )
    ratio = float(s.replay["ratio"]) if s.replay else 0.0
    data = _Data(blocks["train"], blocks.get("replay"))
    n_target = data.n_target
    per_epoch = n_target + (replay_count(n_target, ratio) if data.n_replay else 0)
    steps_per_epoch = per_epoch // glob  # the last partial batch of an epoch is dropped
    total = int(s.max_steps) if s.max_steps is not None else int(s.epochs) * steps_per_epoch
    warmup = warmup_steps(total, float(s.warmup_ratio))
    accum = glob // micro
    if accum % ranks.world:
        raise ValueError(
            f"{accum} micro batches per step (global_batch_size {glob} / micro_batch_size "
            f"{micro}) do not split evenly over {ranks.world} processes"
        )
    eval_at: dict[int, list[float]] = {}
    for frac in s.eval_fractions:
        eval_at.setdefault(min(total, max(1, round(frac * total))), []).append(float(frac))

    optimizer = torch.optim.AdamW(
        params, lr=float(s.lr), betas=tuple(s.adam_betas), eps=float(s.adam_eps),
        weight_decay=float(s.weight_decay),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i, warmup, total)
    )
    # What the run continues: a checkpoint resumes only when all of it matches.
    identity = json.loads(json.dumps({
        "start_checkpoint_sha256": starting_hash(model_dir),
        "blocks": {k: _blocks_identity(m) for k, m in metas.items()},
        # The replay text is identified by its blocks' hashes, not by its path.
        "settings": {k: ({"ratio": v["ratio"]} if k == "replay" and v else v)
                     for k, v in cfg.items() if k not in _RESUME_FREE},
        "seed": seed, "total_steps": total,
    }))

    # -- state: fresh or resumed (rank 0 decides and sets aside; the others follow)
    step, losses, records, elapsed_before = 0, [], [], 0.0
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    state = None
    for turn in ("main", "others"):
        if (turn == "main") == ranks.main:
            state = _resume_state(work, identity, model, optimizer, scheduler, glob, log)
        ranks.barrier()
    if state is not None:
        _set_rng_state(state["_rng"])
        step, losses, records = int(state["step"]), list(state["losses"]), list(state["metrics"])
        elapsed_before = float(state["elapsed_s"])
        log(f"[lapt] resuming from {ckpt} at step {step}/{total}")
    # Rewind the metrics to the checkpoint: lines of steps after it will be redone.
    if ranks.main:
        with atomic_path(metrics_file) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records))

    loss_fn: torch.nn.Module = _LossModule(model, int(s.loss_chunk_rows))
    ddp = None
    if ranks.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(loss_fn, device_ids=[device.index] if device.type ==
                                      "cuda" else None)
    step_fn = ddp if ddp is not None else loss_fn
    if s.compile:
        step_fn = torch.compile(step_fn)
    run = _Run(s=s, ranks=ranks, device=device, bf16=bf16, data=data, micro=micro,
               accum=accum, glob=glob, length=length, optimizer=optimizer, scheduler=scheduler,
               params=params, embedding_ids={id(p) for p in embeddings}, loss_fn=step_fn,
               ddp=ddp)
    n_params = sum(p.numel() for p in params)
    log(f"[lapt] {n_params:,} trained parameters{' (LoRA)' if s.lora else ''}"
        f"{f' on {ranks.world} processes' if ranks.world > 1 else ''}; "
        f"{n_target} target + {data.n_replay} replay blocks of "
        f"{length}; {total} steps x {glob} sequences ({accum} x {micro}), warmup {warmup}, "
        f"{'bf16' if bf16 else 'fp32'} on {device.type}, loss "
        f"{f'in chunks of {s.loss_chunk_rows} tokens' if s.loss_chunk_rows else 'on whole logits'}")

    def record(rec: dict[str, Any]) -> None:
        records.append(rec)
        if ranks.main:
            with open(metrics_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")

    def save_checkpoint(rng: dict[str, Any]) -> None:
        if ranks.main:
            state_now = {"step": step, "sequences_seen": step * glob,
                         "epoch": step // max(1, steps_per_epoch), "losses": losses,
                         "metrics": records, "identity": identity,
                         "elapsed_s": elapsed_before + (time.perf_counter() - t0)}
            _save_checkpoint(ckpt, model, optimizer, scheduler, state_now, rng)
        ranks.barrier()

    stop = _StopRequest(int(s.stop_before_end_s), log)
    counts = {"target": 0, "replay": 0}
    orders: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    last_save = time.monotonic()
    tokens = 0
    overhead_s = 0.0  # eval and checkpoint time, kept out of tokens/s
    start_step = step
    try:
        while step < total:
            pos = step * glob
            epoch, offset = divmod(pos, max(1, steps_per_epoch) * glob)
            if epoch not in orders:
                orders = {epoch: epoch_order(n_target, data.n_replay, ratio, seed, epoch)}
            idx = orders[epoch][offset : offset + glob]
            lr = optimizer.param_groups[0]["lr"]
            rng_at_start = _rng_state()  # a step stopped midway restarts from here
            try:
                step_loss = _train_step(run, idx, step < s.embedding_only_steps, stop)
            except FloatingPointError as exc:
                raise FloatingPointError(f"{exc} at step {step + 1}; {_kept(ckpt)}") from exc
            if step_loss is None:
                save_checkpoint(rng_at_start)
                log(f"[lapt] {stop.reason}: stopped between micro batches of step {step + 1}; "
                    f"checkpoint saved at step {step} in {ckpt} (the step is redone on resume)")
                raise Preempted(step, ckpt)
            n_rep = int((idx >= n_target).sum())
            counts["replay"] += n_rep
            counts["target"] += len(idx) - n_rep
            step += 1
            losses.append(step_loss)
            tokens += glob * length

            every = max(1, int(s.log_every))
            if step % every == 0 or step == total:
                run_s = time.perf_counter() - t0
                window = losses[(step - 1) // every * every :]
                rec = {"step": step, "train_loss": sum(window) / len(window), "lr": lr,
                       "tokens_per_s": round(tokens / max(run_s - overhead_s, 1e-9), 1),
                       "elapsed_s": round(elapsed_before + run_s, 3),
                       "eta_s": round(run_s / (step - start_step) * (total - step), 1)}
                record(rec)
                log(f"[lapt] step {step}/{total} loss {rec['train_loss']:.4f} lr {lr:.3e} "
                    f"{rec['tokens_per_s']:,.0f} tok/s eta {rec['eta_s']:.0f}s")
            t_extra = time.perf_counter()
            for frac in eval_at.get(step, []):
                ev = _evaluate(loss_fn, blocks["valid"], micro, s.eval_batches, device, bf16)
                record({"step": step, "eval_loss": ev, "fraction": frac})
                log(f"[lapt] eval at {frac:.0%} (step {step}): loss {ev:.4f}")
            if step < total and ranks.any(stop.is_set()):
                save_checkpoint(_rng_state())
                log(f"[lapt] {stop.reason}: checkpoint saved at step {step} in {ckpt}; stopping")
                raise Preempted(step, ckpt)
            due = step % max(1, int(s.checkpoint_every)) == 0 or ranks.any(
                s.checkpoint_minutes is not None
                and time.monotonic() - last_save >= 60 * float(s.checkpoint_minutes))
            if step < total and due:
                save_checkpoint(_rng_state())
                last_save = time.monotonic()
            overhead_s += time.perf_counter() - t_extra
            if stop_after_steps is not None and step >= stop_after_steps and step < total:
                log(f"[lapt] stop_after_steps: stopping at step {step} without a checkpoint")
                return {"status": "stopped", "step": step, "total_steps": total}
    finally:
        stop.close()

    run_s = time.perf_counter() - t0
    peak, peak_kind = _peak_memory(device)
    tail = losses[-max(1, int(s.log_every)) :]
    final = {"final": True, "step": step, "final_train_loss": sum(tail) / max(1, len(tail)),
             "peak_memory_bytes": peak, "peak_memory_kind": peak_kind,
             "tokens_per_s": round(tokens / max(run_s - overhead_s, 1e-9), 1),
             "elapsed_s": round(elapsed_before + run_s, 3)}
    record(final)
    summary = {
        "status": "done", "total_steps": total, "steps_per_epoch": steps_per_epoch,
        "warmup_steps": warmup, "target_blocks": n_target, "replay_blocks": data.n_replay,
        "sequences_this_run": counts, "eval": [r for r in records if "eval_loss" in r],
        **{k: v for k, v in final.items() if k != "final"}, "seed": seed, "config": cfg,
        "blocks": {k: _blocks_identity(m) for k, m in metas.items()},
    }
    _write_output(model, tokenizer, summary, out_dir, model_dir, s, saved_dtype, ranks)
    if ranks.main and ckpt.exists():
        shutil.rmtree(ckpt)  # the final model supersedes it
    ranks.barrier()
    log(f"[lapt] done: {step} steps, final train loss {final['final_train_loss']:.4f}, "
        f"{final['tokens_per_s']:,.0f} tok/s, wrote {out_dir}")
    return summary


def _kept(ckpt: Path) -> str:
    return (f"the last checkpoint in {ckpt} is kept (a rerun with the same inputs resumes from "
            f"it; change lr or max_grad_norm, or delete {ckpt.parent} to start over)")


def _write_output(model: Any, tokenizer: Any, summary: dict[str, Any], out_dir: Path,
                  model_dir: str | Path, s: LaptSettings, saved_dtype: torch.dtype,
                  ranks: _Ranks) -> None:
    model.eval()
    if s.lora is not None:
        model = lora_mod.merge(model, model_dir, s.lora)
    if not ranks.main:
        return
    with atomic_path(out_dir, directory=True) as tmp:
        model.to(saved_dtype).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not any(tmp.glob("*.safetensors")):
            raise RuntimeError(f"save_pretrained wrote no safetensors into {tmp}")
        # timings and this run's share stay in metrics.jsonl and the log: a resumed or
        # repeated run writes the same bytes
        write_json(tmp / "lapt.json", without_run_values(summary))


# ---------------------------------------------------------------- multi-process entry point


def launch_command(spec_file: str | Path, processes: int, port: int = 29500) -> list[str]:
    """``accelerate launch`` of :func:`main` on ``processes`` processes (one per GPU).

    ``--multi_gpu`` is accelerate's distributed launcher (it sets RANK, WORLD_SIZE,
    ...); without CUDA the ranks talk over gloo, which is how the tests run it.
    """
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
            "--num_processes", str(processes), "--num_machines", "1",
            "--main_process_port", str(port),
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "-m", "embtransfer.lapt", str(spec_file)]


def main(argv: list[str] | None = None) -> None:
    """``python -m embtransfer.lapt spec.json``: train_lapt with the spec's arguments.

    The spec holds model_dir, train_file, valid_file, out_dir, cfg, seed, work_dir.
    """
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        raise SystemExit("usage: python -m embtransfer.lapt SPEC.json")
    spec = json.loads(Path(args[0]).read_text())
    train_lapt(spec["model_dir"], spec["train_file"], spec["valid_file"], spec["out_dir"],
               spec["cfg"], int(spec["seed"]), work_dir=spec.get("work_dir"),
               log=lambda msg: print(msg, flush=True))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()


def settings_from_config(section: dict[str, Any], threads: int | None,
                         replay_file: str | None) -> dict[str, Any]:
    """:func:`train_lapt`'s settings from the config's ``lapt`` section."""
    cfg = {k: section[k] for k in DEFAULT_LAPT if k in section and k not in ("replay", "lora")}
    if section.get("variant") == "lora":
        lora = dict(section.get("lora") or {})
        cfg["lr"] = lora.pop("lr", 1e-4)
        cfg["lora"] = lora
    if section.get("replay"):
        if replay_file is None:
            raise ValueError("lapt.replay is set but no replay text was given")
        cfg["replay"] = {"file": str(replay_file), "ratio": float(section["replay"]["ratio"])}
    cfg["threads"] = threads
    return lapt_config(cfg)
