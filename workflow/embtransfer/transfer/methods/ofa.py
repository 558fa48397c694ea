"""OFA (Liu et al., NAACL Findings 2024): low-rank coordinates averaged over aligned neighbours.

Reference: github.com/cisnlp/ofa, ``ofa/utils.py`` (``perform_factorize``,
``create_target_embeddings``) and ``ofa/ofa.py`` (``run_ofa``). As there:

* Factorise the source matrix by SVD, ``E_s = U S Vᵀ``: coordinates
  ``P = U[:, :r]`` (V_s x r), primitive embeddings ``Q = S[:r] Vᵀ[:r]`` (r x h_s).
  At ``r >= h_s`` the reference does not factorise (``P = E_s``, ``Q = I``);
  so do we, which makes copied rows exact.
* Shared tokens copy their source token's *coordinates* (so at ``r < h_s`` a
  copied row is the rank-r approximation of the source row).
* Every other token with a vector: its ``k = 10`` most cosine-similar source
  tokens among *all* source tokens (not only shared ones) in the multilingual
  space, weights ``softmax(sim / 0.1)``, coordinates = ``Σ w · P[source]``.
* Tokens without a vector: coordinates from N(mean, std) of ``P`` per
  dimension (the reference's ``random_fallback_matrix``), label ``missing_vector``.
* New rows = coordinates · Q.

The reference's multilingual space is ConceptNet-based word vectors (a token
vector = mean of the word vectors of the words it appears in); here it is the
aligned fastText space of :mod:`embtransfer.transfer.aligned`, as for WECHSEL. The
reference ranks zero-vector source tokens too (at similarity 0); here only
source tokens with a vector are candidates.

Rank: the reference runs ``keep_dim`` 100, 200, 400 and 768 for XLM-R
(h = 768). ``rank=None`` takes ``round(rank_fraction · h_s)`` with
``rank_fraction = 400/768`` (OFA's 400 of 768), at least 1. The untied output
side factorises the LM head separately.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.aligned import softmax_neighbors, weighted_rows
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import check_aligned, empty_result

#: Singular values below this fraction of the largest are dropped (a rank-deficient
#: matrix would otherwise divide by ~0 when forming the coordinates).
_RTOL = 1e-6


def resolve_rank(rank: int | None, fraction: float, h: int) -> int:
    if rank is None:
        if not 0 < fraction <= 1:
            raise ValueError(f"rank_fraction must be in (0, 1], got {fraction}")
        return max(1, round(fraction * h))
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise ValueError(f"rank must be a positive integer or None, got {rank!r}")
    return int(rank)


def factorize(
    matrix: np.ndarray, rank: int, chunk_rows: int = 16384
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(P (V x r'), Q (r' x h), error)``: ``P Q`` the best rank-r' approximation of
    ``matrix`` and ``error = ‖E − P Q‖_F / ‖E‖_F``.

    ``r' = rank`` unless the matrix has fewer significant singular values. At
    ``rank >= h`` returns ``(matrix, I, 0)``. The SVD comes from the h x h Gram
    matrix in float64 (accumulated over row chunks: a 256k x 4096 matrix is
    never copied whole): ``EᵀE = V S² Vᵀ``, ``Q = S Vᵀ``, ``P = E V S⁻¹`` (= U). The
    error is that of the dropped singular values, ``sqrt(Σ_dropped s² / Σ s²)``
    (a second pass over E for it took 7.7 s at Gemma 3's 262k x 1,152).
    """
    n, h = matrix.shape
    if rank >= h:
        return matrix.astype(np.float32, copy=False), np.eye(h, dtype=np.float32), 0.0
    gram = np.zeros((h, h), np.float64)
    for s in range(0, n, chunk_rows):
        block = matrix[s : s + chunk_rows].astype(np.float64)
        gram += block.T @ block
    evals, evecs = np.linalg.eigh(gram)
    order = np.argsort(evals)[::-1]
    power = np.clip(evals[order], 0.0, None)
    sv = np.sqrt(power)
    keep = min(rank, int((sv > sv[0] * _RTOL).sum())) if sv[0] > 0 else 0
    if keep == 0:
        raise ValueError("cannot factorise an all-zero matrix")
    error = float(np.sqrt(power[keep:].sum() / power.sum()))
    v = evecs[:, order[:keep]]
    sv = sv[:keep]
    Q = sv[:, None] * v.T
    P = np.empty((n, keep), np.float32)
    for s in range(0, n, chunk_rows):
        P[s : s + chunk_rows] = (matrix[s : s + chunk_rows].astype(np.float64) @ v) / sv
    return P, Q.astype(np.float32), error


@register("ofa")
def ofa(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    matrix, aligned = check_aligned(inputs, side, "ofa")
    h = matrix.shape[1]
    rank = resolve_rank(params["rank"], float(params["rank_fraction"]), h)
    # held-out rows out of the factorisation (they are no candidates either)
    P, Q, rel_error = factorize(inputs.visible(matrix), rank)
    coords = np.zeros((inputs.n_target, P.shape[1]), np.float32)
    _, how = empty_result(inputs, side)

    shared_t, shared_s = inputs.shared() if params["copy_shared"] else (np.zeros(0, np.int64),) * 2
    coords[shared_t] = P[shared_s]
    how[shared_t] = "copied"

    todo = np.ones(inputs.n_target, bool)
    todo[shared_t] = False
    targets = np.nonzero(todo & ~aligned.target_missing)[0]
    lost = np.nonzero(todo & aligned.target_missing)[0]

    src_ids, sims, weights = softmax_neighbors(
        aligned, targets, params["k"], params["temperature"], n_source=matrix.shape[0],
        chunk_rows=params["chunk_rows"], chunk_cols=params["chunk_cols"],
    )
    coords[targets] = weighted_rows(P, src_ids, weights, params["chunk_rows"])
    how[targets] = "weighted"
    rng = inputs.rng("ofa", side)
    text_rows = P[inputs.statistic_ids()]  # no special / placeholder rows
    mean, std = text_rows.mean(axis=0), text_rows.std(axis=0)
    coords[lost] = mean + std * rng.standard_normal((lost.size, P.shape[1]))
    how[lost] = "missing_vector"

    rows = np.empty((inputs.n_target, h), np.float32)
    chunk = int(params["chunk_rows"])
    for s in range(0, inputs.n_target, chunk):
        rows[s : s + chunk] = coords[s : s + chunk] @ Q

    stats = {
        "rank": int(P.shape[1]),
        "factorized": bool(rank < h),
        "rank_requested": int(rank),
        "hidden": int(h),
        "k": int(params["k"]),
        "temperature": float(params["temperature"]),
        "copy_shared": bool(params["copy_shared"]),
        "n_copied": int(shared_t.size),
        "n_weighted": int(targets.size),
        "n_missing_vector": int(lost.size),
        "n_source_candidates": int((~aligned.source_missing[: matrix.shape[0]]).sum()),
        "mean_top1_similarity": float(sims[:, 0].mean()) if sims.size else None,
        "reconstruction_rel_error": rel_error,
    }
    return SideResult(rows=rows, how=how, stats=stats)

