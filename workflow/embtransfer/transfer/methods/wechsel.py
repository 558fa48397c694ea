"""WECHSEL (Minixhofer et al., NAACL 2022): softmax over top-k aligned source tokens.

Reference: github.com/CPJKU/wechsel, ``wechsel/__init__.py``
(``create_target_embeddings``, ``WECHSEL.apply``). For every target token with
an aligned vector: cosine similarity to every source token's aligned vector,
the ``k = 10`` most similar, weights ``softmax(sim / 0.1)`` over those, new
row = ``Σ w · E_s[source]``. As the reference:

* shared tokens are *not* copied (``copy_shared=False``): they get weighted
  rows like any other token. Only special tokens are copied from the source
  (the reference copies the source tokenizer's special tokens found in the
  target vocabulary; here the overlap's ``how == "special"`` rows).
  ``copy_shared=True`` copies every shared token, the project's convention.
* tokens without a vector get a row from N(mean, std) of the source rows
  (label ``missing_vector``).

The token strings and the dictionary alignment come from the aligned stage
(:mod:`embtransfer.transfer.aligned`): by default special tokens and partial-UTF-8
pieces have no vector, so they are never neighbours; config
``aligned: {token_strings: decode, duplicate_variants: true}`` reproduces the
``wechsel`` 0.0.4 package, which ``tests/test_reference_packages.py`` checks
row by row. Remaining differences: the reference ranks all source tokens,
those with a zero vector at similarity 0, here only source tokens with a
vector are candidates (it matters only when fewer than ``k`` sources have a
positive cosine); exact ties at the k-th place are broken by another order;
random rows come from another generator (numpy ``default_rng`` per seed, the
reference ``RandomState(1234)``). The untied output side reuses the same
neighbours and weights on the source LM head's rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.aligned import softmax_neighbors, weighted_rows
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import check_aligned, empty_result, source_normal


@register("wechsel")
def wechsel(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    matrix, aligned = check_aligned(inputs, side, "wechsel")
    rows, how = empty_result(inputs, side)

    shared_t, shared_s = inputs.shared()
    if not params["copy_shared"]:
        special = inputs.overlap["how"].to_numpy() == "special"
        order = np.argsort(inputs.overlap["target_id"].to_numpy(), kind="stable")
        keep = special[order]
        shared_t, shared_s = shared_t[keep], shared_s[keep]
    rows[shared_t] = matrix[shared_s]
    how[shared_t] = "copied"

    todo = np.ones(inputs.n_target, bool)
    todo[shared_t] = False
    have = todo & ~aligned.target_missing
    lost = np.nonzero(todo & aligned.target_missing)[0]
    targets = np.nonzero(have)[0]

    src_ids, sims, weights = softmax_neighbors(
        aligned, targets, params["k"], params["temperature"], n_source=matrix.shape[0],
        chunk_rows=params["chunk_rows"], chunk_cols=params["chunk_cols"],
    )
    rows[targets] = weighted_rows(matrix, src_ids, weights, params["chunk_rows"])
    how[targets] = "weighted"
    rows[lost] = source_normal(inputs, side, inputs.rng("wechsel", side), lost.size)
    how[lost] = "missing_vector"

    stats = {
        "k": int(params["k"]),
        "k_effective": int(src_ids.shape[1]) if targets.size else 0,
        "temperature": float(params["temperature"]),
        "copy_shared": bool(params["copy_shared"]),
        "n_copied": int(shared_t.size),
        "n_weighted": int(targets.size),
        "n_missing_vector": int(lost.size),
        "n_source_candidates": int((~aligned.source_missing[: matrix.shape[0]]).sum()),
        "mean_top1_similarity": float(sims[:, 0].mean()) if sims.size else None,
        "mean_top1_weight": float(weights[:, 0].mean()) if weights.size else None,
    }
    return SideResult(rows=rows, how=how, stats=stats)
