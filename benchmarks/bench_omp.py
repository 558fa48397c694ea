"""OMP's solve at bench-real's pair sizes, and mergekit's ``batch_omp`` on the same inputs.

Random rows (float32, PLM width 768, k = 64) at the non-shared x shared sizes of
``make bench-real``'s three PLMs. Ours runs on every token; the reference (mergekit 0.1.5,
in ``.venv-ref``) in one call on ``--ref-tokens`` tokens (all of them, as mergekit's
tokensurgeon calls it by default, where that is the pair's count), timed there and scaled
linearly to the full count on a slice. Usage: ``python benchmarks/bench_omp.py [--pairs
bert_ar t5_de] [--tokens N] [--ref-tokens 256] [--ref-dtypes float32] [--no-reference]
[--threads 2] [--score-dtype bfloat16|float32]`` (``--tokens``: ours on a slice too, scaled,
less its one-off part, timed on one token: the Gram matrix). The script reruns itself under
``.venv-ref``'s interpreter with ``--as-reference`` for the reference's timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
REF_PYTHON = REPO / ".venv-ref" / "bin" / "python"
#: name -> (non-shared target tokens, shared candidates, PLM width): benchmarks/README.md
PAIRS = {"gpt2_de": (31766, 18234, 768), "bert_ar": (25172, 4828, 768),
         "t5_de": (23948, 8052, 768)}
K = 64


def rows(pair: str) -> tuple[np.ndarray, np.ndarray]:
    n_targets, n_candidates, h = PAIRS[pair]
    rng = np.random.default_rng(0)
    # unequal norms, as trained embeddings have
    cands = rng.standard_normal((n_candidates, h)) * rng.uniform(0.5, 1.5, (n_candidates, 1))
    targets = rng.standard_normal((n_targets, h))
    return targets.astype(np.float32), cands.astype(np.float32)


def reference_seconds(pair: str, n: int, dtype: str) -> tuple[float, float]:
    """Run inside .venv-ref: batch_omp on the first n targets; (wall, CPU) seconds."""
    from mergekit.tokensurgeon import batch_omp

    targets, cands = rows(pair)
    dt = getattr(torch, dtype)
    x = torch.from_numpy(targets[:n]).to(dt)
    d = torch.from_numpy(cands).to(dt)
    start, cpu = time.perf_counter(), time.process_time()
    batch_omp(x, d, K)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--tokens", type=int, default=None,
                        help="time ours on this many tokens and scale linearly (default all)")
    parser.add_argument("--ref-tokens", type=int, default=256)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--ref-dtypes", nargs="+", default=["float32", "float64"],
                        choices=["float32", "float64"], help="the reference's precisions")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads, both sides (CPU seconds are load-robust at 1)")
    parser.add_argument("--score-dtype", choices=["bfloat16", "float32"], default=None,
                        help="the screen's precision (default: the faster here, "
                             "omp_solver.default_score_dtype)")
    parser.add_argument("--as-reference", nargs=3, metavar=("PAIR", "N", "DTYPE"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.as_reference:
        pair, n, dtype = args.as_reference
        print(json.dumps({"seconds": reference_seconds(pair, int(n), dtype)}))
        return

    from bench_workflow import cpu_line

    from embtransfer.transfer.omp_solver import default_score_dtype, omp_select

    dtype = getattr(torch, args.score_dtype) if args.score_dtype else default_score_dtype()
    print(cpu_line(), flush=True)
    print(f"threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}, k {K}, "
          f"screen in {str(dtype).removeprefix('torch.')}", flush=True)
    for pair in args.pairs:
        targets, cands = rows(pair)
        n_ours = min(args.tokens or targets.shape[0], targets.shape[0])
        fixed = fixed_cpu = 0.0
        if n_ours < targets.shape[0]:
            # the one-off part (the Gram matrix): a run on one token, not scaled
            start, cpu = time.perf_counter(), time.process_time()
            omp_select(targets[:1], cands, K, score_dtype=dtype)
            fixed, fixed_cpu = time.perf_counter() - start, time.process_time() - cpu
        scale = (targets.shape[0] - 1) / max(n_ours - 1, 1) if fixed else 1.0
        start, cpu = time.perf_counter(), time.process_time()
        omp_select(targets[:n_ours], cands, K, score_dtype=dtype)
        ours = fixed + (time.perf_counter() - start - fixed) * scale
        ours_cpu = fixed_cpu + (time.process_time() - cpu - fixed_cpu) * scale
        line = (f"{pair}: {targets.shape[0]} targets x {cands.shape[0]} candidates: omp "
                f"{ours:.1f} s wall, {ours_cpu:.1f} s CPU")
        if n_ours < targets.shape[0]:
            line += (f" (scaled from {n_ours} tokens; one-off part {fixed:.1f} s wall, "
                     f"{fixed_cpu:.1f} s CPU)")
        if not args.no_reference and REF_PYTHON.exists():
            n = min(args.ref_tokens, targets.shape[0])
            for dtype in args.ref_dtypes:
                threads = ["--threads", str(args.threads)] if args.threads else []
                out = subprocess.run(
                    [str(REF_PYTHON), __file__, *threads, "--as-reference", pair, str(n), dtype],
                    capture_output=True, text=True, check=True,
                )
                wall, cpu_ref = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
                full, full_cpu = wall * targets.shape[0] / n, cpu_ref * targets.shape[0] / n
                slice_ = "every token" if n == targets.shape[0] else f"{n} tokens scaled"
                line += (f"; batch_omp {dtype} on {slice_}: {full:.0f} s wall, "
                         f"{full_cpu:.0f} s CPU ({full / ours:.1f}x ours in wall time, "
                         f"{full_cpu / ours_cpu:.1f}x in CPU)")
        print(line, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "workflow"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    main()
