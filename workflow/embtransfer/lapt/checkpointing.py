"""LAPT's resume checkpoint: what it holds, how it is written and read, and whose it is.

The trainer's work directory holds ``checkpoint/``, written atomically every
``checkpoint_every`` steps (and every ``checkpoint_minutes``): weights (safetensors),
optimizer, scheduler and RNG states (``torch.save`` of plain tensors and containers,
loaded with ``weights_only=True``) and ``state.json`` (step, data position, losses,
metrics lines so far, and the run's identity: starting checkpoint hash, blocks hashes,
trajectory settings, seed). A restarted run continues from it only when the identity
matches (:func:`resume_state`); otherwise the work directory is set aside as
``<work>.stale-<time>-<pid>`` with a note saying why, and the run starts fresh. An
interrupted checkpoint swap is recovered (:func:`embtransfer.core.atomic.recover_directory`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from transformers import PreTrainedModel

from embtransfer.core.atomic import atomic_path, recover_directory, write_json
from embtransfer.lapt.blocks import file_sha256
from embtransfer.lapt.settings import LaptSettings

# Keys that may change between a checkpoint and its resumption: they change speed and
# memory (and float rounding), not the trajectory's definition.
RESUME_FREE = ("checkpoint_every", "checkpoint_minutes", "stop_before_end_s", "threads",
               "log_every", "eval_batches", "micro_batch_size", "loss_chunk_rows",
               "activation_checkpointing", "compile", "attn_implementation")
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")


class CheckpointError(RuntimeError):
    """A resume checkpoint that cannot be used; never silently replaced by a fresh start."""


# ---------------------------------------------------------------- RNG state


def rng_state() -> dict[str, Any]:
    """Every RNG's state; numpy's and python's as plain tensors/ints (weights_only-loadable)."""
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


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(("MT19937", np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["gauss"]))
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------- checkpoint I/O


def save_checkpoint(ckpt: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                    scheduler: Any, state: dict[str, Any], rng: dict[str, Any]) -> None:
    with atomic_path(ckpt, directory=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied weights
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng, tmp / "rng.pt")
        write_json(tmp / "state.json", state)


def load_checkpoint(ckpt: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                    scheduler: Any) -> dict[str, Any]:
    """Load weights, optimizer and scheduler; the state, with the RNG state under ``_rng``."""
    missing = [f for f in CHECKPOINT_FILES if not (ckpt / f).is_file()]
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


def _set_aside(work: Path, reason: str, log: Callable[[str], None]) -> Path:
    """Rename ``work`` out of the way (kept, with a note saying why); returns the new name."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = work.with_name(f"{work.name}.stale-{stamp}-{os.getpid()}")
    os.replace(work, aside)
    (aside / "SET_ASIDE.txt").write_text(reason + "\n")
    work.mkdir(parents=True)
    log(f"[lapt] {reason}; the old work directory is kept as {aside}; starting fresh")
    return aside


def resume_state(work: Path, identity: dict[str, Any], model: PreTrainedModel,
                 optimizer: torch.optim.Optimizer, scheduler: Any, global_batch: int,
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
        written_for = "unreadable"  # load_checkpoint names the problem below
    if written_for != "unreadable":
        diff = _differences(written_for, identity) if isinstance(written_for, dict) else [
            "identity (the checkpoint records none)"]
        if diff:
            _set_aside(work, f"{ckpt} was started from other inputs or settings (differs in: "
                             f"{', '.join(diff[:8])})", log)
            return None
    state = load_checkpoint(ckpt, model, optimizer, scheduler)
    if int(state["sequences_seen"]) != int(state["step"]) * global_batch:
        raise CheckpointError(f"resume checkpoint {ckpt}: inconsistent data position")
    return state
