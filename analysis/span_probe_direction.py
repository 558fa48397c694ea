"""The span probe of a finished run's target PLMs, three ways, on their rows and on the rows
permuted across tokens.

How docs/evaluation.md's figures on the span probe's common direction were made: for every
probe record of a run (``results/probes/{lang}/{source}/{target}.json``) it reads the PLM's
input rows, SALT's neighbour table and the pair's overlap, and prints one JSON line with the
span probe (neighbours' share vs random rows' share, z) computed

* ``as_is``: on the rows as they are (how the probe was first defined);
* ``centred``: on the rows less the candidates' mean row;
* ``projected``: with the candidates' common direction projected out, as
  ``embtransfer.evaluation.plm_probes.span_probe`` does;

each on the PLM's rows and on the same rows permuted among the shared and among the
non-shared tokens (``permuted_*``: the geometry kept, the meaning gone, so z should be
about 0). The random rows are drawn from the config's seed, as the rule draws them.

    .venv/bin/python analysis/span_probe_direction.py RUN_DIR [--config config/config.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from embtransfer.config.validation import validate_config  # noqa: E402
from embtransfer.core import paths  # noqa: E402
from embtransfer.core.atomic import read_json  # noqa: E402
from embtransfer.evaluation.plm_probes import (  # noqa: E402
    common_direction,
    geometry,
    paired_summary,
    random_sets,
    span_shares,
)
from embtransfer.models.inputs import model_dir  # noqa: E402
from embtransfer.models.loading import load_embeddings  # noqa: E402
from embtransfer.neighbors.search import Neighbors, read_neighbors  # noqa: E402
from embtransfer.transfer.inputs import salt_vectors  # noqa: E402
from embtransfer.vocab.overlap import read_overlap  # noqa: E402

#: Seeds of the permutations of the shared and the non-shared tokens' rows.
PERMUTATION_SEEDS = (7, 8)


def span(rows: np.ndarray, table: Neighbors, pool: np.ndarray, seed: int, rcond: float,
         without: np.ndarray | None) -> dict[str, Any]:
    """The span probe's paired summary with ``without`` projected out (None: as they are)."""
    keep = np.diff(table.offsets) > 0
    starts, stops = table.offsets[:-1][keep], table.offsets[1:][keep]
    k = stops - starts
    gather = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops, strict=True)])
    offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    targets = table.target_ids[keep]
    ours = span_shares(rows, targets, offsets, table.neighbor_target_ids[gather], rcond, without)
    random_offsets, random_ids = random_sets(k, pool, np.random.default_rng(seed))
    base = span_shares(rows, targets, random_offsets, random_ids, rcond, without)
    return paired_summary(ours, base) | {"mean_k": float(k.mean())}


def _ways(rows: np.ndarray, table: Neighbors, pool: np.ndarray, seed: int, rcond: float
          ) -> dict[str, str]:
    centred = rows.astype(np.float64) - rows[pool].astype(np.float64).mean(axis=0)
    out = {}
    for way, x, without in (("as_is", rows, None), ("centred", centred, None),
                            ("projected", rows, common_direction(rows, pool))):
        s = span(x, table, pool, seed, rcond, without)
        out[way] = f"{s['mean']:.3f} vs {s['random']:.3f} z {s['z']:.1f}"
    return out


def probe_ways(record: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The three ways of the span probe for one probe record of the run."""
    lang, source, target = record.parts[-3], record.parts[-2], record.stem
    where = {"lang": lang, "source": source, "target": target}
    rows = load_embeddings(model_dir(config, target),
                           trust_remote_code=config["trust_remote_code"]).input
    table, _ = read_neighbors(paths.NEIGHBORS.fill(**where, vectors=salt_vectors(config)))
    pairs = read_overlap(paths.OVERLAP.fill(source=source, target=target))
    pool = np.unique(pairs.loc[pairs["how"] != "special", "target_id"].to_numpy())
    rcond = read_json(record)["rcond"]
    neighbors = Neighbors.from_table(table)
    permuted = rows.copy()
    others = np.setdiff1d(np.arange(rows.shape[0]), pool)
    for ids, seed in zip((pool, others), PERMUTATION_SEEDS, strict=True):
        permuted[ids] = rows[np.random.default_rng(seed).permutation(ids)]
    line: dict[str, Any] = {"lang": lang, "target": target,
                            "pairwise_cosine": round(geometry(rows)["pairwise_cosine"], 3)}
    line |= _ways(rows, neighbors, pool, config["seed"], rcond)
    line |= {f"permuted_{k}": v
             for k, v in _ways(permuted, neighbors, pool, config["seed"], rcond).items()}
    return line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a finished run's folder (holds results/)")
    parser.add_argument("--config", default="config/config.yaml",
                        help="its config, relative to the run's folder")
    args = parser.parse_args(argv)
    os.chdir(args.run)
    config = validate_config(yaml.safe_load(Path(args.config).read_text()))
    for record in sorted(Path("results/probes").glob("*/*/*.json")):
        print(json.dumps(probe_ways(record, config)), flush=True)


if __name__ == "__main__":
    main()
