"""The miniature world's oracle (``world_oracle``): translation rows where the world knows a
token's meaning, Mean's row elsewhere.

It is the upper bound of the alignment metrics (its rows are the translations'), not of a
model's loss or scores: only the non-shared tokens with a truth (about half of them in the
default world) get a translation row, so methods that place every token well can read the
text better (``docs/evaluation.md``).

Shared tokens copy their source row (``copied``). A non-shared target token whose meaning
the world knows (:mod:`embtransfer.world.truth`) gets the mean of its translation's source
rows (``oracle``); every other row is the mean source row (``mean``), as Mean does. Only
the world's own models have a truth: the config check refuses the method elsewhere
(:func:`embtransfer.config.validation.check_transfer`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_mean,
    sparse_combine,
)


@register("world_oracle")
def world_oracle(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    if inputs.truth is None:
        raise ValueError("world_oracle needs the miniature world's ground truth "
                         "(inputs.truth, results/truth/...)")
    matrix = inputs.source_matrix(side)
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    rows[todo] = source_mean(inputs, side).astype(np.float32)
    how[todo] = "mean"
    truth = inputs.truth[np.isin(inputs.truth["target_id"].to_numpy(), todo)]
    translations = [np.asarray(ids, np.int64) for ids in truth["source_ids"]]
    if translations:
        bad = [t for t in translations if t.size == 0 or t.min() < 0 or t.max() >= len(matrix)]
        if bad:
            raise ValueError(f"the ground truth names source ids outside 0..{len(matrix) - 1}: "
                             "it was made for another source model")
        lengths = np.array([t.size for t in translations], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        weights = np.repeat(1.0 / lengths, lengths).astype(np.float32)
        target_ids = truth["target_id"].to_numpy(np.int64)
        rows[target_ids] = sparse_combine(offsets, np.concatenate(translations), weights, matrix)
        how[target_ids] = "oracle"
    return SideResult(rows, how, {"counts": count_labels(how)})
