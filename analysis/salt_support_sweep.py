"""Retrain a language's word fastText with changed options and measure SALT's neighbour counts.

SALT fits every non-shared target token's row by least squares over its sparsemax
neighbours in the target PLM's space; with ``k`` neighbours and PLM width ``h`` the fit is
ill-conditioned as ``k/h`` nears 1 (``embtransfer.transfer.regression``). ``k`` is the size
of the token's sparsemax support among the shared tokens in the language's word-level
fastText space, so it depends on how that space is trained. Each try trains the word
fastText as the ``fasttext_word`` rule does (the config's ``fasttext.word`` with the given
changes, the run's corpus, the config's seed), builds the target tokenizer's word vectors as
the ``token_vectors`` rule does and the neighbour table as the ``neighbors`` rule does (the
config's ``neighbors`` options, the run's overlap table with the source), and prints one JSON
line: the changes, seconds, the fastText vocabulary, and the distribution of the ``k`` SALT
would use (the tokens it projects: with a vector and at least ``min_neighbors`` neighbours,
at most ``max_neighbors``) with ``k/h`` for each width.

Run it from a finished run's working directory (it reads ``results/corpus``,
``results/vocab`` and ``results/overlap`` there and writes nothing there):

    .venv/bin/python analysis/salt_support_sweep.py gpt2_vi --config config/real_small.yaml
    .venv/bin/python analysis/salt_support_sweep.py gpt2_vi --config config/real_small.yaml \
        --fasttext epoch=20 dim=50
    .venv/bin/python analysis/salt_support_sweep.py gpt2_de --config config/real_small.yaml \
        --fasttext epoch=20 --widths 128 256 --out /tmp/sweep/de

With no change, a try rebuilds the run's own table (fastText is deterministic on one thread),
so its ``k`` matches ``results/neighbors/{lang}/{source}/{target}/word.parquet``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from embtransfer.config.validation import validate_config  # noqa: E402
from embtransfer.core import paths  # noqa: E402
from embtransfer.fasttext.vectors import (  # noqa: E402
    load_fasttext,
    save_token_vectors,
    token_vectors,
    train_fasttext,
)
from embtransfer.neighbors.search import (  # noqa: E402
    Neighbors,
    compute_neighbors,
    write_neighbors,
)
from embtransfer.transfer.inputs import method_options, salt_vectors  # noqa: E402
from embtransfer.transfer.method_catalog import resolve_options  # noqa: E402
from embtransfer.vocab.canonical import read_vocab  # noqa: E402
from embtransfer.vocab.overlap import read_overlap  # noqa: E402


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", help="a target PLM of the config (its tokenizer and language)")
    parser.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    parser.add_argument("--source", default=None, help="default: the config's first source")
    parser.add_argument(
        "--fasttext",
        nargs="*",
        default=[],
        help="fasttext.word key=value changes (e.g. epoch=20 dim=50)",
    )
    parser.add_argument(
        "--widths", nargs="*", type=int, default=[128, 256], help="PLM widths h to report k/h for"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out",
        default=None,
        help="keep the fastText model, vectors and table here (default: none)",
    )
    return parser.parse_args(argv)


def _checked(config: dict[str, Any], target: str) -> str:
    """The target's language, after checking that this sweep measures what SALT reads."""
    if target not in config["models"]:
        raise SystemExit(f"{target} is not a model of the config")
    lang = config["models"][target]["language"]
    if salt_vectors(config) != "word":
        raise SystemExit("SALT reads token-level neighbours in this config: no word fastText")
    if config["languages"][lang]["fasttext"]["type"] != "train":
        raise SystemExit(f"languages.{lang}.fasttext is not trained here: nothing to retrain")
    return lang


def _word_vectors(
    args: argparse.Namespace, config: dict[str, Any], lang: str, out: Path
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The target vocabulary's word vectors from fastText retrained with the changes, and
    what was tried with its cost (the fasttext_word and token_vectors rules' steps)."""
    changes = {key: yaml.safe_load(value)
               for key, value in (p.split("=", 1) for p in args.fasttext)}
    params = {**config["fasttext"]["word"], **changes}
    start = time.perf_counter()
    trained = train_fasttext(
        paths.CORPUS.fill(lang=lang, split="train"),
        out / "word.bin",
        params,
        config["seed"],
        args.threads,
    )
    vectors, missing = token_vectors(
        load_fasttext(out / "word.bin"), read_vocab(paths.VOCAB.fill(model=args.target)), "word"
    )
    save_token_vectors(out / "word.npy", out / "word.missing.npy", vectors, missing)
    tried = {
        "lang": lang,
        "target": args.target,
        "changes": changes,
        "fasttext": params,
        "words": trained["words"],
        "seconds": {
            "fasttext": round(trained["seconds"], 1),
            "vectors": round(time.perf_counter() - start - trained["seconds"], 1),
        },
    }
    return vectors, missing, tried


def _table(
    vectors: np.ndarray,
    missing: np.ndarray,
    args: argparse.Namespace,
    config: dict[str, Any],
    source: str,
    out: Path,
) -> tuple[Neighbors, dict[str, Any]]:
    """The neighbour table as the neighbors rule builds it, and its statistics."""
    pairs = read_overlap(paths.OVERLAP.fill(source=source, target=args.target))
    options = config["neighbors"]
    table, stats = compute_neighbors(
        vectors,
        missing,
        pairs["target_id"].to_numpy(),
        pairs["source_id"].to_numpy(),
        chunk_rows=options["chunk_rows"],
        prefilter_k=options["prefilter_k"],
        max_neighbors=options["max_neighbors"],
        threads=args.threads,
    )
    write_neighbors(table, stats, out / "word.parquet")
    return Neighbors.from_table(table), stats


def salt_k(neighbors: Neighbors, options: dict[str, Any]) -> np.ndarray:
    """The neighbour count of every token SALT projects: those with a vector and at least
    ``min_neighbors`` neighbours, capped at ``max_neighbors`` (the regression's statuses)."""
    k = neighbors.k[~neighbors.missing]
    k = k[k >= options["min_neighbors"]]
    if options["max_neighbors"] is not None:
        k = np.minimum(k, options["max_neighbors"])
    return k


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """Median, 90th and 99th percentile and maximum (None each when there are none)."""
    if values.size == 0:
        return {"median": None, "p90": None, "p99": None, "max": None}
    median, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "median": round(float(median), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "max": round(float(values.max()), 3),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _arguments(argv)
    config = validate_config(yaml.safe_load(Path(args.config).read_text()))
    lang = _checked(config, args.target)
    source = args.source or config["sources"][0]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="salt_support_") as scratch:
        out = Path(args.out) if args.out else Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        vectors, missing, tried = _word_vectors(args, config, lang, out)
        t0 = time.perf_counter()
        neighbors, stats = _table(vectors, missing, args, config, source, out)
        tried["seconds"]["neighbors"] = round(time.perf_counter() - t0, 1)
    tried["seconds"]["total"] = round(time.perf_counter() - start, 1)
    k = salt_k(neighbors, resolve_options("salt", method_options(config, "salt")))
    line = tried | {
        "source": source,
        "projected": int(k.size),
        "missing": stats["n_missing"],
        "truncated": stats["truncated"],
        "k": distribution(k),
        "k_over_h": {str(h): distribution(k / h) for h in args.widths},
    }
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
