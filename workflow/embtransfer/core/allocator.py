"""glibc's allocator settings for the run's processes: freed blocks kept for reuse.

A job allocates and frees large buffers again and again: a training or evaluation step its
logits, their log-softmax and its gradient (20 MB each for the default source; 1 GB for a
batch of Gemma 3's logits), a transfer method its blocks of source rows and draws (37-460 MB), OMP
its scores (44 MB a step). glibc serves such a block by mmap above its threshold (128 kB
at first, rising to at most 32 MiB by itself) and trims freed memory at the heap's top
beyond 128 kB, so each time those pages go back to the kernel and fault in again. Blocks up
to 1 GiB served from the heap and 1 GiB of freed heap kept: the default source's 2,000
pretraining steps took 164 s instead of 194 s (at 32 MiB and 256 MiB already, against
glibc's defaults), and eight transfer jobs of `make bench-real` 10 % less than at 32 MiB
and 256 MiB, with half the page faults; the allocator changes no arithmetic
(benchmarks/README.md). A process keeps at most the threshold of freed memory at its
heap's top; blocks above 1 GiB are mapped and returned as before.

glibc reads these variables when a process starts, so setting them changes only the
processes started afterwards: the Snakefile sets them for the jobs, `tests/conftest.py` for
the suite's workers. A value the user set is kept; other C libraries ignore them.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: glibc's variables (mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD) and their values.
SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
}


def keep_freed_memory(env: MutableMapping[str, str] = os.environ) -> None:
    """Set :data:`SETTINGS` in ``env`` (the processes started from it), keeping a value
    already set there."""
    for key, value in SETTINGS.items():
        env.setdefault(key, value)


def current(env: MutableMapping[str, str] = os.environ) -> dict[str, str | None]:
    """The settings as ``env`` has them (None: glibc's default), for the run's record."""
    return {key: env.get(key) for key in SETTINGS}
