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

from dataclasses import dataclass
from typing import Any

import numpy as np

from embtransfer.transfer.aligned import softmax_neighbors, weighted_rows
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    check_aligned,
    column_moments,
    column_sum,
    empty_result,
)

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


@dataclass
class Factors:
    """``E ≈ P Q``: the coordinates ``P = E W`` (``W = V S⁻¹``, float64, h x r'; None at full
    rank, where ``P = E``), the primitive embeddings ``Q`` (r' x h, float32), the relative
    error of the dropped singular values and the Gram matrix ``EᵀE`` (float64; None at
    full rank). ``P`` is never formed whole: a method needs the coordinates of a few rows
    and their moments, and ``P`` for Gemma 3's 262k rows cost ~6 s of a core a job."""

    basis: np.ndarray | None
    Q: np.ndarray
    error: float
    gram: np.ndarray | None

    def coordinates(self, rows: np.ndarray) -> np.ndarray:
        """The coordinates (float32) of ``rows`` (source rows, or combinations of them: the
        map is linear)."""
        if self.basis is None:
            return np.asarray(rows, dtype=np.float32)
        return (np.asarray(rows, dtype=np.float64) @ self.basis).astype(np.float32)

    def moments(self, matrix: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std (float64, ddof 0) of the coordinates of ``matrix``'s rows ``ids``,
        from the Gram matrix of the factorised ``matrix`` less the rows outside ``ids``."""
        if self.basis is None or self.gram is None:
            return column_moments(matrix, 0, ids)
        outside = np.setdiff1d(np.arange(matrix.shape[0]), ids)
        rest = np.asarray(matrix[outside], dtype=np.float64)
        n = ids.size
        mean = column_sum(matrix, ids) / n
        covariance = (self.gram - rest.T @ rest) / n - np.outer(mean, mean)
        spread = np.einsum("ir,ij,jr->r", self.basis, covariance, self.basis)
        return mean @ self.basis, np.sqrt(np.maximum(spread, 0.0))


def factorize(matrix: np.ndarray, rank: int, chunk_rows: int = 16384) -> Factors:
    """The best rank-r' approximation of ``matrix``, ``r' = rank`` unless the matrix has
    fewer significant singular values (:class:`Factors`). At ``rank >= h``: ``P = E``,
    ``Q = I``, error 0.

    The SVD comes from the h x h Gram matrix in float64 (accumulated over row chunks: a
    256k x 4096 matrix is never copied whole): ``EᵀE = V S² Vᵀ``, ``Q = S Vᵀ``,
    ``P = E V S⁻¹`` (= U). The error is that of the dropped singular values,
    ``sqrt(Σ_dropped s² / Σ s²)`` (= ``‖E − P Q‖_F / ‖E‖_F``).
    """
    n, h = matrix.shape
    if rank >= h:
        return Factors(None, np.eye(h, dtype=np.float32), 0.0, None)
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
    v, sv = evecs[:, order[:keep]], sv[:keep]
    return Factors(v / sv, (sv[:, None] * v.T).astype(np.float32), error, gram)


@register("ofa")
def ofa(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    matrix, aligned = check_aligned(inputs, side, "ofa")
    h = matrix.shape[1]
    rank = resolve_rank(params["rank"], float(params["rank_fraction"]), h)
    # held-out rows out of the factorisation (they are no candidates either)
    visible = inputs.visible(matrix)
    factors = factorize(visible, rank)
    r = factors.Q.shape[0]
    coords = np.zeros((inputs.n_target, r), np.float32)
    _, how = empty_result(inputs, side)

    shared_t, shared_s = inputs.shared() if params["copy_shared"] else (np.zeros(0, np.int64),) * 2
    coords[shared_t] = factors.coordinates(visible[shared_s])
    how[shared_t] = "copied"

    todo = np.ones(inputs.n_target, bool)
    todo[shared_t] = False
    targets = np.nonzero(todo & ~aligned.target_missing)[0]
    lost = np.nonzero(todo & aligned.target_missing)[0]

    src_ids, sims, weights = softmax_neighbors(
        aligned, targets, params["k"], params["temperature"], n_source=matrix.shape[0],
        chunk_rows=params["chunk_rows"], chunk_cols=params["chunk_cols"],
    )
    # Σ w · P[source] = (Σ w · E[source]) W: the map to coordinates is linear
    coords[targets] = factors.coordinates(
        weighted_rows(visible, src_ids, weights, params["chunk_rows"]))
    how[targets] = "weighted"
    rng = inputs.rng("ofa", side)
    # no special / placeholder rows in the moments
    mean, std = factors.moments(visible, inputs.statistic_ids())
    coords[lost] = mean + std * rng.standard_normal((lost.size, r))
    how[lost] = "missing_vector"

    rows = np.empty((inputs.n_target, h), np.float32)
    chunk = int(params["chunk_rows"])
    for s in range(0, inputs.n_target, chunk):
        rows[s : s + chunk] = coords[s : s + chunk] @ factors.Q

    stats = {
        "rank": int(r),
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
        "reconstruction_rel_error": factors.error,
    }
    return SideResult(rows=rows, how=how, stats=stats)

