"""The jobs' allocator settings (embtransfer/core/allocator.py) take effect in the processes
started with them, and a user's own values win."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from embtransfer.core import allocator

#: In a fresh process: malloc SIZE bytes and free it; glibc's mallinfo2 says how much of it
#: was mmap'd (hblkhd) and how much freed memory the heap kept (fordblks).
PROBE = """
import ctypes, json
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
block = libc.malloc(SIZE)
held = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
print(json.dumps({"mmapped": held.hblkhd, "kept_free": freed.fordblks}))
"""


def _probe(env: dict[str, str], size: int) -> dict[str, int]:
    probe = PROBE.replace("SIZE", str(size))
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("size", [20 << 20, 200 << 20])
def test_a_process_started_with_the_settings_keeps_a_large_freed_block(size: int):
    """A training step's 20 MB logits, a transfer method's 200 MB block: above 32 MiB, the
    most glibc's own threshold rises to."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    before = _probe(bare, size)
    assert before["mmapped"] >= size and before["kept_free"] < size  # glibc's default
    tuned = dict(bare)
    allocator.keep_freed_memory(tuned)
    after = _probe(tuned, size)
    assert after["mmapped"] == 0 and after["kept_free"] >= size


def test_a_value_the_user_set_is_kept():
    env = {"MALLOC_TRIM_THRESHOLD_": "0"}
    allocator.keep_freed_memory(env)
    assert env["MALLOC_TRIM_THRESHOLD_"] == "0"
    assert env["MALLOC_MMAP_THRESHOLD_"] == allocator.SETTINGS["MALLOC_MMAP_THRESHOLD_"]
    assert allocator.current(env) == env
