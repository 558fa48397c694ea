"""FOCUS (Dobler & de Melo 2023, EMNLP; docs/design.md §4.4).

Shared tokens copy their source row (``copied``). A non-shared target token t
with neighbour set N_t (the sparsemax support of its cosine similarities to the
shared tokens in fastText space, :mod:`embtransfer.neighbors.search`) becomes

    e_t = sum_{j in N_t} w_tj * source_row(source_id_j)      (``weighted``)

with w_t = sparsemax(cos(f_t, f_shared)) as stored in the neighbour table (rows
sum to 1; rows truncated at ``neighbors.max_neighbors`` carry renormalised
weights, see :mod:`embtransfer.neighbors.search`). Tokens without a fastText vector
(``missing`` rows) are drawn from N(mean, std) of the source rows
(``missing_vector``), as the published implementation (``deepfocus``) does for
its "very rare" tokens. In token mode "without a vector" is deepfocus's rule:
not a word of the token-level fastText model (seen fewer than ``minCount``
times) or a zero vector (:func:`embtransfer.fasttext.vectors.token_vectors`);
such shared tokens are no neighbour candidates either
(:func:`embtransfer.neighbors.search.compute_neighbors`). Word mode keeps n-gram
vectors of unseen strings (SALT's step 1). Checked against ``deepfocus`` 1.0.1
row by row in ``tests/test_reference_packages.py``; the random rows use numpy's
generator and the population std, deepfocus ``torch.normal`` and the sample std.

Parameter ``vectors``: which neighbour table, ``token`` (FOCUS's own token-level
fastText trained on the target corpus, the paper's default) or ``word``
(word-level fastText, SALT's auxiliary space); the catalog
(:func:`embtransfer.transfer.method_catalog.method_needs`) turns it into the input
``neighbors_token`` or ``neighbors_word``.

The weighted sums are one sparse (CSR) x dense product over the distinct
neighbour source rows, so the cost is O(nnz * h_s) with no per-token loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_normal,
    sparse_combine,
)


def neighbors_for(inputs: TransferInputs, vectors: str) -> Neighbors:
    if vectors not in inputs.neighbors:
        raise ValueError(
            f"no {vectors!r} neighbour table in the inputs (have: {sorted(inputs.neighbors)})"
        )
    return inputs.neighbors[vectors]


def apply_neighbors(
    inputs: TransferInputs, side: str, table: Neighbors, label: str, rng_name: str
) -> SideResult:
    """Copy shared rows, weighted neighbour sums for the table's rows, random for missing."""
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    ids = np.asarray(table.target_ids, np.int64)
    if ids.size != np.unique(ids).size or not np.array_equal(np.sort(ids), todo):
        raise ValueError(
            "the neighbour table's target ids are not exactly the non-shared target tokens "
            f"({ids.size} rows for {todo.size} non-shared tokens): stale table?"
        )
    k = table.k
    # a row with no neighbours has nothing to combine: same fallback as no vector
    missing = np.asarray(table.missing, bool) | (k == 0)
    have = ~missing
    offsets = np.zeros(have.sum() + 1, np.int64)
    np.cumsum(k[have], out=offsets[1:])
    entries = np.repeat(have, k)  # mask over the flat arrays
    rows[ids[have]] = sparse_combine(
        offsets, table.neighbor_source_ids[entries], table.weights[entries],
        inputs.source_matrix(side),
    )
    how[ids[have]] = label
    rows[ids[missing]] = source_normal(inputs, side, inputs.rng(rng_name, side), missing.sum())
    how[ids[missing]] = "missing_vector"
    stats: dict[str, Any] = {
        "counts": count_labels(how),
        "neighbors": {
            "mean": float(k[have].mean()) if have.any() else None,
            "max": int(k[have].max()) if have.any() else None,
        },
    }
    return SideResult(rows, how, stats)


@register("focus")
def focus(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    vectors = str(params["vectors"])
    result = apply_neighbors(inputs, side, neighbors_for(inputs, vectors), "weighted", "focus")
    result.stats["vectors"] = vectors
    return result
