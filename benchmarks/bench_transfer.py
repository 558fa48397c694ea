"""Benchmark SALT's regression and FOCUS's weighted sums at paper scale.

50,000 target tokens, 30,000 of them shared, PLM width h_t = 768, source width
h_s = 2048 (source vocabulary 50,000), neighbour table from
:func:`embtransfer.neighbors.search.compute_neighbors` on synthetic clustered fastText-like
vectors (dim 300; supports of about 5-30). The table is computed once; every case
then runs in its own subprocess, so peak RSS is per case. Cases:

``salt_input``  :func:`embtransfer.transfer.regression.salt_project`, input side
``salt_both``   the same, input and output sides (one solve, two products)
``naive``       per-token ``e_t @ (numpy.linalg.pinv(E'_t) @ E'_s)`` (forms X) on a
                random sample of tokens, extrapolated to all projected tokens; also
                the largest relative difference to ``salt_project`` on the sample
``focus``       ``embtransfer.transfer.methods.focus`` (input side; skipped if not there)
``deepfocus``   the published FOCUS (PyPI ``deepfocus``):
                ``deepfocus.focus.focus_additional_token_initialization`` on the same
                vectors and source rows. That function also computes the cosine
                matrix and the sparsemax per token, so it is compared with the
                neighbour stage plus ``focus``. Skipped when not importable.

Prints wall time, process CPU time, peak RSS and the ratios; no assertions. Usage::

    python benchmarks/bench_transfer.py [--threads 2] [--case all|salt_input|...]
        [--naive-sample 200] [--device auto]
    python benchmarks/bench_transfer.py --gpu    # SALT at paper scale on CUDA (goal <= 1 s)

``--gpu`` runs ``salt_input`` and ``salt_both`` with ``--device cuda``: a first call
(CUDA context, cuSOLVER set-up) and a timed second one, with the peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

N_VOCAB = 50_000
N_SHARED = 30_000
DIM = 300
H_T = 768
H_S = 2048
V_S = 50_000
CASES = ("salt_input", "salt_both", "naive", "focus", "deepfocus")


def fasttext_like(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered Gaussian vectors (as bench_neighbors.py) and a few missing ones."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((2_000, DIM), dtype=np.float32)
    labels = rng.integers(0, centers.shape[0], N_VOCAB)
    vectors = centers[labels] + 0.6 * rng.standard_normal((N_VOCAB, DIM), dtype=np.float32)
    missing = np.zeros(N_VOCAB, bool)
    missing[::997] = True
    vectors[missing] = 0.0
    return vectors, missing


def overlap_pairs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    shared_t = rng.choice(N_VOCAB, N_SHARED, replace=False)
    shared_s = rng.choice(V_S, N_SHARED, replace=False)
    return shared_t, shared_s


def embeddings(seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PLM input rows (V_t, h_t) and source input / output rows (V_s, h_s), float32."""
    rng = np.random.default_rng(seed)
    plm = 0.02 * rng.standard_normal((N_VOCAB, H_T), dtype=np.float32)
    source_in = 0.02 * rng.standard_normal((V_S, H_S), dtype=np.float32)
    source_out = 0.02 * rng.standard_normal((V_S, H_S), dtype=np.float32)
    return plm, source_in, source_out


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def build_table(path: str, threads: int) -> dict:
    from embtransfer.neighbors.search import compute_neighbors, write_neighbors

    vectors, missing = fasttext_like()
    shared_t, shared_s = overlap_pairs()
    t0 = time.perf_counter()
    table, stats = compute_neighbors(vectors, missing, shared_t, shared_s, threads=threads)
    seconds = time.perf_counter() - t0
    write_neighbors(table, stats, path)
    return {"seconds": seconds, "k": stats["k"], "rows": stats["n_with_neighbors"],
            "missing": stats["n_missing"]}


def load_neighbors(path: str):
    from embtransfer.neighbors.search import Neighbors, read_neighbors

    return Neighbors.from_table(read_neighbors(path)[0])


def case_salt(path: str, both: bool, device: str) -> dict:
    from embtransfer.transfer.regression import salt_project

    plm, source_in, source_out = embeddings()
    matrices = {"input": source_in} | ({"output": source_out} if both else {})
    nb = load_neighbors(path)
    before = rss_gib()
    first = None
    if device.startswith("cuda"):
        import torch

        # The first call pays CUDA's context and cuSOLVER's set-up; the figure is the second.
        t0 = time.perf_counter()
        salt_project(plm, matrices, nb, device=device)
        first = time.perf_counter() - t0
        torch.cuda.reset_peak_memory_stats()
    t0, c0 = time.perf_counter(), time.process_time()
    result = salt_project(plm, matrices, nb, device=device)  # numpy out: synchronised
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = result["stats"]
    gpu = ""
    if first is not None:
        import torch

        gpu = (f", {torch.cuda.get_device_name()}, first call {first:.2f} s, peak GPU memory "
               f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    return {"wall_s": wall, "cpu_s": cpu, "rss_before_gib": before, "peak_rss_gib": rss_gib(),
            "note": f"{st['counts']['projected']} projected, k {st['k_used']}, "
                    f"{st['batches']} batches, padding {st['padding_fraction']:.1%}, "
                    f"rank-deficient {st['conditioning']['n_rank_deficient']}, "
                    f"device {st['device']}{gpu}"}


def case_naive(path: str, sample: int, device: str) -> dict:
    from embtransfer.neighbors.search import Neighbors
    from embtransfer.transfer.regression import DEFAULT_RCOND, salt_project

    plm, source_in, _ = embeddings()
    nb = load_neighbors(path)
    eligible = np.flatnonzero(~nb.missing & (nb.k >= 1))
    picked = np.sort(np.random.default_rng(3).choice(eligible, sample, replace=False))
    before = rss_gib()
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in picked:
        r = nb.row(int(i))
        a = plm[nb.neighbor_target_ids[r]].astype(np.float64)
        s = source_in[nb.neighbor_source_ids[r]].astype(np.float64)
        x = np.linalg.pinv(a, rcond=DEFAULT_RCOND) @ s  # the paper's h_t x h_s matrix
        rows.append(plm[nb.target_ids[i]].astype(np.float64) @ x)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = rss_gib()
    # the batched solve on the same tokens, for the accuracy figure
    sel = np.concatenate([np.arange(nb.offsets[i], nb.offsets[i + 1]) for i in picked])
    sub = Neighbors(
        target_ids=nb.target_ids[picked],
        offsets=np.concatenate([[0], np.cumsum(nb.k[picked])]),
        neighbor_target_ids=nb.neighbor_target_ids[sel],
        neighbor_source_ids=nb.neighbor_source_ids[sel],
        similarities=nb.similarities[sel], weights=nb.weights[sel],
        missing=nb.missing[picked],
    )
    fast = salt_project(plm, {"input": source_in}, sub, device=device)
    order = np.argsort(nb.target_ids[picked])
    want = np.stack(rows)[order]
    err = np.linalg.norm(fast["input"] - want, axis=1) / np.linalg.norm(want, axis=1)
    scale = eligible.size / sample
    return {"wall_s": wall * scale, "cpu_s": cpu * scale, "rss_before_gib": before,
            "peak_rss_gib": peak,
            "note": f"{sample} tokens in {wall:.2f} s, extrapolated x{scale:.1f} to "
                    f"{eligible.size}; max relative difference to salt_project "
                    f"{err.max():.2e} (median {np.median(err):.2e})"}


def focus_inputs(path: str):
    import pandas as pd

    from embtransfer.transfer.methods.base import TransferInputs

    plm, source_in, _ = embeddings()
    shared_t, shared_s = overlap_pairs()
    inputs = TransferInputs(
        source_input=source_in, source_output=None,
        source_vocab=pd.DataFrame({"id": np.arange(V_S)}),
        target_vocab=pd.DataFrame({"id": np.arange(N_VOCAB)}),
        overlap=pd.DataFrame({"target_id": shared_t, "source_id": shared_s, "how": "exact"}),
        seed=0, neighbors={"token": load_neighbors(path)},
    )
    return inputs


def case_focus(path: str) -> dict:
    try:
        from embtransfer.transfer.methods import focus  # noqa: F401  (registers "focus")
    except ImportError as err:
        return {"skipped": f"embtransfer.transfer.methods.focus is not importable ({err})"}
    from embtransfer.transfer.methods.base import get_method

    inputs = focus_inputs(path)
    before = rss_gib()
    t0, c0 = time.perf_counter(), time.process_time()
    out = get_method("focus").fn(inputs, {"vectors": "token"}, "input")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    labels, counts = np.unique(out.how.astype(str), return_counts=True)
    np.save(os.path.join(os.path.dirname(path), "focus_rows.npy"), out.rows)
    return {"wall_s": wall, "cpu_s": cpu, "rss_before_gib": before, "peak_rss_gib": rss_gib(),
            "note": ", ".join(f"{k} {v}" for k, v in zip(labels, counts, strict=True))}


def case_deepfocus(path: str) -> dict:
    try:
        import torch
        from deepfocus.focus import focus_additional_token_initialization
        from deepfocus.vocab_helper import NewToken, OverlappingToken, TokenClass
    except ImportError as err:
        return {"skipped": f"deepfocus is not importable ({err}); install it with "
                           "`pip install deepfocus scipy` (pulls numba, fastdist, datasets, "
                           "print-on-steroids; numba's linear algebra needs scipy) or put "
                           "it on PYTHONPATH"}
    vectors, missing = fasttext_like()
    shared_t, shared_s = overlap_pairs()
    _, source_in, _ = embeddings()

    def tok(i: int) -> TokenClass:
        return TokenClass(f"t{i}", int(i), f"t{i}", f"t{i}", f"t{i}", f"t{i}", False)

    order = np.argsort(shared_t)  # deepfocus sorts the overlap by target id
    overlapping = {}
    for t, s in zip(shared_t[order].tolist(), shared_s[order].tolist(), strict=True):
        if not missing[t]:
            overlapping[f"t{t}"] = OverlappingToken(
                source=[tok(s)], target=tok(t), source_embedding=torch.from_numpy(source_in[s]),
                auxiliary_embedding=vectors[t],
            )
    others = np.setdiff1d(np.arange(N_VOCAB), shared_t)
    new = {f"t{t}": NewToken(target=tok(t), auxiliary_embedding=vectors[t])
           for t in others.tolist() if not missing[t]}
    target = torch.zeros((N_VOCAB, H_S))
    before = rss_gib()
    t0, c0 = time.perf_counter(), time.process_time()
    rows = focus_additional_token_initialization(overlapping, new, target, device="cpu")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    note = f"{len(new)} new tokens, {len(overlapping)} candidates"
    ours_path = os.path.join(os.path.dirname(path), "focus_rows.npy")
    if os.path.exists(ours_path):
        ids = np.array([t.target.id for t in new.values()])
        ours = np.load(ours_path)[ids]
        theirs = rows.numpy()[ids]
        diff = np.linalg.norm(ours - theirs, axis=1) / np.linalg.norm(theirs, axis=1)
        note += f"; max relative difference to embtransfer focus {diff.max():.2e}"
    return {"wall_s": wall, "cpu_s": cpu, "rss_before_gib": before, "peak_rss_gib": rss_gib(),
            "note": note}


def run_child(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    if args.case in ("salt_input", "salt_both"):
        return case_salt(args.table, args.case == "salt_both", args.device)
    if args.case == "naive":
        return case_naive(args.table, args.naive_sample, args.device)
    if args.case == "focus":
        return case_focus(args.table)
    return case_deepfocus(args.table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="all", choices=["all", *CASES])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--naive-sample", type=int, default=200)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--gpu", action="store_true", help="SALT cases on CUDA (see the docstring)")
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_child(args)))
        return
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--gpu needs a CUDA device; none is visible here")
        args.device = "cuda"
        cases = ["salt_input", "salt_both"]
    else:
        cases = list(CASES) if args.case == "all" else [args.case]
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "token.parquet")
        info = build_table(table, args.threads)
        print(f"== {N_VOCAB} target tokens, {N_SHARED} shared, h_t {H_T}, h_s {H_S}, "
              f"source vocab {V_S}, threads {args.threads}")
        print(f"   neighbour table: {info['rows']} rows (+{info['missing']} missing), "
              f"k {info['k']}, computed in {info['seconds']:.2f} s")
        results = {}
        for case in cases:
            cmd = [sys.executable, __file__, "--child", "--case", case, "--table", table,
                   "--threads", str(args.threads), "--naive-sample", str(args.naive_sample),
                   "--device", args.device]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"-- {case}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            results[case] = res
            if "skipped" in res:
                print(f"-- {case}: skipped: {res['skipped']}")
                continue
            print(f"-- {case}: wall {res['wall_s']:.2f} s (CPU {res['cpu_s']:.2f} s)   "
                  f"peak RSS {res['peak_rss_gib']:.2f} GiB "
                  f"(inputs alone {res['rss_before_gib']:.2f} GiB)\n   {res['note']}")
        done = {k: v for k, v in results.items() if "wall_s" in v}
        if "salt_input" in done and "naive" in done:
            print(f"== naive / salt_project (input): "
                  f"{done['naive']['wall_s'] / done['salt_input']['wall_s']:.0f}x")
        if "focus" in done and "deepfocus" in done:
            ours = info["seconds"] + done["focus"]["wall_s"]
            print(f"== deepfocus / (neighbour stage + focus): "
                  f"{done['deepfocus']['wall_s'] / ours:.1f}x "
                  f"({done['deepfocus']['wall_s']:.1f} s vs {ours:.1f} s); "
                  f"deepfocus / focus alone: "
                  f"{done['deepfocus']['wall_s'] / done['focus']['wall_s']:.0f}x")
        print("targets: salt <= 10 s (CPU), <= 1 s (GPU), focus <= 5 s, each <= 4 GB peak RSS")


if __name__ == "__main__":
    main()
