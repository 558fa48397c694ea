"""Benchmark :func:`embtransfer.neighbors.search.compute_neighbors` at paper scale.

50,000 target tokens, 30,000 of them shared, fastText dimension 300, synthetic
vectors. Cases (each in its own subprocess, so peak RSS is per case):

``normal``      clustered Gaussian vectors (realistic, small sparsemax supports)
``degenerate``  one common vector plus tiny noise: near-constant similarities,
                supports of up to every shared token

Prints wall time, process CPU time (user + sys, all threads; wall time suffers
when other processes share the cores), peak RSS and the stats; no assertions. Usage::

    python benchmarks/bench_neighbors.py [--threads 2] [--case normal|degenerate|all]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

N_VOCAB = 50_000
N_SHARED = 30_000
DIM = 300


def make_vectors(case: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if case == "normal":
        centers = rng.standard_normal((2_000, DIM), dtype=np.float32)
        labels = rng.integers(0, centers.shape[0], N_VOCAB)
        return centers[labels] + 0.6 * rng.standard_normal((N_VOCAB, DIM), dtype=np.float32)
    if case == "degenerate":
        common = rng.standard_normal(DIM, dtype=np.float32)
        return common + 1e-3 * rng.standard_normal((N_VOCAB, DIM), dtype=np.float32)
    raise ValueError(case)


def run_case(case: str, threads: int, max_neighbors: int | None) -> dict:
    from embtransfer.neighbors.search import compute_neighbors

    vectors = make_vectors(case)
    missing = np.zeros(N_VOCAB, bool)
    missing[::997] = True  # a few tokens without a vector
    rng = np.random.default_rng(1)
    shared_t = rng.choice(N_VOCAB, N_SHARED, replace=False)
    shared_s = rng.permutation(N_SHARED) + 100
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table, stats = compute_neighbors(
            vectors, missing, shared_t, shared_s, threads=threads, max_neighbors=max_neighbors
        )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "case": case,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "rss_before_gib": round(rss_before, 3),
        "warnings": [str(w.message) for w in caught],
        "stats": stats,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="all", choices=["all", "normal", "degenerate"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-neighbors", type=int, default=1024, help="0: no cap")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cap = args.max_neighbors or None
    if args.child:
        print(json.dumps(run_case(args.case, args.threads, cap)))
        return
    cases = ["normal", "degenerate"] if args.case == "all" else [args.case]
    results = []
    for case in cases:
        cmd = [sys.executable, __file__, "--child", "--case", case]
        cmd += ["--threads", str(args.threads), "--max-neighbors", str(args.max_neighbors)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        results.append(res)
        st = res["stats"]
        print(f"== {case}: {N_VOCAB} tokens, {N_SHARED} shared, dim {DIM}, threads {args.threads}")
        print(
            f"   wall {res['wall_s']:.2f} s (CPU {res['cpu_s']:.2f} s)   "
            f"peak RSS {res['peak_rss_gib']:.2f} GiB "
            f"(inputs alone {res['rss_before_gib']:.2f} GiB)"
        )
        print(
            f"   rows {st['n_with_neighbors']} (+{st['n_missing']} missing), "
            f"fallback {st['fallback_rows']}, degenerate {st['degenerate']}, "
            f"truncated {st['truncated']}"
        )
        print(f"   support {st['support']}   stored k {st['k']}")
        print(
            f"   entries stored {st['entries']:,} (exact supports {st['entries_exact']:,}), "
            f"table {st['table_bytes'] / 2**20:.1f} MiB"
        )
        print(f"   seconds {st['seconds']}")
        for w in res["warnings"]:
            print(f"   warning: {w}")
    if len(results) == 2:
        a, b = results
        print(
            f"== degenerate / normal: time {b['wall_s'] / a['wall_s']:.2f}x, "
            f"peak RSS {b['peak_rss_gib'] / a['peak_rss_gib']:.2f}x"
        )


if __name__ == "__main__":
    main()
