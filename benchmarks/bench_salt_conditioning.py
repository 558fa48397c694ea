"""How much SALT's least squares amplifies as k nears the PLM's width h, on trained rows.

SALT maps a new token by ``c = e_t pinv(A)`` over its k neighbours' PLM rows ``A`` (k x h)
and takes ``c S`` of their source rows (``embtransfer.transfer.regression``). Here the new
tokens are shared tokens held out of the candidates, so their true source row is known:
each gets as neighbours its k most cosine-similar remaining shared tokens in the PLM's
space, for k/h from 0.1 to 1.2, and is solved by the package's own
``salt_coefficients`` / ``apply_coefficients`` with the pseudo-inverse (``rcond``, the
paper) and with ``ridge`` (absolute, in units of the Gram matrix; here multiples of the
PLM's mean squared row norm). Printed per k/h and solve:

* ``|c|``: the amplification the regression records (``stats.conditioning``), ``|c|_2``;
* ``ratio``: the measured ``|c S| / median_j |S_j|`` over the neighbours j;
* ``err``: the reconstruction error ``|c S - S_t| / |S_t|`` against the held-out token's
  true source row (1.0: no better than a zero row); ``mean err``: that of the neighbours'
  mean source row, a solve-free baseline.

Then one setting, k = 1.1 h (a narrow PLM's supports in the real-text run), with each
remedy: a ``max_neighbors`` cap (the most similar h/2 and h/4), ``ridge``; a PLM twice as
wide at the same k is the sweep's row at half the k/h. Usage::

    python benchmarks/bench_salt_conditioning.py --models resources/models \\
        [--plm gpt2_vi_mini] [--source llama_mini] [--side input|output] [--held-out 300]
        [--threads 1]

``--models`` holds the checkpoints (a default run's ``resources/models``); shared tokens are
matched as the workflow's overlap does (fuzzy). Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from embtransfer.models.loading import load_embeddings, load_tokenizer
from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer.regression import apply_coefficients, salt_coefficients
from embtransfer.vocab.canonical import vocab_table
from embtransfer.vocab.overlap import compute_overlap

K_OVER_H = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2)
#: ridge values, as multiples of the PLM's mean squared row norm
RIDGES = (0.01, 0.1, 1.0)


def shared_rows(models: Path, plm: str, source: str, side: str
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(PLM input rows, the source's rows of ``side``, shared PLM ids, their source ids),
    special tokens left out."""
    tables = {name: vocab_table(load_tokenizer(models / name)) for name in (plm, source)}
    pairs = compute_overlap(tables[source], tables[plm], "fuzzy")
    pairs = pairs[pairs["how"] != "special"]
    rows = getattr(load_embeddings(models / source), side)
    if rows is None:
        raise SystemExit(f"{source} ties its output rows to its input rows: use --side input")
    return (load_embeddings(models / plm).input.astype(np.float64), rows.astype(np.float64),
            pairs["target_id"].to_numpy(np.int64), pairs["source_id"].to_numpy(np.int64))


def nearest(plm: np.ndarray, held: np.ndarray, candidates: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` candidates most cosine-similar to each held-out row (n, k) and the
    cosines, most similar first."""
    unit = plm / np.maximum(np.linalg.norm(plm, axis=1, keepdims=True), 1e-30)
    cos = unit[held] @ unit[candidates].T
    order = np.argsort(-cos, axis=1, kind="stable")[:, :k]
    return candidates[order], np.take_along_axis(cos, order, axis=1)


def table(held: np.ndarray, nbr_t: np.ndarray, cos: np.ndarray, source_of: dict[int, int]
          ) -> Neighbors:
    n, k = nbr_t.shape
    flat = nbr_t.reshape(-1)
    return Neighbors(
        target_ids=held, offsets=np.arange(0, n * k + 1, k, dtype=np.int64),
        neighbor_target_ids=flat,
        neighbor_source_ids=np.array([source_of[int(t)] for t in flat], np.int64),
        similarities=cos.reshape(-1).astype(np.float32),
        weights=np.full(flat.size, 1.0 / k, np.float32), missing=np.zeros(n, bool))


def measure(plm: np.ndarray, source: np.ndarray, nb: Neighbors, truth: np.ndarray,
            **options: float) -> dict[str, np.ndarray]:
    """Per held-out token (in target-id order): |c|_2, |c S| / median_j |S_j|, the
    reconstruction error, and the neighbours' mean row's error."""
    coefficients = salt_coefficients(plm, nb, device="cpu", **options)
    rows = apply_coefficients(coefficients, source).astype(np.float64)
    k = coefficients["k_used"].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(k)])
    norms = np.linalg.norm(source, axis=1)
    order = np.argsort(nb.target_ids)
    want = truth[order]
    median_norm = np.array([np.median(norms[coefficients["source_ids"][a:b]])
                            for a, b in zip(starts[:-1], starts[1:], strict=True)])
    mean_rows = np.stack([source[coefficients["source_ids"][a:b]].mean(axis=0)
                          for a, b in zip(starts[:-1], starts[1:], strict=True)])
    target_norm = np.linalg.norm(want, axis=1)
    return {
        "c": coefficients["amplification"],
        "ratio": np.linalg.norm(rows, axis=1) / median_norm,
        "err": np.linalg.norm(rows - want, axis=1) / target_norm,
        "mean_err": np.linalg.norm(mean_rows - want, axis=1) / target_norm,
        "deficient": (coefficients["rank"] < k).mean(),
    }


def quantiles(values: np.ndarray) -> str:
    median, p90, p99 = np.percentile(values, [50, 90, 99])
    return f"{median:9.3g} {p90:9.3g} {p99:9.3g}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resources/models", type=Path)
    ap.add_argument("--plm", default="gpt2_vi_mini")
    ap.add_argument("--source", default="llama_mini")
    ap.add_argument("--side", default="input", choices=["input", "output"],
                    help="the source rows combined: its input rows or its untied LM head")
    ap.add_argument("--held-out", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    plm, source, shared_t, shared_s = shared_rows(args.models, args.plm, args.source,
                                                  args.side)
    h = plm.shape[1]
    rng = np.random.default_rng(args.seed)
    pick = rng.permutation(shared_t.size)
    held, candidates = np.sort(shared_t[pick[:args.held_out]]), shared_t[pick[args.held_out:]]
    source_of = dict(zip(shared_t.tolist(), shared_s.tolist(), strict=True))
    truth = source[[source_of[int(t)] for t in held]]
    mean_sq = float((plm[candidates] ** 2).sum(axis=1).mean())
    solves = {"pinv": {}} | {f"ridge {r:g}": {"ridge": r * mean_sq} for r in RIDGES}
    print(f"== PLM {args.plm} (h {h}, {plm.shape[0]} rows), source {args.source}'s "
          f"{args.side} rows (h_s {source.shape[1]}); {shared_t.size} shared tokens, "
          f"{held.size} held out; "
          f"ridge in units of the PLM's mean squared row norm {mean_sq:.4g}")
    k_max = min(int(round(max(K_OVER_H) * h)), candidates.size)
    nbr_all, cos_all = nearest(plm, held, candidates, k_max)
    print(f"{'k/h':>5} {'k':>4} {'solve':>10} {'deficient':>9} | {'|c| median':>9} "
          f"{'p90':>9} {'p99':>9} | {'ratio med':>9} {'p90':>9} {'p99':>9} | "
          f"{'err med':>7} {'mean err':>8}")
    for k_over_h in K_OVER_H:
        k = int(round(k_over_h * h))
        if k > k_max:
            break
        nb = table(held, nbr_all[:, :k], cos_all[:, :k], source_of)
        for name, options in solves.items():
            m = measure(plm, source, nb, truth, **options)
            print(f"{k_over_h:5.2f} {k:4d} {name:>10} {m['deficient']:9.0%} | "
                  f"{quantiles(m['c'])} | {quantiles(m['ratio'])} | "
                  f"{np.median(m['err']):7.3f} {np.median(m['mean_err']):8.3f}")
    k = min(int(round(1.1 * h)), k_max)
    nb = table(held, nbr_all[:, :k], cos_all[:, :k], source_of)
    remedies = {"none (pinv)": {}, f"max_neighbors {h // 2}": {"max_neighbors": h // 2},
                f"max_neighbors {h // 4}": {"max_neighbors": h // 4}}
    remedies |= {f"ridge {r:g}": {"ridge": r * mean_sq} for r in RIDGES}
    print(f"\n== remedies at k = {k} (k/h {k / h:.2f})")
    print(f"{'remedy':>18} | {'|c| median':>9} {'p90':>9} {'p99':>9} | {'ratio med':>9} "
          f"{'p90':>9} {'p99':>9} | {'err med':>7} {'err p90':>7}")
    for name, options in remedies.items():
        m = measure(plm, source, nb, truth, **options)
        print(f"{name:>18} | {quantiles(m['c'])} | {quantiles(m['ratio'])} | "
              f"{np.median(m['err']):7.3f} {np.percentile(m['err'], 90):7.3f}")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
