"""What a run's report was computed with: Python, the machine, the packages and the lock.

Written beside the report (``results/report/environment.json``) so that two runs whose
numbers differ can be told apart by their environments (docs/troubleshooting.md,
"Reproducing numbers").
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.markers import Marker

from embtransfer.core import allocator, lockfile
from embtransfer.core.atomic import write_json

#: The packages whose versions can move the numbers (kernels, trainers, tokenizers, the
#: evaluation harness); all installed packages are compared with the lock as well.
KEY_PACKAGES = (
    "torch", "numpy", "scipy", "transformers", "tokenizers", "sentencepiece", "safetensors",
    "fasttext-wheel", "fasttext", "entmax", "peft", "accelerate", "lm_eval", "datasets",
    "pandas", "pyarrow", "snakemake",
)


def environment(lock: Path) -> dict[str, Any]:
    """Python, platform, torch's CPU kernels and threads, key package versions, and the
    lock's digest with every installed package whose version differs from its pin."""
    import torch  # noqa: PLC0415 (heavy; this module is imported by the report job only)

    installed: dict[str, str] = {}
    for dist in metadata.distributions():
        if name := dist.metadata["Name"]:
            installed.setdefault(lockfile.normalise(name), dist.version)
    entries = lockfile.parse_lock(lock.read_text()) if lock.is_file() else []
    # the pins that apply to this Python and platform (each entry's marker says)
    pins = {e.name: e.version for e in entries if e.marker is None or Marker(e.marker).evaluate()}
    off_lock = {
        name: {"installed": installed[name], "lock": pin}
        for name, pin in sorted(pins.items())
        if name in installed and installed[name] != pin
    }
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        # the instruction set torch's CPU kernels were dispatched to (float results differ)
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        # glibc's allocator settings the jobs started with (speed only, not the numbers)
        "allocator": allocator.current(),
        "packages": {
            name: installed[lockfile.normalise(name)]
            for name in KEY_PACKAGES
            if lockfile.normalise(name) in installed
        },
        "lock": {
            "path": lockfile.MAIN_LOCK,
            "entries_sha256": lockfile.lock_digest(lock),
            "installed_off_lock": off_lock,
        },
    }


def write_environment(path: str | os.PathLike, lock: str | os.PathLike) -> None:
    """:func:`environment` as JSON at ``path``."""
    write_json(path, environment(Path(lock)))
