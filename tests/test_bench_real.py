"""benchmarks/bench_real.py runs every method that real data can feed, and only those."""

import importlib.util
from pathlib import Path

from embtransfer.transfer.catalog import METHODS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_real.py"


def benchmark(name: str):
    """``benchmarks/<name>.py`` loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench():
    return benchmark("bench_real")


def test_bench_real_runs_every_method_without_world_inputs():
    # The stage built every method's inputs but the world's ground truth: a method needing
    # `truth` (world_oracle) stopped the transfer stage on the first target.
    methods = _bench().bench_methods()
    assert not [m for m in methods if "truth" in METHODS[m]["needs"]]
    assert set(methods) == {m for m, spec in METHODS.items() if "truth" not in spec["needs"]}


def test_transfer_jobs_run_every_method_once_per_target_wechsel_before_ofa():
    bench = _bench()
    jobs = bench.transfer_jobs()
    methods = bench.bench_methods()
    runs = [(target, m) for target, ms in jobs for m in ms]
    assert len(runs) == len(set(runs))  # no method twice on a target
    for target in bench.METHOD_TARGETS:
        assert sorted(m for t, m in runs if t == target) == sorted(methods)
        # OFA reuses the neighbours WECHSEL searched only within one worker's job
        assert (target, ("wechsel", "ofa")) in jobs
    others = [t for t in bench.TARGETS if t not in bench.METHOD_TARGETS]
    assert [(t, m) for t, m in runs if t in others] == [(t, bench.KEPT_METHOD) for t in others]


def _threads_of(work, args, job):
    import os

    import torch

    return job * 2, os.environ["OMP_NUM_THREADS"], torch.get_num_threads(), os.getpid()


def test_in_workers_keeps_job_order_in_one_thread_workers(tmp_path, monkeypatch):
    # spawned workers import the functions' modules by name: the script and this test
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import bench_real as bench
    import test_bench_real

    jobs = list(range(7))
    out = bench.in_workers(test_bench_real._threads_of, tmp_path, None, jobs)
    assert [o[0] for o in out] == [j * 2 for j in jobs]
    assert {o[1:3] for o in out} == {("1", 1)}
    assert 1 <= len({o[3] for o in out}) <= bench.WORKERS
    assert bench.WORKER_PEAKS and bench.WORKER_PEAKS[-1] > 0
