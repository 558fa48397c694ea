"""Language-adaptive continual pre-training (LAPT) of a transferred causal LM, resumable.

:func:`train_lapt` continues causal-LM training of a Hugging Face checkpoint on
target-language text (docs/design.md §5) and writes the result, atomically, as a
checkpoint directory (safetensors + tokenizer + ``lapt.json``).

Settings: :class:`embtransfer.lapt.settings.LaptSettings` (the one place of the
defaults; :func:`~embtransfer.lapt.settings.settings_from_config` maps the config's
``lapt`` section onto it), following the SALT paper: max length 1024, lr 1e-5,
linear warmup (5%) then cosine to 0, a global batch of 512 sequences reached by
gradient accumulation, one epoch, bf16 autocast over fp32 master weights where the
device supports it (fp32 on CPU). Weight decay 0.0 (the Hugging Face Trainer default;
the paper names none), AdamW betas (0.9, 0.999), gradient clipping at 1.0.

Memory and speed: SDPA attention; the loss over the vocabulary in chunks
(:mod:`embtransfer.lapt.loss`, never the whole logits); optional activation
checkpointing and ``torch.compile``. Data: packed blocks tokenised once
(:mod:`embtransfer.lapt.blocks`), memory-mapped.

Variants:

* ``embedding_only_steps > 0``: the first optimizer steps update only the input
  and output embeddings (TransInner, Gosal et al.); then all weights train. One
  LR schedule spans both stages.
* ``replay = {"file": english.txt or .npy, "ratio": r}``: a bilingual mix in which a
  fraction ``r`` of the sequences of every epoch are English replay blocks,
  spread evenly through the epoch (see :func:`epoch_order`).
* ``lora = {...}`` (see :mod:`embtransfer.lapt.lora`): LoRA adapters on every linear
  layer with trainable embeddings, merged into a plain checkpoint at the end.

Structure: :func:`train_lapt` is the loop over optimizer steps; :func:`_setup` (model,
blocks, plan, optimizer, identity), :func:`_start` (seed; resume or set aside),
:func:`_train_step`, :func:`_evaluate_due`, :func:`_save` and :func:`_finish` are the
parts it calls, sharing one :class:`_Trainer`; :class:`_Progress` is what a checkpoint
carries across a resume.

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
  (:func:`embtransfer.core.atomic.recover_directory`). The checkpoint is removed once the
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

import contextlib
import datetime
import hashlib
import json
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_model, save_model
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from embtransfer.core.atomic import atomic_path, recover_directory, write_json
from embtransfer.core.logs import without_run_values
from embtransfer.lapt import lora as lora_mod
from embtransfer.lapt.blocks import blocks_for, file_sha256
from embtransfer.lapt.loss import causal_lm_loss
from embtransfer.lapt.settings import LaptSettings

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
    with atomic_path(ckpt, directory=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied weights
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng, tmp / "rng.pt")
        write_json(tmp / "state.json", state)


def _load_checkpoint(ckpt: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                     scheduler: Any) -> dict[str, Any]:
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

    def __enter__(self) -> _StopRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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


def _identity(model_dir: str | Path, metas: dict[str, dict[str, Any]], s: LaptSettings,
              seed: int, total: int) -> dict[str, Any]:
    """What the run continues: a checkpoint resumes only when all of it matches."""
    return json.loads(json.dumps({
        "start_checkpoint_sha256": starting_hash(model_dir),
        "blocks": {k: _blocks_identity(m) for k, m in metas.items()},
        # The replay text is identified by its blocks' hashes, not by its path.
        "settings": {k: ({"ratio": v["ratio"]} if k == "replay" and v else v)
                     for k, v in s.as_dict().items() if k not in _RESUME_FREE},
        "seed": seed, "total_steps": total,
    }))


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

    s: LaptSettings
    plan: _Plan
    ranks: _Ranks
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


def _main_first(ranks: _Ranks, fn: Callable[[], Any]) -> Any:
    """``fn()`` on rank 0, then on the others (what rank 0 writes, they read)."""
    out = None
    for turn in ("main", "others"):
        if (turn == "main") == ranks.main:
            out = fn()
        ranks.barrier()
    return out


def _load_blocks(model: Any, tokenizer: Any, sources: dict[str, str | Path], s: LaptSettings,
                 work: Path, ranks: _Ranks) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Memory-mapped blocks of every text, tokenised once (rank 0 builds, the others wait)."""
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    if max_pos is not None and s.max_length > max_pos:
        raise ValueError(f"max_length {s.max_length} exceeds the model's {max_pos} positions")
    config_eos = getattr(model.config, "eos_token_id", None)

    def build() -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        blocks, metas = {}, {}
        for name, src in sources.items():
            blocks[name], metas[name] = blocks_for(src, tokenizer, config_eos, s.max_length,
                                                   work / "blocks", name)
        return blocks, metas

    blocks, metas = _main_first(ranks, build)
    n_tokens, glob, length = int(metas["train"]["tokens"]), s.global_batch_size, s.max_length
    if n_tokens // length < glob:
        raise CorpusTooSmallError(
            f"{sources['train']}: {n_tokens} tokens, fewer than one global batch "
            f"({glob} sequences x {length} tokens = {glob * length}); lower global_batch_size "
            f"or max_length, or give more text"
        )
    return blocks, metas


def _make_plan(s: LaptSettings, data: _Data, world: int) -> _Plan:
    ratio = float(s.replay.ratio) if s.replay else 0.0
    glob = s.global_batch_size
    per_epoch = data.n_target + (replay_count(data.n_target, ratio) if data.n_replay else 0)
    steps_per_epoch = per_epoch // glob
    total = int(s.max_steps) if s.max_steps is not None else int(s.epochs) * steps_per_epoch
    accum = glob // s.micro_batch_size
    if accum % world:
        raise ValueError(
            f"{accum} micro batches per step (global_batch_size {glob} / micro_batch_size "
            f"{s.micro_batch_size}) do not split evenly over {world} processes"
        )
    eval_at: dict[int, list[float]] = {}
    for frac in s.eval_fractions:
        eval_at.setdefault(min(total, max(1, round(frac * total))), []).append(float(frac))
    return _Plan(total=total, warmup=warmup_steps(total, float(s.warmup_ratio)),
                 steps_per_epoch=steps_per_epoch, accum=accum, ratio=ratio, eval_at=eval_at)


def _setup(model_dir: str | Path, train_file: str | Path, valid_file: str | Path,
           s: LaptSettings, seed: int, work: Path, log: Callable[[str], None]) -> _Trainer:
    """Model, blocks, plan, optimizer and the run's identity; nothing trained or resumed yet."""
    ranks = _Ranks()
    device = ranks.device
    if not ranks.main:
        log = lambda _msg: None  # noqa: E731 - one log, from rank 0
    bf16 = (device.type == "cuda" and torch.cuda.is_bf16_supported()) if s.bf16 == "auto" \
        else bool(s.bf16)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, params, embeddings, saved_dtype = _setup_model(model_dir, s, seed, device)
    sources = {"train": train_file, "valid": valid_file}
    if s.replay:
        sources["replay"] = s.replay.file
    blocks, metas = _load_blocks(model, tokenizer, sources, s, work, ranks)
    data = _Data(blocks["train"], blocks.get("replay"))
    plan = _make_plan(s, data, ranks.world)
    optimizer = torch.optim.AdamW(
        params, lr=float(s.lr), betas=tuple(s.adam_betas), eps=float(s.adam_eps),
        weight_decay=float(s.weight_decay),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i, plan.warmup, plan.total)
    )
    return _Trainer(s=s, plan=plan, ranks=ranks, bf16=bf16, model=model, tokenizer=tokenizer,
                    saved_dtype=saved_dtype, params=params,
                    embedding_ids={id(p) for p in embeddings}, data=data, valid=blocks["valid"],
                    metas=metas, optimizer=optimizer, scheduler=scheduler,
                    identity=_identity(model_dir, metas, s, seed, plan.total), work=work,
                    log=log)


def _wrap_loss(t: _Trainer) -> None:
    """The loss module, and what training calls: it under DDP (several processes), compiled."""
    t.loss_fn = _LossModule(t.model, int(t.s.loss_chunk_rows))
    if t.ranks.world > 1:
        t.ddp = DistributedDataParallel(
            t.loss_fn, device_ids=[t.device.index] if t.device.type == "cuda" else None)
    t.step_fn = t.ddp if t.ddp is not None else t.loss_fn
    if t.s.compile:
        t.step_fn = torch.compile(t.step_fn)


def _log_start(t: _Trainer) -> None:
    s, plan, glob = t.s, t.plan, t.s.global_batch_size
    n_params = sum(p.numel() for p in t.params)
    loss = f"in chunks of {s.loss_chunk_rows} tokens" if s.loss_chunk_rows else "on whole logits"
    t.log(f"[lapt] {n_params:,} trained parameters{' (LoRA)' if s.lora else ''}"
          f"{f' on {t.ranks.world} processes' if t.ranks.world > 1 else ''}; "
          f"{t.data.n_target} target + {t.data.n_replay} replay blocks of "
          f"{s.max_length}; {plan.total} steps x {glob} sequences ({plan.accum} x "
          f"{s.micro_batch_size}), warmup {plan.warmup}, "
          f"{'bf16' if t.bf16 else 'fp32'} on {t.device.type}, loss {loss}")


# ---------------------------------------------------------------- resume and checkpoint


def _start(t: _Trainer, seed: int) -> _Progress:
    """Seed the RNGs, then continue the work directory's checkpoint if it is this run's.

    Rank 0 decides and sets a stale checkpoint aside; the others follow. The metrics
    file is rewound to the checkpoint: lines of steps after it will be redone.
    """
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    state = _main_first(t.ranks, lambda: _resume_state(
        t.work, t.identity, t.model, t.optimizer, t.scheduler, t.s.global_batch_size, t.log))
    progress = _Progress()
    if state is not None:
        _set_rng_state(state["_rng"])
        progress = _Progress(step=int(state["step"]), losses=list(state["losses"]),
                             records=list(state["metrics"]),
                             elapsed_before=float(state["elapsed_s"]))
        t.log(f"[lapt] resuming from {t.ckpt} at step {progress.step}/{t.plan.total}")
    if t.ranks.main:
        with atomic_path(t.metrics_file) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in progress.records))
    return progress


def _save(t: _Trainer, p: _Progress, this: _ThisRun, rng: dict[str, Any]) -> None:
    """Checkpoint the state after step ``p.step`` with the RNG state ``rng`` (rank 0 writes)."""
    if t.ranks.main:
        state = {"step": p.step, "sequences_seen": p.step * t.s.global_batch_size,
                 "epoch": p.step // max(1, t.plan.steps_per_epoch), "losses": p.losses,
                 "metrics": p.records, "identity": t.identity,
                 "elapsed_s": p.elapsed_before + this.run_s()}
        _save_checkpoint(t.ckpt, t.model, t.optimizer, t.scheduler, state, rng)
    t.ranks.barrier()


def _checkpoint_due(t: _Trainer, step: int, this: _ThisRun) -> bool:
    # Every rank asks (a collective) unless the step count decides it for all of them.
    return step % max(1, int(t.s.checkpoint_every)) == 0 or t.ranks.any(
        t.s.checkpoint_minutes is not None
        and time.monotonic() - this.last_save >= 60 * float(t.s.checkpoint_minutes))


def _preempt(t: _Trainer, p: _Progress, this: _ThisRun, rng: dict[str, Any],
             msg: str) -> NoReturn:
    """Checkpoint (the step to redo comes with ``rng``), say why, raise :class:`Preempted`."""
    _save(t, p, this, rng)
    t.log(msg)
    raise Preempted(p.step, t.ckpt)


# ---------------------------------------------------------------- metrics and evaluation


def _record(t: _Trainer, p: _Progress, rec: dict[str, Any]) -> None:
    p.records.append(rec)
    if t.ranks.main:
        with open(t.metrics_file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")


def _log_train_loss(t: _Trainer, p: _Progress, this: _ThisRun, lr: float) -> None:
    """Every ``log_every`` steps and at the last: the mean train loss since the last line."""
    every, step, total = max(1, int(t.s.log_every)), p.step, t.plan.total
    if step % every and step != total:
        return
    run_s = this.run_s()
    window = p.losses[(step - 1) // every * every :]
    rec = {"step": step, "train_loss": sum(window) / len(window), "lr": lr,
           "tokens_per_s": this.tokens_per_s(run_s),
           "elapsed_s": round(p.elapsed_before + run_s, 3),
           "eta_s": round(run_s / (step - this.start_step) * (total - step), 1)}
    _record(t, p, rec)
    t.log(f"[lapt] step {step}/{total} loss {rec['train_loss']:.4f} lr {lr:.3e} "
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


def _evaluate_due(t: _Trainer, p: _Progress) -> None:
    """The held-out loss at each of ``eval_fractions`` that falls on this step."""
    for frac in t.plan.eval_at.get(p.step, []):
        ev = _evaluate(t.loss_fn, t.valid, t.s.micro_batch_size, t.s.eval_batches, t.device,
                       t.bf16)
        _record(t, p, {"step": p.step, "eval_loss": ev, "fraction": frac})
        t.log(f"[lapt] eval at {frac:.0%} (step {p.step}): loss {ev:.4f}")


# ---------------------------------------------------------------- one optimizer step


class _Batches:
    """The global batch of each step: a slice of its epoch's order (one epoch cached)."""

    def __init__(self, t: _Trainer, seed: int):
        self.t, self.seed = t, seed
        self.orders: dict[int, np.ndarray] = {}

    def at(self, step: int) -> np.ndarray:
        glob, data = self.t.s.global_batch_size, self.t.data
        epoch, offset = divmod(step * glob, max(1, self.t.plan.steps_per_epoch) * glob)
        if epoch not in self.orders:
            self.orders = {epoch: epoch_order(data.n_target, data.n_replay, self.t.plan.ratio,
                                              self.seed, epoch)}
        return self.orders[epoch][offset : offset + glob]


def _train_step(t: _Trainer, step: int, idx: np.ndarray, stop: _StopRequest) -> float | None:
    """Optimizer step ``step`` (0-based) over the global batch ``idx``; its mean loss.

    Returns None, leaving the weights and optimizer untouched, when a stop is asked
    between two micro batches: the caller checkpoints the state before this step
    and the resumed run redoes the step from its start (same data, same RNG).
    """
    ranks, micro, accum = t.ranks, t.s.micro_batch_size, t.plan.accum
    t.optimizer.zero_grad(set_to_none=True)
    mine = list(range(ranks.rank, accum, ranks.world))  # this rank's micro batches
    step_loss = torch.zeros((), dtype=torch.float64, device=t.device)  # no sync per micro
    try:
        for n, k in enumerate(mine):
            if n > 0 and ranks.any(stop.is_set()):
                t.optimizer.zero_grad(set_to_none=True)
                return None
            ids = t.data.rows(idx[k * micro : (k + 1) * micro]).to(t.device)
            last = n == len(mine) - 1
            sync = t.ddp.no_sync() if (t.ddp is not None and not last) else contextlib.nullcontext()
            with sync:
                with torch.autocast(t.device.type, dtype=torch.bfloat16, enabled=t.bf16):
                    loss = t.step_fn(ids)
                # Equal-length rows: the mean of the micro batches' means is exact. DDP
                # averages over ranks, hence x world: the sum = the one-process gradient.
                (loss * (ranks.world / accum)).backward()
            step_loss += loss.detach().double() / accum
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        raise MicroBatchOOMError(
            f"micro batch of {micro} x {t.s.max_length} tokens does not fit in memory; set a "
            f"smaller micro_batch_size (global_batch_size {t.s.global_batch_size} stays, "
            f"reached by gradient accumulation), or lapt.activation_checkpointing: true"
        ) from exc
    total_loss = ranks.total(float(step_loss))
    if not math.isfinite(total_loss):
        raise FloatingPointError(f"non-finite train loss {total_loss} at step {step + 1}; "
                                 f"{_kept(t.ckpt)}")
    if step < t.s.embedding_only_steps:  # AdamW skips grad-less parameters: the rest stays
        for p in t.params:               # bit-identical
            if id(p) not in t.embedding_ids:
                p.grad = None
    torch.nn.utils.clip_grad_norm_(
        [p for p in t.params if p.grad is not None], float(t.s.max_grad_norm)
    )
    t.optimizer.step()
    t.scheduler.step()
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
    memory). Raises :class:`Preempted` after saving a checkpoint on SIGUSR1/SIGTERM
    or near SLURM's time limit, :class:`CheckpointError` for a corrupt checkpoint,
    :class:`CorpusTooSmallError` for a corpus smaller than one global batch and
    :class:`MicroBatchOOMError` when one micro batch does not fit in memory.
    """
    s = cfg if isinstance(cfg, LaptSettings) else LaptSettings.from_dict(cfg)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else Path(f"{out_dir}.work")
    work.mkdir(parents=True, exist_ok=True)
    with _torch_threads(s.threads):
        t = _setup(model_dir, train_file, valid_file, s, seed, work, log)
        p = _start(t, seed)
        _wrap_loss(t)
        _log_start(t)
        batches, total = _Batches(t, seed), t.plan.total
        with _StopRequest(int(s.stop_before_end_s), t.log) as stop:
            this = _ThisRun(p.step)
            while p.step < total:
                idx = batches.at(p.step)
                lr = t.optimizer.param_groups[0]["lr"]
                rng_at_start = _rng_state()  # a step stopped midway restarts from here
                step_loss = _train_step(t, p.step, idx, stop)
                if step_loss is None:
                    _preempt(t, p, this, rng_at_start,
                             f"[lapt] {stop.reason}: stopped between micro batches of step "
                             f"{p.step + 1}; checkpoint saved at step {p.step} in {t.ckpt} "
                             f"(the step is redone on resume)")
                this.count(idx, t.data.n_target, s.max_length)
                p.step += 1
                p.losses.append(step_loss)
                _log_train_loss(t, p, this, lr)
                with this.overhead():
                    _evaluate_due(t, p)
                    if p.step < total and t.ranks.any(stop.is_set()):
                        _preempt(t, p, this, _rng_state(),
                                 f"[lapt] {stop.reason}: checkpoint saved at step {p.step} in "
                                 f"{t.ckpt}; stopping")
                    if _checkpoint_due(t, p.step, this) and p.step < total:
                        _save(t, p, this, _rng_state())
                        this.last_save = time.monotonic()
                if stop_after_steps is not None and stop_after_steps <= p.step < total:
                    t.log(f"[lapt] stop_after_steps: stopping at step {p.step} without a "
                          f"checkpoint")
                    return {"status": "stopped", "step": p.step, "total_steps": total}
        return _finish(t, p, this, model_dir, out_dir, seed)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _finish(t: _Trainer, p: _Progress, this: _ThisRun, model_dir: str | Path, out_dir: Path,
            seed: int) -> dict[str, Any]:
    """The final metrics line and summary; the output checkpoint; the resume one removed."""
    run_s = this.run_s()
    peak, peak_kind = _peak_memory(t.device)
    tail = p.losses[-max(1, int(t.s.log_every)) :]
    final = {"final": True, "step": p.step,
             "final_train_loss": sum(tail) / max(1, len(tail)),
             "peak_memory_bytes": peak, "peak_memory_kind": peak_kind,
             "tokens_per_s": this.tokens_per_s(run_s),
             "elapsed_s": round(p.elapsed_before + run_s, 3)}
    _record(t, p, final)
    summary = {
        "status": "done", "total_steps": t.plan.total,
        "steps_per_epoch": t.plan.steps_per_epoch, "warmup_steps": t.plan.warmup,
        "target_blocks": t.data.n_target, "replay_blocks": t.data.n_replay,
        "sequences_this_run": this.counts, "eval": [r for r in p.records if "eval_loss" in r],
        **{k: v for k, v in final.items() if k != "final"}, "seed": seed,
        "config": t.s.as_dict(),
        "blocks": {k: _blocks_identity(m) for k, m in t.metas.items()},
    }
    _write_output(t, summary, out_dir, model_dir)
    if t.ranks.main and t.ckpt.exists():
        shutil.rmtree(t.ckpt)  # the final model supersedes it
    t.ranks.barrier()
    t.log(f"[lapt] done: {p.step} steps, final train loss {final['final_train_loss']:.4f}, "
          f"{final['tokens_per_s']:,.0f} tok/s, wrote {out_dir}")
    return summary


def _write_output(t: _Trainer, summary: dict[str, Any], out_dir: Path,
                  model_dir: str | Path) -> None:
    t.model.eval()
    model = t.model
    if t.s.lora is not None:
        model = lora_mod.merge(model, model_dir, t.s.lora)
    if not t.ranks.main:
        return
    with atomic_path(out_dir, directory=True) as tmp:
        model.to(t.saved_dtype).save_pretrained(tmp)
        t.tokenizer.save_pretrained(tmp)
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
            "-m", "embtransfer.lapt.trainer", str(spec_file)]


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
