"""The one meaning of a config's ``device: auto``: the GPU when there is one, else the CPU."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> str:
    """``device`` as a name torch takes ("cuda", "cpu", "cuda:1"); "auto" picks one."""
    if str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)
