"""How far LAPT moved the rows a method made: the cosine of each new row after LAPT to the
same row before it, per side.

A test after LAPT compares checkpoints whose new rows started from the methods' rows; where
training barely moved them (a short LAPT run), an alignment verdict after LAPT repeats the
transfer stage's rather than adding to it. The lapt_zeroshot rule records this beside the
final checkpoint's scores, and the report states it with the LAPT-stage tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.models.loading import Embeddings


def new_ids(rows: int, shared_ids: np.ndarray) -> np.ndarray:
    """The target ids below ``rows`` that the overlap did not copy: the rows a method made."""
    made = np.ones(rows, dtype=bool)
    shared = np.asarray(shared_ids, dtype=np.int64)
    made[shared[(shared >= 0) & (shared < rows)]] = False
    return np.flatnonzero(made)


def made_ids(checkpoint: dict[str, Any], rows: int, shared_ids: np.ndarray) -> np.ndarray:
    """The rows a method made in a transferred checkpoint of ``rows`` rows, from its
    transfer record's ``checkpoint`` entry: in a replaced vocabulary the target ids the
    overlap did not copy (:func:`new_ids`); in an extended one the rows appended after the
    source's kept rows (there the overlap's target ids are not row ids)."""
    if checkpoint.get("mode") == "extend":
        start = int(checkpoint["kept_source_rows"])
        return np.arange(start, start + int(checkpoint["new_rows"]))
    return new_ids(rows, shared_ids)


def side_movement(before: np.ndarray, after: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    """Over the rows ``ids`` of one side: their count, the median and 10th percentile of the
    cosine between each row after and before, and the median change in norm relative to
    the row before (a zero row's cosine is 0)."""
    if before.shape != after.shape:
        raise ValueError(f"the rows before LAPT are {before.shape}, after {after.shape}: "
                         "not the same checkpoint's")
    if ids.size == 0:
        return {"rows": 0, "median_cosine": None, "p10_cosine": None,
                "median_relative_change": None}
    a = np.asarray(after[ids], dtype=np.float64)
    b = np.asarray(before[ids], dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    cosine = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    base = np.linalg.norm(b, axis=1)
    change = np.divide(np.linalg.norm(a - b, axis=1), base, out=np.full_like(base, np.inf),
                       where=base > 0)
    return {"rows": int(ids.size), "median_cosine": float(np.median(cosine)),
            "p10_cosine": float(np.quantile(cosine, 0.1)),
            "median_relative_change": float(np.median(change))}


def row_movement(before: Embeddings, after: Embeddings, ids: np.ndarray
                 ) -> dict[str, dict[str, Any]]:
    """Per side (input; output where the checkpoint is untied) the movement of the rows
    ``ids`` a method made (:func:`made_ids`, :func:`side_movement`) from the transferred
    checkpoint ``before`` to its LAPT checkpoint ``after``."""
    out = {"input": side_movement(before.input, after.input, ids)}
    if before.output is not None and after.output is not None:
        out["output"] = side_movement(before.output, after.output, ids)
    return out
