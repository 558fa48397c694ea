"""Compare two runs' results/ trees artifact by artifact: tensors, tables, records.

    python tools/compare_results.py BEFORE/results AFTER/results

Prints every artifact that differs and a summary; exits 1 if any differs. What a refactor
must leave unchanged is the data, so files are compared by content type: safetensors
tensor by tensor (exactly), NumPy arrays exactly, parquet as tables (and their metadata),
JSON and JSONL as data with run-to-run values (timings, peak memory, absolute paths of
temporary files) left out, everything else byte for byte. Logs and Snakemake's benchmark
files hold timings only and are skipped.

Runs on another machine or with other packages differ in their numbers; whether they decide
the same paired tests alike (their comparisons tables, test by test) is what
`python -m embtransfer.report.findings --compare A/results/report B/results/report` says.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# Keys whose values differ from run to run by design (timings, memory, host paths).
VOLATILE_KEYS = {"elapsed_s", "eta_s", "tokens_per_s", "peak_memory_bytes", "seconds",
                 "wall_s", "timestamp", "started", "finished", "date", "time"}
SKIP_DIRS = {"logs"}
ROOTS: list[Path] = []  # the two run directories (results/'s parents), set by main


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _same_json_lines(a: Path, b: Path) -> bool:
    la, lb = a.read_text().splitlines(), b.read_text().splitlines()
    return len(la) == len(lb) and all(
        _strip(json.loads(x)) == _strip(json.loads(y)) for x, y in zip(la, lb, strict=True))


def _same_safetensors(a: Path, b: Path) -> bool:
    from safetensors.numpy import load_file

    ta, tb = load_file(str(a)), load_file(str(b))
    return ta.keys() == tb.keys() and all(
        ta[k].dtype == tb[k].dtype and np.array_equal(ta[k], tb[k]) for k in ta)


def _same_parquet(a: Path, b: Path) -> bool:
    import pyarrow.parquet as pq

    x, y = pq.read_table(a), pq.read_table(b)
    return x.equals(y) and x.schema.metadata == y.schema.metadata


def same(a: Path, b: Path) -> bool:
    """Whether two artifacts hold the same data (see the module docstring)."""
    suffix = a.suffix
    if suffix == ".safetensors":
        return _same_safetensors(a, b)
    if suffix == ".npy":
        return np.array_equal(np.load(a), np.load(b))
    if suffix == ".parquet":
        return _same_parquet(a, b)
    if suffix == ".json":
        return _strip(json.loads(a.read_text())) == _strip(json.loads(b.read_text()))
    if suffix == ".jsonl":
        return _same_json_lines(a, b)
    if suffix in {".yaml", ".md", ".csv", ".txt"}:
        # task configs name their data files by absolute path: compare them relative to the run
        return (a.read_text().replace(str(ROOTS[0]), "<run>")
                == b.read_text().replace(str(ROOTS[1]), "<run>"))
    return a.read_bytes() == b.read_bytes()


def files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in SKIP_DIRS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    ROOTS[:] = [args.before.resolve().parent, args.after.resolve().parent]
    fa, fb = files(args.before), files(args.after)
    differ = sorted(p for p in fa & fb if not same(args.before / p, args.after / p))
    for p in sorted(fa - fb):
        print(f"only before: {p}")
    for p in sorted(fb - fa):
        print(f"only after:  {p}")
    for p in differ:
        print(f"differs:     {p}")
    print(f"{len(fa & fb)} artifacts in both, {len(differ)} differ, "
          f"{len(fa - fb)} only before, {len(fb - fa)} only after")
    return 1 if differ or fa != fb else 0


if __name__ == "__main__":
    sys.exit(main())
