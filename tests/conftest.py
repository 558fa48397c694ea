"""Suite-wide settings: the allocator and torch threads of `make test`'s workers, and the
order in which they take the modules."""

from __future__ import annotations

import os

import pytest
import torch

from embtransfer.core import allocator

# The slowest modules, slowest first (`--durations`, benchmarks/README.md): with
# `--dist loadfile --no-loadscope-reorder` pytest-xdist hands modules out in collection
# order, so the longest start at once on different workers instead of one finishing last.
SLOWEST_FIRST = (
    "test_slurm.py",
    "test_world_knowledge.py",
    "test_faults.py",
    "test_workflow.py",
    "test_evaluation_workflow.py",
    "test_seeds_workflow.py",
    "test_plm_formats.py",
    "test_real_workflow.py",
    "test_lapt.py",
)


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist starts its workers after this: they train models in their own process, so
    # they keep freed blocks as the workflow's jobs do (embtransfer/core/allocator.py).
    allocator.keep_freed_memory()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # One torch thread per worker, as the workflow gives its jobs: `make test` runs a
        # worker per core, and a worker's two threads beside the other worker's wait on each
        # other (the source LLM's fixture took 563 s on two threads, 258 s on one).
        torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as found
