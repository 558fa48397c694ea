"""SALT (docs/design.md §4.3): copy shared tokens, project the others by per-token least squares.

The regression stage solves each non-shared token's coefficients over its neighbours
(:func:`embtransfer.transfer.regression.salt_coefficients`, possibly on a GPU); they arrive as
``inputs.projected`` (:func:`embtransfer.transfer.regression.read_coefficients`): ``target_ids``,
``status`` (labels of :data:`embtransfer.transfer.regression.STATUSES`), ``k_used``,
``source_ids`` and ``coefficients``. This method applies them to the source's matrix of
the side (:func:`embtransfer.transfer.regression.apply_coefficients`) and assembles the matrix:

* shared tokens copy their source row (``copied``);
* projected tokens take their projected row (``projected``);
* tokens without a fastText vector (``missing_vector``), with fewer neighbours
  than ``min_neighbors`` (``too_few_neighbors``) and any target token the
  neighbour table does not list (``not_in_table``; only when the table and the
  overlap disagree) are drawn from N(mean, std) of the source rows, with the
  generator ``inputs.rng("salt", side)``, in target-id order.

SALT's options (``transfer.options.salt``: ``vectors``, ``min_neighbors``, ``ridge``,
``rcond``, ...) all act in the regression stage; this function reads none of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import copy_shared, empty_result, source_normal
from embtransfer.transfer.regression import apply_coefficients

FALLBACK_LABELS = ("missing_vector", "too_few_neighbors", "not_in_table")


@register("salt")
def salt(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    projected = inputs.projected
    if projected is None:
        raise ValueError("salt needs the regression stage's coefficients (inputs.projected)")
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)

    target_ids = np.asarray(projected["target_ids"], np.int64)
    status = np.asarray(projected["status"], dtype=object)
    if target_ids.size and (target_ids.min() < 0 or target_ids.max() >= inputs.n_target):
        raise ValueError("salt: projected target ids fall outside the target vocabulary")
    stale = target_ids[how[target_ids] == "copied"]
    if stale.size:
        raise ValueError(
            f"salt: {stale.size} projected tokens are shared tokens (e.g. {stale[:5].tolist()}); "
            "the projection is stale against the overlap table"
        )
    values = apply_coefficients(projected, inputs.source_matrix(side))

    done = status == "projected"
    rows[target_ids[done]] = values[done]
    how[target_ids[done]] = "projected"
    for label in ("missing_vector", "too_few_neighbors"):
        how[target_ids[status == label]] = label
    how[how == "unset"] = "not_in_table"

    fallback = np.flatnonzero(np.isin(how, FALLBACK_LABELS))  # increasing target id
    rows[fallback] = source_normal(inputs, side, inputs.rng("salt", side), fallback.size)
    labels, counts = np.unique(how.astype(str), return_counts=True)
    stats = {"counts": {str(k): int(v) for k, v in zip(labels, counts, strict=True)}}
    return SideResult(rows=rows, how=how, stats=stats)
