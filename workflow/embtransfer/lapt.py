"""Language-adaptive continual pre-training (LAPT) of a transferred causal LM, resumable.

:func:`train_lapt` continues causal-LM training of a Hugging Face checkpoint on
target-language text (DESIGN.md §5) and writes the result, atomically, as a
checkpoint directory (safetensors + tokenizer + ``lapt.json``).

Defaults (:data:`DEFAULT_LAPT`) follow the SALT paper: max length 1024, lr 1e-5,
linear warmup (5%) then cosine to 0, a global batch of 512 sequences reached by
gradient accumulation, one epoch, bf16 autocast where the device supports it
(float32 on CPU). Weight decay is 0.0 (the Hugging Face Trainer default; the
paper names none), AdamW betas (0.9, 0.999), gradient clipping at 1.0.

Variants:

* ``embedding_only_steps > 0``: the first optimizer steps update only the input
  and output embeddings (TransInner, Gosal et al.); then all weights train. One
  LR schedule spans both stages.
* ``replay = {"file": english.txt, "ratio": r}``: a bilingual mix in which a
  fraction ``r`` of the sequences of every epoch are English replay blocks,
  spread evenly through the epoch (see :func:`epoch_order`).
* ``lora = {...}`` (see :mod:`embtransfer.lora`): LoRA adapters on every linear
  layer with trainable embeddings, merged into a plain checkpoint at the end.

Several processes (``accelerate launch`` / ``torchrun`` set ``WORLD_SIZE``): each
rank runs its share of every global batch's micro batches, the gradients are
summed across ranks before the optimizer step, and rank 0 alone writes metrics,
checkpoints and the output, so N processes follow the same trajectory as one.

Work directory (``work_dir``, default ``out_dir + ".work"``):

* ``metrics.jsonl``: one JSON line per logging step (``step``, ``train_loss``,
  ``lr``, ``tokens_per_s`` (training only, without eval/checkpoint time), ``elapsed_s``,
  ``eta_s``), one per evaluation
  (``{"step", "eval_loss", "fraction"}`` at ``eval_fractions`` of the steps) and a
  final line (``final_train_loss``, ``peak_memory_bytes``, ...).
* ``checkpoint/``: written atomically every ``checkpoint_every`` steps: weights
  (safetensors), optimizer, scheduler and RNG states (``torch.save`` of plain
  tensors/containers, loaded with ``weights_only=True``) and ``state.json`` (step,
  data position, losses and metrics lines so far). A restarted call continues from
  it; the metrics file is rewound to the checkpoint, so the trajectory of a resumed
  run equals that of an uninterrupted one. The checkpoint is removed once the
  final model is written.

Preemption: SIGTERM (SLURM) sets a flag; after the current optimizer step the loop
saves a checkpoint, logs it and raises :class:`Preempted` (the job exits non-zero;
a requeued job resumes). ``stop_after_steps`` instead stops *without* saving,
like a hard kill, and returns ``{"status": "stopped", ...}``: tests use it.
"""

from __future__ import annotations

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from . import lora as lora_mod
from .atomic import atomic_path, write_json
from .world.pretrain import _pack, _read_ids

DEFAULT_LAPT: dict[str, Any] = {
    "max_length": 1024,
    "lr": 1e-5,
    "schedule": "cosine",  # the only one: linear warmup, then cosine to 0
    "warmup_ratio": 0.05,
    "global_batch_size": 512,  # sequences per optimizer step
    "micro_batch_size": 8,  # sequences per forward pass; accumulation = global / micro
    "epochs": 1,
    "max_steps": None,  # None: `epochs` full epochs
    "bf16": "auto",  # "auto": bf16 autocast on a CUDA device that supports it; else fp32
    "weight_decay": 0.0,
    "adam_betas": [0.9, 0.999],
    "adam_eps": 1e-8,
    "max_grad_norm": 1.0,
    "log_every": 10,  # optimizer steps
    "eval_fractions": [0.3, 0.6, 0.9],
    "eval_batches": None,  # micro batches of the valid file per evaluation; None: all
    "checkpoint_every": 100,  # optimizer steps
    "embedding_only_steps": 0,
    "replay": None,  # {"file": path, "ratio": fraction of sequences} or None
    "threads": None,  # torch CPU threads; None: leave torch's setting alone
    "lora": None,  # None: full training; a dict of embtransfer.lora.DEFAULT_LORA keys: LoRA
}

# Keys that may change between a checkpoint and its resumption.
_RESUME_FREE = ("checkpoint_every", "threads", "log_every", "eval_batches", "micro_batch_size")
_CKPT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")


class Preempted(RuntimeError):
    """SIGTERM arrived; a checkpoint was saved at ``step`` in ``checkpoint``."""

    def __init__(self, step: int, checkpoint: Path):
        super().__init__(f"preempted at step {step}; checkpoint saved in {checkpoint}")
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


def _blocks(tokenizer: Any, path: str | Path, block: int) -> tuple[torch.Tensor, int]:
    """Packed blocks of ``path`` (documents = lines, eos between) and its token count."""
    docs = _read_ids(tokenizer, path)
    sep = tokenizer.eos_token_id
    n_tokens = sum(len(d) for d in docs) + (len(docs) if sep is not None else 0)
    return _pack(docs, sep, block), n_tokens


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
                     scheduler: Any, state: dict[str, Any]) -> None:
    from safetensors.torch import save_model

    with atomic_path(ckpt, directory=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied weights
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(_rng_state(), tmp / "rng.pt")
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


# ---------------------------------------------------------------- training


@torch.no_grad()
def _evaluate(model: PreTrainedModel, blocks: torch.Tensor, micro: int, n_batches: int | None,
              device: torch.device, bf16: bool) -> float:
    model.eval()
    total, rows = 0.0, 0
    stop = len(blocks) if n_batches is None else min(len(blocks), micro * int(n_batches))
    for start in range(0, stop, micro):
        ids = blocks[start : start + micro].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        total += float(loss) * len(ids)  # packed blocks: same token count per row
        rows += len(ids)
    model.train()
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


def _set_stage(params: list[torch.nn.Parameter], embeddings: list[torch.nn.Parameter],
               embedding_only: bool) -> None:
    # Frozen parameters get no grad, and AdamW skips grad-less parameters entirely
    # (no moment update, no decay), so they stay bit-identical.
    emb = {id(p) for p in embeddings}
    for p in params:
        p.requires_grad_(not embedding_only or id(p) in emb)


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

    def sum_(self, tensors: list[torch.Tensor]) -> None:
        if self.world > 1:
            for t in tensors:
                dist.all_reduce(t)

    def any(self, flag: bool) -> bool:
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


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

    Returns a summary (``status`` "done" or "stopped", steps, losses, tokens/s, peak
    memory). Raises :class:`Preempted` after saving a checkpoint on SIGTERM,
    :class:`CheckpointError` for an unusable checkpoint in the work directory,
    :class:`CorpusTooSmallError` for a corpus smaller than one global batch and
    :class:`MicroBatchOOMError` when one micro batch does not fit in memory.
    """
    cfg = lapt_config(cfg)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else Path(f"{out_dir}.work")
    work.mkdir(parents=True, exist_ok=True)
    ckpt, metrics_file = work / "checkpoint", work / "metrics.jsonl"
    old_threads = torch.get_num_threads()
    if cfg["threads"]:
        torch.set_num_threads(int(cfg["threads"]))

    ranks = _Ranks()
    device = ranks.device
    if not ranks.main:
        log = lambda _msg: None  # noqa: E731 - one log, from rank 0
    if cfg["bf16"] == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    else:
        bf16 = bool(cfg["bf16"])

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # fp32 master weights; bf16 only inside autocast. The output keeps the input dtype.
    lora = cfg["lora"]
    model = lora_mod.load_base(model_dir, lora, device)
    saved_dtype = getattr(AutoConfig.from_pretrained(model_dir), "dtype", None) or torch.float32
    if isinstance(saved_dtype, str):
        saved_dtype = getattr(torch, saved_dtype)
    embeddings = lora_mod.embedding_params(model)
    if lora is not None:
        torch.manual_seed(seed)  # the adapters' initialisation comes from the seed
        model = lora_mod.add_adapters(model, lora)
    # The parameters this run trains (all, or adapters + embeddings for LoRA), in a
    # fixed order for the optimizer state of a resumed run.
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    length, glob, micro = int(cfg["max_length"]), int(cfg["global_batch_size"]), int(
        cfg["micro_batch_size"]
    )
    if max_pos is not None and length > max_pos:
        raise ValueError(f"max_length {length} exceeds the model's {max_pos} positions")

    # -- data
    target, n_tokens = _blocks(tokenizer, train_file, length)
    if n_tokens // length < glob:
        raise CorpusTooSmallError(
            f"{train_file}: {n_tokens} tokens, fewer than one global batch "
            f"({glob} sequences x {length} tokens = {glob * length}); lower global_batch_size "
            f"or max_length, or give more text"
        )
    ratio = float(cfg["replay"]["ratio"]) if cfg["replay"] else 0.0
    if ratio > 0:
        replay, _ = _blocks(tokenizer, cfg["replay"]["file"], length)
        blocks = torch.cat([target, replay])
    else:
        replay, blocks = target[:0], target
    valid, _ = _blocks(tokenizer, valid_file, length)
    n_target = len(target)
    per_epoch = n_target + (replay_count(n_target, ratio) if len(replay) else 0)
    steps_per_epoch = per_epoch // glob  # the last partial batch of an epoch is dropped
    total = int(cfg["max_steps"]) if cfg["max_steps"] is not None else (
        int(cfg["epochs"]) * steps_per_epoch
    )
    warmup = warmup_steps(total, float(cfg["warmup_ratio"]))
    accum = glob // micro
    if accum % ranks.world:
        raise ValueError(
            f"{accum} micro batches per step (global_batch_size {glob} / micro_batch_size "
            f"{micro}) do not split evenly over {ranks.world} processes"
        )
    eval_at: dict[int, list[float]] = {}
    for frac in cfg["eval_fractions"]:
        eval_at.setdefault(min(total, max(1, round(frac * total))), []).append(float(frac))
    emb_steps = int(cfg["embedding_only_steps"])

    # -- optimizer over every parameter (tied ones once), in a fixed order for resuming
    optimizer = torch.optim.AdamW(
        params, lr=float(cfg["lr"]), betas=tuple(cfg["adam_betas"]),
        eps=float(cfg["adam_eps"]), weight_decay=float(cfg["weight_decay"]),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, warmup, total)
    )
    fingerprint = {k: v for k, v in cfg.items() if k not in _RESUME_FREE}
    fingerprint.update(seed=seed, target_blocks=n_target, total_steps=total)

    # -- state: fresh or resumed
    step, losses, records, elapsed_before = 0, [], [], 0.0
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    if ckpt.exists():
        state = _load_checkpoint(ckpt, model, optimizer, scheduler)
        if state.get("fingerprint") != json.loads(json.dumps(fingerprint)):
            raise CheckpointError(
                f"resume checkpoint {ckpt} was written for another config/seed/corpus; "
                f"remove the directory to start from scratch"
            )
        _set_rng_state(state["_rng"])
        step, losses, records = int(state["step"]), list(state["losses"]), list(state["metrics"])
        elapsed_before = float(state["elapsed_s"])
        if int(state["sequences_seen"]) != step * glob:
            raise CheckpointError(f"resume checkpoint {ckpt}: inconsistent data position")
        log(f"[lapt] resuming from {ckpt} at step {step}/{total}")
    # Rewind the metrics to the checkpoint: lines of steps after it will be redone.
    if ranks.main:
        with atomic_path(metrics_file) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    n_params = sum(p.numel() for p in params)
    log(f"[lapt] {n_params:,} trained parameters{' (LoRA)' if lora else ''}"
        f"{f' on {ranks.world} processes' if ranks.world > 1 else ''}; "
        f"{n_target} target + {len(replay)} replay blocks of "
        f"{length}; {total} steps x {glob} sequences ({accum} x {micro}), warmup {warmup}, "
        f"{'bf16' if bf16 else 'fp32'} on {device.type}")

    def record(rec: dict[str, Any]) -> None:
        records.append(rec)
        if ranks.main:
            with open(metrics_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")

    def save_checkpoint() -> None:
        if ranks.main:
            _save_checkpoint(ckpt, model, optimizer, scheduler, state_now())
        ranks.barrier()

    def state_now() -> dict[str, Any]:
        return {"step": step, "sequences_seen": step * glob,
                "epoch": step // max(1, steps_per_epoch), "losses": losses,
                "metrics": records, "fingerprint": fingerprint,
                "elapsed_s": elapsed_before + (time.perf_counter() - t0)}

    # SIGTERM: finish the optimizer step, then checkpoint and stop.
    preempt = threading.Event()
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGTERM, lambda *_: preempt.set())

    counts = {"target": 0, "replay": 0}
    orders: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    tokens = 0
    overhead_s = 0.0  # eval and checkpoint time, kept out of tokens/s
    start_step = step
    try:
        while step < total:
            pos = step * glob
            epoch, offset = divmod(pos, max(1, steps_per_epoch) * glob)
            if epoch not in orders:
                orders = {epoch: epoch_order(n_target, len(replay), ratio, seed, epoch)}
            idx = torch.from_numpy(orders[epoch][offset : offset + glob])
            n_rep = int((idx >= n_target).sum())
            counts["replay"] += n_rep
            counts["target"] += len(idx) - n_rep
            _set_stage(params, embeddings, step < emb_steps)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            try:
                for k in range(ranks.rank, accum, ranks.world):  # this rank's micro batches
                    ids = blocks[idx[k * micro : (k + 1) * micro]].to(device)
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                        loss = model(input_ids=ids, labels=ids).loss
                    (loss / accum).backward()  # equal-length rows: mean of means is exact
                    step_loss += float(loss.detach()) / accum
            except (torch.OutOfMemoryError, RuntimeError) as exc:
                if not _is_oom(exc):
                    raise
                raise MicroBatchOOMError(
                    f"micro batch of {micro} x {length} tokens does not fit in memory; set a "
                    f"smaller micro_batch_size (global_batch_size {glob} stays, reached by "
                    f"gradient accumulation)"
                ) from exc
            if ranks.world > 1:  # sum over ranks = the one-process gradient and loss
                total_loss = torch.tensor([step_loss], dtype=torch.float64, device=device)
                ranks.sum_([p.grad for p in params if p.grad is not None] + [total_loss])
                step_loss = float(total_loss.item())
            if not math.isfinite(step_loss):
                raise FloatingPointError(f"non-finite train loss at step {step + 1}")
            torch.nn.utils.clip_grad_norm_(
                [p for p in params if p.grad is not None], float(cfg["max_grad_norm"])
            )
            optimizer.step()
            scheduler.step()
            step += 1
            losses.append(step_loss)
            tokens += glob * length

            every = max(1, int(cfg["log_every"]))
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
                ev = _evaluate(model, valid, micro, cfg["eval_batches"], device, bf16)
                record({"step": step, "eval_loss": ev, "fraction": frac})
                log(f"[lapt] eval at {frac:.0%} (step {step}): loss {ev:.4f}")
            if step < total and ranks.any(preempt.is_set()):
                save_checkpoint()
                log(f"[lapt] SIGTERM: checkpoint saved at step {step} in {ckpt}; stopping")
                raise Preempted(step, ckpt)
            if step < total and step % max(1, int(cfg["checkpoint_every"])) == 0:
                save_checkpoint()
            overhead_s += time.perf_counter() - t_extra
            if stop_after_steps is not None and step >= stop_after_steps and step < total:
                log(f"[lapt] stop_after_steps: stopping at step {step} without a checkpoint")
                return {"status": "stopped", "step": step, "total_steps": total}
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
        torch.set_num_threads(old_threads)

    run_s = time.perf_counter() - t0
    peak, peak_kind = _peak_memory(device)
    tail = losses[-max(1, int(cfg["log_every"])) :]
    final = {"final": True, "step": step, "final_train_loss": sum(tail) / max(1, len(tail)),
             "peak_memory_bytes": peak, "peak_memory_kind": peak_kind,
             "tokens_per_s": round(tokens / max(run_s - overhead_s, 1e-9), 1),
             "elapsed_s": round(elapsed_before + run_s, 3)}
    record(final)
    summary = {
        "status": "done", "total_steps": total, "steps_per_epoch": steps_per_epoch,
        "warmup_steps": warmup, "target_blocks": n_target, "replay_blocks": len(replay),
        "sequences_this_run": counts, "eval": [r for r in records if "eval_loss" in r],
        **{k: v for k, v in final.items() if k != "final"}, "seed": seed, "config": cfg,
    }
    model.eval()
    if lora is not None:
        model = lora_mod.merge(model, model_dir, lora)
    if not ranks.main:
        ranks.barrier()
        return summary
    with atomic_path(out_dir, directory=True) as tmp:
        model.to(saved_dtype).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not any(tmp.glob("*.safetensors")):
            raise RuntimeError(f"save_pretrained wrote no safetensors into {tmp}")
        write_json(tmp / "lapt.json", summary)
    if ckpt.exists():
        shutil.rmtree(ckpt)  # the final model supersedes it
    ranks.barrier()
    log(f"[lapt] done: {step} steps, final train loss {final['final_train_loss']:.4f}, "
        f"{final['tokens_per_s']:,.0f} tok/s, wrote {out_dir}")
    return summary


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
