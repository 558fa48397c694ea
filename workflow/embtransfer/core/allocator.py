"""glibc's allocator settings for the run's processes: freed blocks kept for reuse.

A training or evaluation step allocates and frees the same large buffers every step (the
default source LLM's logits, their log-softmax and its gradient: 20 MB each). glibc serves
such a block by mmap above its threshold (128 kB at first) and trims freed memory at the
heap's top beyond 128 kB, so every step hands those pages back to the kernel and faults
them in again. With blocks up to 32 MiB (glibc's most) served from the heap and 256 MiB of
freed heap kept, the default source's 2,000 pretraining steps took 164 s instead of 194 s
and 4 s of system time instead of 33 s, with the same losses: the allocator changes no
arithmetic (benchmarks/README.md, Test suite).

glibc reads these variables when a process starts, so setting them changes only the
processes started afterwards: the Snakefile sets them for the jobs, `tests/conftest.py` for
the suite's workers. A value the user set is kept; other C libraries ignore them.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: glibc's variables (mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD) and their values.
SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
}


def keep_freed_memory(env: MutableMapping[str, str] = os.environ) -> None:
    """Set :data:`SETTINGS` in ``env`` (the processes started from it), keeping a value
    already set there."""
    for key, value in SETTINGS.items():
        env.setdefault(key, value)


def current(env: MutableMapping[str, str] = os.environ) -> dict[str, str | None]:
    """The settings as ``env`` has them (None: glibc's default), for the run's record."""
    return {key: env.get(key) for key in SETTINGS}
