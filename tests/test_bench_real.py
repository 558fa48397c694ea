"""benchmarks/bench_real.py runs every method that real data can feed, and only those."""

import importlib.util
from pathlib import Path

from embtransfer.transfer.catalog import METHODS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_real.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_real", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_real_runs_every_method_without_world_inputs():
    # The stage built every method's inputs but the world's ground truth: a method needing
    # `truth` (world_oracle) stopped the transfer stage on the first target.
    methods = _bench().bench_methods()
    assert not [m for m in methods if "truth" in METHODS[m]["needs"]]
    assert set(methods) == {m for m, spec in METHODS.items() if "truth" not in spec["needs"]}
