"""One global least-squares map from the PLM space to the source space (Gosal et al.).

Fitted on the shared tokens, per side: with ``X = [E_t 1]`` (the PLM rows of the
shared target ids and a constant column for the bias) and ``Y`` their source rows,
``[W; b] = argmin ||X [W; b] - Y||^2`` (+ ``ridge * ||W||^2`` when ``ridge > 0``;
the bias is not penalised). Every non-shared target token gets ``[e_t 1] [W; b]``
(``projected``); shared tokens copy their source row (``copied``).

Solved in float64 by ``numpy.linalg.lstsq`` (SVD, LAPACK gelsd). ``rcond`` has its
meaning: singular values of ``X`` at or below ``rcond * sigma_max`` count as zero;
the default ``None`` is numpy's, ``eps(float64) * max(n_shared, h_t + 1)`` (about
7e-12 for 30,000 shared tokens). Ridge is solved as least squares on ``X`` stacked
with ``sqrt(ridge) * I`` rows (zero target), so the same solver and rcond apply.
Shared pairs are sorted by target id first, so their order changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import copy_shared, empty_result


def fit_lstsq(
    x: np.ndarray, y: np.ndarray, *, rcond: float | None = None, ridge: float = 0.0,
    bias: bool = True,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``[W; b]`` ((h_t + 1) x h_s with ``bias``, else h_t x h_s) and fit statistics."""
    if ridge < 0:
        raise ValueError(f"lstsq: ridge must be >= 0, got {ridge}")
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    n, h_t = x.shape
    design = np.hstack([x, np.ones((n, 1))]) if bias else x
    target = y
    if ridge > 0:
        penalty = np.zeros((h_t, design.shape[1]))
        penalty[:, :h_t] = np.sqrt(ridge) * np.eye(h_t)
        design = np.vstack([design, penalty])
        target = np.vstack([y, np.zeros((h_t, y.shape[1]))])
    coef, _, rank, singular = np.linalg.lstsq(design, target, rcond=rcond)
    fitted = design[:n] @ coef
    denom = float(np.linalg.norm(y))
    stats = {
        "n_fit": int(n),
        "rank": int(rank),
        "columns": int(design.shape[1]),
        "condition": float(singular[0] / singular[-1]) if singular[-1] > 0 else None,
        "relative_residual": float(np.linalg.norm(fitted - y) / denom) if denom else None,
    }
    return coef, stats


def apply_lstsq(coef: np.ndarray, x: np.ndarray, bias: bool = True) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if bias:
        return (x @ coef[:-1] + coef[-1]).astype(np.float32)
    return (x @ coef).astype(np.float32)


@register("lstsq")
def lstsq(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    plm = inputs.plm_input
    if plm is None:
        raise ValueError("lstsq needs the target PLM's input embeddings (inputs.plm_input)")
    if plm.shape[0] < inputs.n_target:
        raise ValueError(
            f"lstsq: the PLM has {plm.shape[0]} embedding rows for {inputs.n_target} target tokens"
        )
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    shared_t, shared_s = inputs.shared()  # sorted by target id: order-independent fit
    if shared_t.size == 0:
        raise ValueError("lstsq: no shared tokens to fit the map on")
    coef, stats = fit_lstsq(
        plm[shared_t], inputs.source_matrix(side)[shared_s],
        rcond=params["rcond"], ridge=float(params["ridge"]), bias=bool(params["bias"]),
    )
    others = np.flatnonzero(how == "unset")
    rows[others] = apply_lstsq(coef, plm[others], bool(params["bias"]))
    how[others] = "projected"
    stats["counts"] = {"copied": int(shared_t.size), "projected": int(others.size)}
    if stats["n_fit"] < stats["columns"]:
        stats["underdetermined"] = True  # fewer shared tokens than unknowns: min-norm map
    return SideResult(rows=rows, how=how, stats=stats)
