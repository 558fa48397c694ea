"""Benchmark TokAlign's GloVe (:mod:`embtransfer.transfer.glove`) on a corpus and a tokenizer.

For each (dim, batch, max_lines) setting: the co-occurrence entries, the fit's seconds on one
torch thread, the objective before and after, and how many ids have a vector. Prints figures,
asserts nothing::

    python benchmarks/bench_glove.py CORPUS TOKENIZER_DIR [--settings 50:16384:0 300:4096:0]

A setting ``dim:batch:max_lines`` (0: every line); the other options are TokAlign's defaults
(window 15, min-count 5, 15 passes, x_max 10, learning rate 0.05).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from embtransfer.core.threads import torch_threads  # noqa: E402
from embtransfer.models.loading import load_tokenizer  # noqa: E402
from embtransfer.transfer.glove import corpus_glove  # noqa: E402
from embtransfer.transfer.method_catalog import resolve_options  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("tokenizer", type=Path)
    parser.add_argument("--settings", nargs="+", default=["50:16384:0", "100:16384:0"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(args.tokenizer))
    print(f"corpus {args.corpus}, tokenizer {args.tokenizer} ({len(tokenizer)} ids), "
          f"{args.threads} torch thread(s)")
    print("dim   batch  lines  entries  seconds  loss first -> last  ids with a vector")
    for setting in args.settings:
        dim, batch, lines = (int(x) for x in setting.split(":"))
        options = resolve_options("tokalign", {"dim": dim, "batch": batch,
                                               "max_lines": lines or None})
        del options["pivots"]
        start = time.perf_counter()
        with torch_threads(args.threads):
            _, _, record = corpus_glove(tokenizer, args.corpus, options, len(tokenizer), 0)
        seconds = time.perf_counter() - start
        print(f"{dim:<5} {batch:<6} {record['lines']:<6} {record['entries']:<8} "
              f"{seconds:7.1f}  {record['loss'][0]:.4g} -> {record['loss'][-1]:.4g}  "
              f"{record['kept_ids']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
