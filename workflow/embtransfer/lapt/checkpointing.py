"""The files of one LAPT checkpoint folder: how they are written, checked and loaded.

A checkpoint folder holds the weights (safetensors), the optimizer, scheduler and RNG
states (``torch.save`` of plain tensors and containers, loaded with ``weights_only=True``),
``state.json`` (step, data position, losses, metrics lines so far, the run's identity) and,
written last, ``manifest.json``: each file's size and sha256. The folder is written under
a temporary name and renamed into place complete (:func:`write_checkpoint`); a folder
without its manifest, or whose files differ from it, is not used
(:func:`verify_checkpoint`). Which folders a run keeps and resumes from is
:mod:`embtransfer.lapt.resume`'s business.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from transformers import PreTrainedModel

from embtransfer.core.atomic import atomic_path, write_json
from embtransfer.lapt.blocks import file_sha256

CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be used.

    ``kind`` names why in a word: ``incomplete`` (no manifest, a file missing) or
    ``corrupt`` (a file differs from its manifest, or does not load). ``touched`` is true
    when loading failed after it had begun to overwrite the model or optimizer.
    """

    def __init__(self, folder: Path, kind: str, detail: str, touched: bool = False):
        super().__init__(f"checkpoint {folder} is {kind}: {detail}")
        self.folder, self.kind, self.detail, self.touched = folder, kind, detail, touched


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


# ---------------------------------------------------------------- one folder's files


def write_checkpoint(folder: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                     scheduler: Any, state: dict[str, Any], rng: dict[str, Any]) -> None:
    """Write ``folder`` whole: every file, then the manifest of the files as written."""
    with atomic_path(folder, directory=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied weights
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng, tmp / "rng.pt")
        write_json(tmp / "state.json", state)
        files = {name: {"bytes": (tmp / name).stat().st_size, "sha256": file_sha256(tmp / name)}
                 for name in CHECKPOINT_FILES}
        write_json(tmp / MANIFEST, {"step": state["step"], "files": files})


def verify_checkpoint(folder: Path) -> None:
    """Raise :class:`CheckpointError` unless every file matches ``folder``'s manifest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = {name: (int(f["bytes"]), str(f["sha256"])) for name, f in manifest["files"].items()}
    except FileNotFoundError:
        raise CheckpointError(folder, "incomplete",
                              f"no {MANIFEST} (its save did not finish)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(folder, "corrupt", f"unreadable {MANIFEST} ({exc})") from None
    unlisted = [name for name in CHECKPOINT_FILES if name not in files]
    if unlisted:
        raise CheckpointError(folder, "corrupt", f"{MANIFEST} does not list {unlisted}")
    for name in CHECKPOINT_FILES:
        path, (size, sha256) = folder / name, files[name]
        if not path.is_file():
            raise CheckpointError(folder, "incomplete", f"{name} is missing")
        if path.stat().st_size != size:
            raise CheckpointError(folder, "corrupt", f"{name} has {path.stat().st_size} bytes, "
                                                     f"its manifest says {size}")
        if file_sha256(path) != sha256:
            raise CheckpointError(folder, "corrupt", f"{name}'s sha256 differs from its manifest")


def read_state(folder: Path) -> dict[str, Any]:
    """``state.json`` of ``folder`` (step, progress, the identity it was written for)."""
    try:
        return json.loads((folder / "state.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(folder, "corrupt", f"unreadable state.json ({exc})") from None


def load_checkpoint(folder: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer,
                    scheduler: Any) -> dict[str, Any]:
    """Load weights, optimizer and scheduler; the state, with the RNG state under ``_rng``.

    Every file but the weights is read before anything is overwritten, so most failures
    leave the model and optimizer as they were (:attr:`CheckpointError.touched`).
    """
    try:
        state = read_state(folder)
        optimizer_state = torch.load(folder / "optimizer.pt", weights_only=True)
        scheduler_state = torch.load(folder / "scheduler.pt", weights_only=True)
        rng = torch.load(folder / "rng.pt", weights_only=True)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(folder, "corrupt",
                              f"does not load ({type(exc).__name__}: {exc})") from exc
    try:
        optimizer.load_state_dict(optimizer_state)
        scheduler.load_state_dict(scheduler_state)
        load_model(model, str(folder / "model.safetensors"))
    except Exception as exc:
        raise CheckpointError(folder, "corrupt", f"does not load ({type(exc).__name__}: {exc})",
                              touched=True) from exc
    state["_rng"] = rng
    return state
