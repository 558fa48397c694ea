"""torch's CPU thread count for one piece of work, restored after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads (at least one), then restore the
    previous count, also on an exception. ``None`` leaves torch's setting alone.

    A job gets its thread count from the scheduler (Snakemake's ``threads``); torch's own
    default, every core of the machine, would oversubscribe cores other jobs hold.
    """
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)
