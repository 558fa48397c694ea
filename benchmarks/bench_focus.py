"""Benchmark the ``focus`` method at paper scale against the published FOCUS code.

50,000 target tokens, 30,000 of them shared, source hidden size 2048 (source
vocabulary 50,000), a realistic neighbour table: synthetic clustered fastText
vectors of dimension 300 through :func:`embtransfer.neighbors.search.compute_neighbors`
(setup, not timed). Each measured case runs in its own subprocess, so its peak
RSS is its own:

``focus``      ``embtransfer`` ``focus`` (input side) from the neighbour table.
``published``  ``deepfocus.focus.focus_additional_token_initialization`` (PyPI
               ``deepfocus`` 1.0.1, Dobler & de Melo), the published
               weighted-combination step: fastdist cosine matrix, then a Python
               loop of ``entmax.sparsemax`` over each full similarity row and the
               weighted sum. It does the neighbour search too, so it is compared
               with neighbours + focus as well. Needs an interpreter with
               ``deepfocus`` installed (``--published-python``); its dependencies
               (numba, fastdist, datasets, ...) are not in the project venv.
               A throwaway one that reuses the project's packages::

                   python -m venv /tmp/dfvenv
                   python -c 'import site; print(site.getsitepackages()[0])' \\
                       > /tmp/dfvenv/lib/python3.11/site-packages/project.pth
                   /tmp/dfvenv/bin/pip install deepfocus

``--published-rows N`` times only the first N new tokens of the published loop
and extrapolates (similarities and loop are linear in the number of new
tokens; fastdist's numba kernel is compiled before timing). Prints
figures and the largest difference between the two results; no assertions::

    python benchmarks/bench_focus.py [--threads 2] [--published-python /tmp/dfvenv/bin/python]
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
import warnings
from pathlib import Path

import numpy as np

N_VOCAB = 50_000
N_SHARED = 30_000
N_SOURCE = 50_000
H_SOURCE = 2048
DIM = 300


def rss_gib() -> tuple[float, float]:
    """(current, peak) RSS of this process in GiB."""
    import psutil

    current = psutil.Process().memory_info().rss / 2**30
    return current, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def make_data(folder: Path, threads: int) -> dict:
    """Write the vectors, overlap, source matrix and neighbour table; return setup stats."""
    from embtransfer.neighbors.search import compute_neighbors, write_neighbors

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((2_000, DIM), dtype=np.float32)
    vectors = centers[rng.integers(0, centers.shape[0], N_VOCAB)]
    vectors += 0.6 * rng.standard_normal((N_VOCAB, DIM), dtype=np.float32)
    missing = np.zeros(N_VOCAB, bool)
    missing[::997] = True  # a few tokens without a vector
    vectors[missing] = 0.0
    shared_t = rng.choice(N_VOCAB, N_SHARED, replace=False)
    shared_s = rng.choice(N_SOURCE, N_SHARED, replace=False)
    source = rng.standard_normal((N_SOURCE, H_SOURCE), dtype=np.float32)
    np.save(folder / "vectors.npy", vectors)
    np.save(folder / "missing.npy", missing)
    np.save(folder / "shared_t.npy", shared_t)
    np.save(folder / "shared_s.npy", shared_s)
    np.save(folder / "source.npy", source)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table, stats = compute_neighbors(vectors, missing, shared_t, shared_s, threads=threads)
    seconds = time.perf_counter() - t0
    write_neighbors(table, stats, folder / "neighbors.parquet")
    return {
        "neighbors_seconds": seconds, "support": stats["support"], "n_missing": stats["n_missing"],
    }


def run_focus(folder: Path, threads: int) -> dict:
    import pandas as pd
    import torch

    from embtransfer.neighbors.search import Neighbors, read_neighbors
    from embtransfer.transfer.methods import focus  # noqa: F401  (registers the method)
    from embtransfer.transfer.methods.base import TransferInputs, get_method

    torch.set_num_threads(threads)
    table, _ = read_neighbors(folder / "neighbors.parquet")
    neighbors = Neighbors.from_table(table)
    del table
    shared_t, shared_s = np.load(folder / "shared_t.npy"), np.load(folder / "shared_s.npy")
    empty = pd.DataFrame({"id": np.arange(N_VOCAB)})  # focus reads only the vocab length
    inputs = TransferInputs(
        source_input=np.load(folder / "source.npy"),
        source_output=None,
        source_vocab=empty,
        target_vocab=empty,
        overlap=pd.DataFrame({"target_id": shared_t, "source_id": shared_s}),
        seed=0,
        neighbors={"token": neighbors},
    )
    spec = get_method("focus")
    rss_before, peak_before = rss_gib()
    t0, c0 = time.perf_counter(), time.process_time()
    result = spec.fn(inputs, dict(spec.defaults), "input")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    _, peak = rss_gib()
    np.save(folder / "ours.npy", result.rows)
    return {
        "wall_s": wall, "cpu_s": cpu, "rss_before_gib": rss_before,
        "peak_before_gib": peak_before, "peak_gib": peak, "counts": result.stats["counts"],
    }


def run_published(folder: Path, threads: int, rows: int | None) -> dict:
    from types import SimpleNamespace

    import torch
    from deepfocus.focus import focus_additional_token_initialization

    torch.set_num_threads(threads)
    vectors = np.load(folder / "vectors.npy")
    missing = np.load(folder / "missing.npy")
    shared_t, shared_s = np.load(folder / "shared_t.npy"), np.load(folder / "shared_s.npy")
    source = torch.from_numpy(np.load(folder / "source.npy"))
    order = np.argsort(shared_t)  # deepfocus sorts the overlap by target id
    shared_t, shared_s = shared_t[order], shared_s[order]
    keep = ~missing[shared_t]  # tokens without a vector are not used for FOCUS
    overlapping = {
        int(t): SimpleNamespace(auxiliary_embedding=vectors[t], source_embedding=source[s])
        for t, s in zip(shared_t[keep], shared_s[keep], strict=True)
    }
    is_shared = np.zeros(N_VOCAB, bool)
    is_shared[shared_t] = True
    new_ids = np.flatnonzero(~is_shared & ~missing)
    timed = new_ids if rows is None else new_ids[:rows]
    new = {
        int(t): SimpleNamespace(auxiliary_embedding=vectors[t], target=SimpleNamespace(id=int(t)))
        for t in timed
    }
    target = torch.zeros((N_VOCAB, H_SOURCE))
    # compile fastdist's numba kernel first: a one-off cost, not part of the extrapolated rate
    from fastdist import fastdist

    fastdist.cosine_matrix_to_matrix(vectors[:2], vectors[2:4])
    rss_before, peak_before = rss_gib()
    t0, c0 = time.perf_counter(), time.process_time()
    target = focus_additional_token_initialization(overlapping, new, target, device="cpu")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    _, peak = rss_gib()
    np.save(folder / "published.npy", target[torch.from_numpy(timed)].numpy())
    np.save(folder / "published_ids.npy", timed)
    scale = new_ids.size / timed.size
    return {
        "wall_s": wall, "cpu_s": cpu, "rows_timed": int(timed.size), "rows_all": int(new_ids.size),
        "wall_s_extrapolated": wall * scale, "rss_before_gib": rss_before,
        "peak_before_gib": peak_before, "peak_gib": peak,
    }


def subprocess_case(python: str, case: str, folder: Path, threads: int, rows: int | None) -> dict:
    cmd = [python, __file__, "--case", case, "--folder", str(folder), "--threads", str(threads)]
    if rows is not None:
        cmd += ["--published-rows", str(rows)]
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "TQDM_DISABLE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{case} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--published-python", default=None)
    parser.add_argument("--published-rows", type=int, default=None)
    parser.add_argument("--case", choices=["focus", "published"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:  # child process
        folder = Path(args.folder)
        if args.case == "focus":
            out = run_focus(folder, args.threads)
        else:
            out = run_published(folder, args.threads, args.published_rows)
        print(json.dumps(out))
        return

    with tempfile.TemporaryDirectory(prefix="bench_focus_") as tmp:
        folder = Path(tmp)
        setup = make_data(folder, args.threads)
        print(
            f"setup: {N_VOCAB:,} target tokens, {N_SHARED:,} shared, h_s={H_SOURCE}, "
            f"fastText dim {DIM}; neighbours {setup['neighbors_seconds']:.1f} s, "
            f"support {setup['support']}, {setup['n_missing']} without a vector"
        )
        ours = subprocess_case(sys.executable, "focus", folder, args.threads, None)
        grow = ours["peak_gib"] - ours["rss_before_gib"]
        print(
            f"focus (input side): {ours['wall_s']:.2f} s wall, {ours['cpu_s']:.2f} s CPU, "
            f"peak RSS {ours['peak_gib']:.2f} GiB (inputs loaded {ours['rss_before_gib']:.2f} "
            f"GiB, +{grow:.2f} GiB); labels {ours['counts']}"
        )
        total = ours["wall_s"] + setup["neighbors_seconds"]
        print(f"neighbours + focus: {total:.2f} s")
        if not args.published_python:
            print("published FOCUS: skipped (pass --published-python, see the module docstring)")
            return
        pub = subprocess_case(
            args.published_python, "published", folder, args.threads, args.published_rows
        )
        part = "" if pub["rows_timed"] == pub["rows_all"] else (
            f" for {pub['rows_timed']:,} of {pub['rows_all']:,} rows, "
            f"{pub['wall_s_extrapolated']:.1f} s extrapolated"
        )
        print(
            f"published FOCUS weighted combination (similarities + sparsemax loop): "
            f"{pub['wall_s']:.2f} s wall{part}, {pub['cpu_s']:.2f} s CPU, peak RSS "
            f"{pub['peak_gib']:.2f} GiB (inputs {pub['rss_before_gib']:.2f} GiB)"
        )
        extrapolated = pub["wall_s_extrapolated"]
        print(
            f"ratio published / focus: {extrapolated / ours['wall_s']:.0f}x; "
            f"published / (neighbours + focus): {extrapolated / total:.1f}x"
        )
        ids = np.load(folder / "published_ids.npy")
        diff = np.abs(np.load(folder / "published.npy") - np.load(folder / "ours.npy")[ids])
        print(
            f"max |published - focus| over {ids.size:,} rows: {diff.max():.2e} "
            f"(rows differing > 1e-4: {(diff.max(axis=1) > 1e-4).sum()})"
        )


if __name__ == "__main__":
    main()
