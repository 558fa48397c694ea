"""The one meaning of a config's ``device: auto`` (the GPU when there is one, else the CPU),
and the dtype a model is evaluated in there."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> str:
    """``device`` as a name torch takes ("cuda", "cpu", "cuda:1"); "auto" picks one."""
    if str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def inference_dtype(device: str) -> str:
    """The dtype a checkpoint is evaluated in on ``device`` (a resolved name): its own
    ("auto") on an accelerator, float32 on the CPU, which emulates half precision without
    bf16 units several times slower (the hand-wired real-scale bench's zero-shot stage on bf16
    checkpoints: 126 s in bf16, 28 s in float32)."""
    return "float32" if str(device).startswith("cpu") else "auto"
