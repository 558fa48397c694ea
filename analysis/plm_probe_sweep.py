"""Pretrain one miniature target PLM with changed settings and run its probes.

How docs/world.md's table of tries was made: each try pretrains the PLM as the workflow's
``pretrain_model`` rule does (the config's spec with the given changes), then scores both
probes of ``embtransfer.evaluation.plm_probes`` on the neighbour table, overlap and truth a
run of the workflow already wrote (they depend on the tokenizer only, not on the PLM), and
prints one JSON line: the changes, pretraining seconds, valid loss and both probes.

    .venv/bin/snakemake --cores 2 results/probes/ar_mini/llama_mini/t5_ar_mini.json
    .venv/bin/python analysis/plm_probe_sweep.py t5_ar_mini --train lr=0.01 steps=240

    .venv/bin/python analysis/plm_probe_sweep.py t5_ar_mini --tie true \
        --architecture embedding_init_std=0.05

    .venv/bin/python analysis/plm_probe_sweep.py bert_ar_mini --train mlm_probability=0.4
    .venv/bin/python analysis/plm_probe_sweep.py t5_ar_mini --train noise_density=0.5 lr=0.001

On a real-text run (``make real-run``'s results; span probe only, no concept classes), from
its working directory:

    .venv/bin/python analysis/plm_probe_sweep.py t5_de --config config/real_small.yaml \
        --source llama_en --tie true --train lr=0.01 noise_density=0.4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from embtransfer.core import paths  # noqa: E402
from embtransfer.core.atomic import read_json  # noqa: E402
from embtransfer.evaluation.plm_probes import PROBES, concept_classes, probe_plm  # noqa: E402
from embtransfer.models.loading import load_tokenizer  # noqa: E402
from embtransfer.models.pretrain import build_model, pretrain  # noqa: E402
from embtransfer.models.tokenizer_training import special_token_ids  # noqa: E402
from embtransfer.neighbors.search import Neighbors, read_neighbors  # noqa: E402
from embtransfer.transfer.method_catalog import defaults  # noqa: E402
from embtransfer.vocab.overlap import read_overlap  # noqa: E402
from embtransfer.world.truth import read_truth  # noqa: E402


def _values(pairs: list[str]) -> dict[str, object]:
    return {key: yaml.safe_load(value) for key, value in (p.split("=", 1) for p in pairs)}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a target PLM of the config (e.g. t5_ar_mini)")
    parser.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    parser.add_argument("--source", default="llama_mini")
    parser.add_argument("--train", nargs="*", default=[], help="train key=value changes")
    parser.add_argument("--architecture", nargs="*", default=[], help="key=value changes")
    parser.add_argument("--tie", default=None, help="tie_word_embeddings: true or false")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", default=None, help="write the input rows here (.npy)")
    return parser.parse_args(argv)


def _pretrained(args: argparse.Namespace, config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The PLM pretrained with the changes, and what was tried with its cost."""
    spec = config["models"][args.model]
    train = {**spec.get("train", {}), **_values(args.train)}
    architecture = {**spec.get("architecture", {}), **_values(args.architecture)}
    tie = yaml.safe_load(args.tie) if args.tie is not None else spec.get("tie_word_embeddings")
    tokenizer = load_tokenizer(paths.TOKENIZER.fill(model=args.model))
    model = build_model(
        spec["family"],
        len(tokenizer),
        architecture,
        tie,
        special_token_ids(tokenizer),
        config["seed"],
    )
    start = time.perf_counter()
    lang = spec["language"]
    metrics = pretrain(
        model,
        tokenizer,
        paths.CORPUS.fill(lang=lang, split="train"),
        paths.CORPUS.fill(lang=lang, split="valid"),
        train,
        config["seed"],
        log=lambda _: None,
        threads=args.threads,
    )
    tried = {
        "model": args.model,
        "train": train,
        "architecture": architecture,
        "tie": tie,
        "seconds": round(time.perf_counter() - start, 1),
        "valid_loss": round(metrics["valid_loss"], 3),
    }
    return model, tried


def _probes(model: Any, args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    """Both probes of the PLM's input rows on the workflow's neighbour table and truth."""
    where = {
        "lang": config["models"][args.model]["language"],
        "source": args.source,
        "target": args.model,
    }
    table, _ = read_neighbors(paths.NEIGHBORS.fill(**where, vectors="word"))
    pairs = read_overlap(paths.OVERLAP.fill(**where))
    shared = pairs.loc[pairs["how"] != "special", "target_id"].to_numpy()
    rows = model.get_input_embeddings().weight.detach().numpy()
    # real text has no concept classes: the span probe alone, as the plm_probe rule runs it
    world = Path(paths.WORLD).is_file()
    return probe_plm(
        rows,
        Neighbors.from_table(table),
        shared,
        read_truth(paths.WORLD_TRUTH.fill(**where)) if world else None,
        concept_classes(read_json(paths.WORLD)) if world else None,
        config["seed"],
        defaults("salt")["rcond"],
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _arguments(argv)
    config = yaml.safe_load(Path(args.config).read_text())
    model, tried = _pretrained(args, config)
    record = _probes(model, args, config)
    if args.save:
        np.save(args.save, model.get_input_embeddings().weight.detach().numpy())
    line = (
        tried
        | {
            probe: {k: record[probe][k] for k in ("mean", "random", "diff", "se", "z")}
            for probe in PROBES if record[probe] is not None
        }
        | {"geometry": record["geometry"]}
    )
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
