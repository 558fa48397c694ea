"""Do a target PLM's input embeddings carry meaning? Two probes per PLM (miniature world).

SALT rebuilds a non-shared target token's row from the PLM rows of its fastText neighbours
(:mod:`embtransfer.transfer.regression`). That only transfers meaning when the PLM's own
rows say what the neighbours say. Two paired probes measure it, each against a seeded
random baseline over the same items:

* **span** (per non-shared token with a neighbour set of ``k`` rows, the one SALT reads):
  the share of the squared norm of the token's PLM row that lies in the span of its
  neighbours' PLM rows (least squares, numpy.linalg.pinv's ``rcond``), against the share
  in the span of ``k`` rows drawn at random from the same candidates (the shared, non-special
  target tokens). A PLM whose rows carry the fastText neighbourhood scores above zero; rows
  at their initialisation score zero in expectation.
* **inflection** (per concept of the world with two or more non-shared tokens: a lemma and
  its inflected forms, or a stem): the mean cosine between the PLM rows of two tokens of the
  concept, against the mean cosine between the first of each pair and a token of another
  concept drawn at random (one draw per pair). The truth (:mod:`embtransfer.world.truth`),
  not fastText, decides which tokens belong together.

Each probe reports the mean paired difference, its standard error (standard deviation of the
differences over sqrt(n)) and ``z`` = difference / standard error
(:func:`embtransfer.report.paired.difference`); a PLM carries meaning by a probe when its
``z`` is at least :data:`Z_CLEARS`. The rows' geometry is reported beside them: mean row norm
and mean pairwise cosine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from embtransfer.neighbors.search import Neighbors
from embtransfer.report.paired import difference

#: A probe is cleared at this many standard errors above its random baseline (issue 35).
Z_CLEARS = 3.0
#: Float64 neighbour rows gathered per batch of the span probe.
BATCH_BYTES = 32 * 2**20
#: The probes, in the order the table lists them.
PROBES = ("span", "inflection")


def span_shares(
    rows: np.ndarray,
    target_ids: np.ndarray,
    offsets: np.ndarray,
    neighbor_ids: np.ndarray,
    rcond: float,
) -> np.ndarray:
    """Per token ``target_ids[i]``: the share of ``|rows[t]|^2`` in the span of
    ``rows[neighbor_ids[offsets[i]:offsets[i + 1]]]`` (singular values at most ``rcond``
    times the largest count as zero). Tokens of one neighbour count are solved together."""
    k = np.diff(offsets)
    shares = np.zeros(target_ids.size)
    for size in np.unique(k[k > 0]):
        members = np.flatnonzero(k == size)
        per_batch = max(1, BATCH_BYTES // (int(size) * rows.shape[1] * 8))
        for start in range(0, members.size, per_batch):
            batch = members[start : start + per_batch]
            gather = offsets[batch][:, None] + np.arange(size)
            spans = rows[neighbor_ids[gather]].astype(np.float64)  # (b, k, h)
            shares[batch] = _in_span(rows[target_ids[batch]].astype(np.float64), spans, rcond)
    return shares


def _in_span(vectors: np.ndarray, spans: np.ndarray, rcond: float) -> np.ndarray:
    _, sigma, basis = np.linalg.svd(spans, full_matrices=False)
    kept = sigma > rcond * sigma[:, :1]
    coords = np.einsum("bjh,bh->bj", basis, vectors) * kept
    norms = np.einsum("bh,bh->b", vectors, vectors)
    return np.divide((coords**2).sum(axis=1), norms, out=np.zeros_like(norms), where=norms > 0)


def random_sets(
    sizes: np.ndarray, pool: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, ids): for each size, that many distinct ids of ``pool`` drawn at random (all
    of the pool when it is smaller), in the order of ``sizes``."""
    sizes = np.minimum(np.asarray(sizes, np.int64), pool.size)
    ids = [rng.choice(pool, size=int(n), replace=False) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return offsets, np.concatenate([np.empty(0, np.int64), *ids]).astype(np.int64)


def span_probe(
    rows: np.ndarray, neighbors: Neighbors, pool: np.ndarray, rng: np.random.Generator, rcond: float
) -> pd.DataFrame:
    """Per non-shared token with neighbours: ``target_id``, ``k``, ``neighbors`` (share in
    its neighbours' span) and ``random`` (share in the span of as many rows of ``pool``)."""
    keep = np.diff(neighbors.offsets) > 0
    target_ids = neighbors.target_ids[keep]
    starts, stops = neighbors.offsets[:-1][keep], neighbors.offsets[1:][keep]
    k = stops - starts
    gather = np.concatenate(
        [np.arange(a, b) for a, b in zip(starts, stops, strict=True)] + [np.empty(0, np.int64)]
    )
    offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    nb = span_shares(rows, target_ids, offsets, neighbors.neighbor_target_ids[gather], rcond)
    random_offsets, random_ids = random_sets(k, pool, rng)
    rn = span_shares(rows, target_ids, random_offsets, random_ids, rcond)
    return pd.DataFrame({"target_id": target_ids, "k": k, "neighbors": nb, "random": rn})


def concept_groups(truth: pd.DataFrame) -> dict[str, np.ndarray]:
    """Concept -> the target ids of its non-shared tokens in the truth (words and stems),
    increasing; every concept with at least one such token."""
    rows = truth[~truth["shared"].to_numpy(bool) & truth["meaning"].str.startswith("concept:")]
    return {
        concept: np.sort(group["target_id"].to_numpy(np.int64))
        for concept, group in rows.groupby("meaning", sort=True)
    }


def _cosine(rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, y = rows[a].astype(np.float64), rows[b].astype(np.float64)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    dots = np.einsum("ij,ij->i", x, y)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def inflection_probe(
    rows: np.ndarray, groups: dict[str, np.ndarray], rng: np.random.Generator
) -> pd.DataFrame:
    """Per concept with two or more tokens: ``concept``, ``pairs``, ``same`` (mean cosine of
    its token pairs) and ``random`` (mean cosine of each pair's first token to a token of
    another concept, drawn at random)."""
    every = np.concatenate([np.empty(0, np.int64), *groups.values()])
    lines = []
    for concept, ids in groups.items():
        if ids.size < 2:
            continue
        first, second = np.triu_indices(ids.size, k=1)
        others = every[~np.isin(every, ids)]
        if others.size == 0:
            raise ValueError("the inflection probe needs tokens of at least two concepts")
        drawn = rng.choice(others, size=first.size, replace=True)
        lines.append(
            {
                "concept": concept,
                "pairs": int(first.size),
                "same": float(_cosine(rows, ids[first], ids[second]).mean()),
                "random": float(_cosine(rows, ids[first], drawn).mean()),
            }
        )
    return pd.DataFrame(lines, columns=["concept", "pairs", "same", "random"])


def paired_summary(ours: np.ndarray, baseline: np.ndarray) -> dict[str, Any]:
    """Items, both means, the mean paired difference, its standard error and z (None
    without at least two items or any spread)."""
    n = int(np.asarray(ours).size)
    if n < 2:
        return {"items": n, "mean": None, "random": None, "diff": None, "se": None, "z": None}
    diff, se = difference(ours, baseline)
    z = diff / se if se > 0 else None  # every item the same: no spread to measure by
    return {
        "items": n,
        "mean": float(np.mean(ours)),
        "random": float(np.mean(baseline)),
        "diff": diff,
        "se": se,
        "z": z,
    }


def geometry(rows: np.ndarray) -> dict[str, float]:
    """Mean row norm and mean cosine between two different rows."""
    x = rows.astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    unit = x / np.where(norms > 0, norms, 1.0)[:, None]
    total = unit.sum(axis=0)
    n = unit.shape[0]
    # sum over i != j of cos = |sum of unit rows|^2 - sum of |unit row|^2
    off_diagonal = float(total @ total) - float((unit * unit).sum())
    return {"row_norm": float(norms.mean()), "pairwise_cosine": off_diagonal / (n * (n - 1))}


def probe_plm(
    rows: np.ndarray,
    neighbors: Neighbors,
    shared_ids: np.ndarray,
    truth: pd.DataFrame,
    seed: int,
    rcond: float,
) -> dict[str, Any]:
    """Both probes and the geometry of one PLM's input rows (the record of
    :data:`embtransfer.core.paths.PLM_PROBE`). ``shared_ids``: the shared, non-special target
    ids (the span probe's random candidates); ``seed`` seeds both random baselines."""
    # One generator per probe: either one's draws stay the same when the other changes.
    span = span_probe(
        rows,
        neighbors,
        np.unique(shared_ids),
        np.random.default_rng([seed, PROBES.index("span")]),
        rcond,
    )
    inflection = inflection_probe(
        rows, concept_groups(truth), np.random.default_rng([seed, PROBES.index("inflection")])
    )
    return {
        "span": paired_summary(span["neighbors"].to_numpy(), span["random"].to_numpy())
        | {"mean_k": float(span["k"].mean()) if len(span) else None},
        "inflection": paired_summary(inflection["same"].to_numpy(), inflection["random"].to_numpy())
        | {"pairs": int(inflection["pairs"].sum())},
        "geometry": geometry(rows),
        "rcond": rcond,
        "seed": seed,
    }
