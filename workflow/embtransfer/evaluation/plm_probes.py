"""Do a target PLM's input embeddings carry meaning? Two probes per PLM.

SALT rebuilds a non-shared target token's row from the PLM rows of its fastText neighbours
(:mod:`embtransfer.transfer.regression`). That only transfers meaning when the PLM's own
rows say what the neighbours say. Two paired probes measure it, each against a baseline
over the same items:

* **span** (per non-shared token with a neighbour set of ``k`` rows, the one SALT reads):
  the share of the squared norm of the token's PLM row that lies in the span of its
  neighbours' PLM rows (least squares, numpy.linalg.pinv's ``rcond``), against the share
  in the span of ``k`` rows drawn at random from the same candidates (the shared, non-special
  target tokens). The candidates' common direction is projected out of every row first
  (:func:`common_direction`): trained rows share one direction (pairwise cosine 0.3-0.8)
  that any ``k`` rows span, so on the rows as they are the random baseline alone explains
  most of a row's norm and a real neighbourhood moves the share little (docs/evaluation.md
  has the figures). The projection is linear, so a row that is a combination of its
  neighbours' rows stays one. A PLM whose rows carry the fastText neighbourhood scores above
  zero; rows at their initialisation, or permuted across tokens, score zero in expectation.
* **class** (per non-shared token whose meaning is a concept of the world): the mean cosine
  between its PLM row and the rows of the tokens of the *other* concepts of its class (an
  animal's to the other animals', a verb of eating's to the other verbs of eating'), against
  the mean cosine to the tokens of every other class (the expectation of a random draw). The
  truth
  (:mod:`embtransfer.world.truth`) and the world's concept classes, not fastText, decide what
  belongs together; a row's own concept's other forms are left out, so spelling and
  inflection do not count. (Pairs of one concept's forms were tried first: in ``vi_mini`` the
  only such pairs are a word and its capitalised, sentence-initial form, so that probe
  measured position in the sentence, not meaning.) Only the miniature world has concept
  classes: on real text the class probe is not measured (the record's ``class`` is None).

Each probe reports the mean paired difference, its standard error (standard deviation of the
differences over sqrt(n); tokens share partners, so it errs low) and ``z`` = difference /
standard error
(:func:`embtransfer.core.paired.difference`). Whether a PLM carries meaning is the report's
to decide, by its one rule (:func:`embtransfer.report.diagnostics.probe_tests`, decided with
every other test in :func:`embtransfer.report.comparisons.decide`). The
rows' geometry is reported beside them: mean row norm and mean pairwise cosine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from embtransfer.core.paired import difference

if TYPE_CHECKING:  # the report imports this module's constants: no torch at its start-up
    from embtransfer.neighbors.search import Neighbors

#: Float64 neighbour rows gathered per batch of the span probe.
BATCH_BYTES = 32 * 2**20
#: The probes, in the order the table lists them.
PROBES = ("span", "class")


def span_shares(
    rows: np.ndarray,
    target_ids: np.ndarray,
    offsets: np.ndarray,
    neighbor_ids: np.ndarray,
    rcond: float,
    without: np.ndarray | None = None,
) -> np.ndarray:
    """Per token ``target_ids[i]``: the share of ``|rows[t]|^2`` in the span of
    ``rows[neighbor_ids[offsets[i]:offsets[i + 1]]]`` (singular values at most ``rcond``
    times the largest count as zero), every row's component along the unit vector
    ``without`` removed where given. Tokens of one neighbour count are solved together."""
    k = np.diff(offsets)
    shares = np.zeros(target_ids.size)
    for size in np.unique(k[k > 0]):
        members = np.flatnonzero(k == size)
        per_batch = max(1, BATCH_BYTES // (int(size) * rows.shape[1] * 8))
        for start in range(0, members.size, per_batch):
            batch = members[start : start + per_batch]
            gather = offsets[batch][:, None] + np.arange(size)
            spans = _project(rows[neighbor_ids[gather]], without)  # (b, k, h)
            vectors = _project(rows[target_ids[batch]], without)
            shares[batch] = _in_span(vectors, spans, rcond)
    return shares


def _project(rows: np.ndarray, without: np.ndarray | None) -> np.ndarray:
    """``rows`` in float64, less their component along the unit vector ``without``."""
    x = rows.astype(np.float64)
    return x if without is None else x - (x @ without)[..., None] * without


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


def common_direction(rows: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """The unit vector the candidates' rows ``rows[pool]`` lie along most: their top
    principal direction, uncentred (the top eigenvector of their Gram matrix). It is the
    direction trained rows share, and the rows also differ most in how far along it they lie,
    so subtracting their mean row leaves much of it (docs/evaluation.md)."""
    x = rows[np.asarray(pool, np.int64)].astype(np.float64)
    _, vectors = np.linalg.eigh(x.T @ x)
    return vectors[:, -1]


def span_probe(
    rows: np.ndarray, neighbors: Neighbors, pool: np.ndarray, rng: np.random.Generator, rcond: float
) -> pd.DataFrame:
    """Per non-shared token with neighbours: ``target_id``, ``k``, ``neighbors`` (share in
    its neighbours' span) and ``random`` (share in the span of as many rows of ``pool``),
    the pool's :func:`common_direction` projected out of every row."""
    keep = np.diff(neighbors.offsets) > 0
    target_ids = neighbors.target_ids[keep]
    starts, stops = neighbors.offsets[:-1][keep], neighbors.offsets[1:][keep]
    k = stops - starts
    gather = np.concatenate(
        [np.arange(a, b) for a, b in zip(starts, stops, strict=True)] + [np.empty(0, np.int64)]
    )
    offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    common = common_direction(rows, pool)
    nb = span_shares(rows, target_ids, offsets, neighbors.neighbor_target_ids[gather], rcond,
                     common)
    random_offsets, random_ids = random_sets(k, pool, rng)
    rn = span_shares(rows, target_ids, random_offsets, random_ids, rcond, common)
    return pd.DataFrame({"target_id": target_ids, "k": k, "neighbors": nb, "random": rn})


def concept_classes(world: dict[str, Any]) -> dict[str, str]:
    """A truth meaning (``concept:<id>``) -> its concept's class in the world (animal, food,
    verb_food, ...)."""
    return {f"concept:{concept['id']}": concept["class"] for concept in world["concepts"]}


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def class_probe(rows: np.ndarray, truth: pd.DataFrame, classes: dict[str, str]) -> pd.DataFrame:
    """Per non-shared token of a concept whose class holds another concept's token:
    ``target_id``, ``same`` (mean cosine to the tokens of the other concepts of its class)
    and ``other`` (mean cosine to the tokens of every other class)."""
    tokens = truth[~truth["shared"].to_numpy(bool) & truth["meaning"].isin(classes)]
    tokens = tokens.sort_values("target_id", kind="stable")
    concept = tokens["meaning"].to_numpy()
    cls = np.array([classes[m] for m in concept])
    unit = _unit(rows[tokens["target_id"].to_numpy(np.int64)].astype(np.float64))
    cosine = unit @ unit.T
    same = (cls[:, None] == cls[None, :]) & (concept[:, None] != concept[None, :])
    other = cls[:, None] != cls[None, :]
    keep = same.any(axis=1) & other.any(axis=1)
    mean_same = (cosine * same).sum(axis=1)[keep] / same.sum(axis=1)[keep]
    mean_other = (cosine * other).sum(axis=1)[keep] / other.sum(axis=1)[keep]
    return pd.DataFrame(
        {
            "target_id": tokens["target_id"].to_numpy(np.int64)[keep],
            "class": cls[keep],
            "same": mean_same,
            "other": mean_other,
        }
    )


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
    truth: pd.DataFrame | None,
    classes: dict[str, str] | None,
    seed: int,
    rcond: float,
) -> dict[str, Any]:
    """The probes and the geometry of one PLM's input rows (the record of
    :data:`embtransfer.core.paths.PLM_PROBE`). ``shared_ids``: the shared, non-special target
    ids (the span probe's random candidates); ``classes``: :func:`concept_classes`;
    ``seed`` seeds the span probe's random rows. Without ``truth`` and ``classes`` (real
    text: no concept classes) the record's ``class`` is None: not measured."""
    span = span_probe(rows, neighbors, np.unique(shared_ids), np.random.default_rng(seed), rcond)
    record: dict[str, Any] = {
        "span": paired_summary(span["neighbors"].to_numpy(), span["random"].to_numpy())
        | {"mean_k": float(span["k"].mean()) if len(span) else None},
        "class": None,
    }
    if truth is not None and classes is not None:
        by_class = class_probe(rows, truth, classes)
        record["class"] = paired_summary(
            by_class["same"].to_numpy(), by_class["other"].to_numpy()
        ) | {"classes": int(by_class["class"].nunique())}
    return record | {"geometry": geometry(rows), "rcond": rcond, "seed": seed}
