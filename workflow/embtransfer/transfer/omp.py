"""Orthogonal matching pursuit (OMP) coefficients in the format of SALT's projection.

The default of mergekit's ``mergekit-tokensurgeon`` (Goddard & Neto 2025, arXiv 2506.06607;
reference: ``mergekit.tokensurgeon.batch_omp``, mergekit 0.1.5). For each new token with
donor row ``x`` (here the target PLM's row) OMP greedily picks ``k`` candidate rows
``d_j`` (the shared tokens' PLM rows, unnormalised): at each step the candidate with the
largest ``|r . d_j|`` for the current residual ``r``, then refits ``x`` by least squares on
every row picked so far and updates ``r``. The final coefficients are that least-squares
fit; :func:`embtransfer.transfer.regression.apply_coefficients` combines the same tokens'
source rows with them, exactly as for SALT.

Arithmetic. Each step's scores ``R D^T`` (a batch of residuals against every candidate)
are one matrix product and dominate the cost (``k`` products of batch x h x N). They run
in float32, at twice float64's speed; where a token's best float32 scores lie closer
than float32's error bound (:data:`TIE_MARGIN`), those candidates are rescored in
float64, so the choice is the float64 one. The basis of picked rows is orthogonalised in
float64 (classical Gram-Schmidt, one pass, as the reference), the residual updated from
it, and the coefficients solved from the triangular factor at the end. A Gram-matrix
formulation (Rubinstein, Zibulevsky & Elad 2008) does ``k/2 / h`` of the score arithmetic
but reads a private ``N x t`` block per token and step: memory-bound by estimate, not
tried (benchmarks/README.md, ``bench_omp.py``).

Early stop. A token stops before ``k`` when its residual vanishes (relative
:data:`RESIDUAL_TOL`) or the next pick is linearly dependent on those before (its
orthogonal part below :data:`DEPENDENT_TOL` of its norm, e.g. more picks than the PLM's
width); ``k_used`` is then smaller. The reference keeps picking and divides by a clamped
norm.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from embtransfer.transfer.regression import DEFAULT_BATCH_BYTES, STATUSES

#: float32 scores are within this fraction of ``|r| * max|d_j|`` of the float64 ones (a
#: bound: h * 2**-24 = 4.6e-5 for h = 768, the worst case of float32 summation); candidates
#: within twice it of the best are rescored in float64.
TIE_MARGIN = 1e-4
#: The residual is zero below this fraction of the token's row norm: stop.
RESIDUAL_TOL = 1e-10
#: A pick whose part orthogonal to the basis is below this fraction of its norm adds nothing.
DEPENDENT_TOL = 1e-8
#: A donor row whose norm is below this fraction of the candidates' median norm (or is not
#: finite) is degenerate: the token is not fitted (status ``zero_row``).
ZERO_ROW_TOL = 1e-6


def omp_select(
    targets: np.ndarray,
    candidates: np.ndarray,
    k: int,
    *,
    batch_bytes: int | None = None,
    tie_margin: float = TIE_MARGIN,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OMP of each row of ``targets`` (B, h) over the rows of ``candidates`` (N, h).

    Returns (``picked`` (B, k) int64 candidate indices in pick order, ``coef`` (B, k)
    float64 least-squares coefficients, ``k_used`` (B,) int64): entries past a token's
    ``k_used`` are -1 and 0. ``k`` is capped by N. Batches of tokens keep their float64
    work (basis and scores) under ``batch_bytes``.
    """
    x_all = torch.from_numpy(np.ascontiguousarray(targets, np.float64))
    d64 = torch.from_numpy(np.ascontiguousarray(candidates, np.float64))
    n, h = d64.shape
    if x_all.shape[1] != h:
        raise ValueError(f"targets have width {x_all.shape[1]}, candidates {h}")
    k = min(int(k), n)
    b_total = x_all.shape[0]
    picked = np.full((b_total, k), -1, np.int64)
    coef = np.zeros((b_total, k), np.float64)
    k_used = np.zeros(b_total, np.int64)
    if b_total == 0 or k == 0:
        return picked, coef, k_used
    d32t = d64.to(torch.float32).T.contiguous()
    budget = batch_bytes or DEFAULT_BATCH_BYTES["cpu"] * 4
    # per token: scores (f32 + f64 spare), basis k x h and the triangle k x k in float64
    per_token = 12 * n + 8 * (k * h + k * k + 4 * h)
    size = max(1, min(b_total, budget // per_token))
    for start in range(0, b_total, size):
        stop = min(start + size, b_total)
        p, c, u = _omp_batch(x_all[start:stop], d64, d32t, k, tie_margin)
        picked[start:stop], coef[start:stop], k_used[start:stop] = p, c, u
    return picked, coef, k_used


def _pick(
    resid: torch.Tensor, d64: torch.Tensor, d32t: torch.Tensor, d_max: float,
    done: torch.Tensor, tie_margin: float,
) -> torch.Tensor:
    """Each residual's candidate with the largest float64 ``|r . d_j|`` (rows in ``done``
    excluded), scored in float32 and rescored in float64 where float32 cannot tell."""
    scores = (resid.to(torch.float32) @ d32t).abs_().scatter_(1, done, -1.0)
    width = min(4, scores.shape[1])
    top, idx = scores.topk(width, dim=1)
    # float32 scores are within tie_margin * |r| * max|d_j| of the float64 ones
    window = top[:, :1] - 2 * tie_margin * d_max * resid.norm(dim=1, keepdim=True).float()
    inside = top >= window
    new = idx[:, 0].clone()
    some = inside[:, 1:].any(dim=1)
    if not some.any():
        return new
    wide = some & inside[:, -1]  # the window may hold more than `width`: a whole row
    if wide.any():
        exact = (resid[wide] @ d64.T).abs_().scatter_(1, done[wide], -1.0)
        new[wide] = exact.argmax(dim=1)
    few = some & ~wide
    if few.any():
        rows = d64[idx[few]]  # (n, width, h)
        exact = torch.bmm(rows, resid[few].unsqueeze(-1)).squeeze(-1).abs_()
        exact = torch.where(inside[few], exact, torch.full_like(exact, -1.0))
        new[few] = idx[few].gather(1, exact.argmax(dim=1, keepdim=True)).squeeze(1)
    return new


def _omp_batch(
    x: torch.Tensor, d64: torch.Tensor, d32t: torch.Tensor, k: int, tie_margin: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b, h = x.shape
    rows = torch.arange(b)
    d_max = float(d64.norm(dim=1).max())
    # the float32 error bound grows with the width: h * 2**-24, doubled for safety
    tie_margin = max(tie_margin, 2 * (h + 2) * 2.0**-24)
    q = torch.zeros(b, k, h, dtype=torch.float64)  # orthonormal basis, one row per pick
    r = torch.zeros(b, k, k, dtype=torch.float64)  # picked rows = R^T Q (upper R)
    qx = torch.zeros(b, k, dtype=torch.float64)  # Q x
    picked = torch.full((b, k), -1, dtype=torch.int64)
    active = torch.ones(b, dtype=torch.bool)
    x_norm = x.norm(dim=1)
    resid = x.clone()
    for t in range(k):
        done = picked[:, :t].clamp(min=0)  # a stopped token's -1s: it picks no more
        new = _pick(resid, d64, d32t, d_max, done, tie_margin)
        atom = d64[new].unsqueeze(-1)  # (b, h, 1)
        basis = q[:, :t]  # (b, t, h)
        proj = torch.bmm(basis, atom)  # (b, t, 1)
        # one Gram-Schmidt pass, as the reference: float64 keeps k = 64 rows orthogonal
        w = (atom - torch.bmm(basis.mT, proj)).squeeze(-1)
        proj = proj.squeeze(-1)
        w_norm = w.norm(dim=1)
        active &= w_norm > DEPENDENT_TOL * atom.squeeze(-1).norm(dim=1)
        if not active.any():
            break
        sel = rows[active]
        q_t = w[sel] / w_norm[sel, None]
        picked[sel, t] = new[sel]
        q[sel, t] = q_t
        r[sel, :t, t] = proj[sel]
        r[sel, t, t] = w_norm[sel]
        step = (q_t * resid[sel]).sum(dim=1)
        qx[sel, t] = step
        resid[sel] -= step[:, None] * q_t
        active &= resid.norm(dim=1) > RESIDUAL_TOL * x_norm
    used = (picked >= 0).sum(dim=1)
    # Unused slots: R's diagonal 1 and Q x 0, so their coefficients come out 0.
    unused = picked < 0
    r[unused.unsqueeze(1).expand(-1, k, -1) & torch.eye(k, dtype=torch.bool)] = 1.0
    coef = torch.linalg.solve_triangular(r, qx.unsqueeze(-1), upper=True).squeeze(-1)
    coef[unused] = 0.0
    return picked.numpy(), coef.numpy(), used.numpy()


def omp_coefficients(
    donor: np.ndarray,
    target_ids: np.ndarray,
    candidate_target_ids: np.ndarray,
    candidate_source_ids: np.ndarray,
    *,
    k: int = 64,
    centered: bool = False,
    batch_bytes: int | None = None,
) -> dict[str, Any]:
    """OMP coefficients of the tokens ``target_ids`` over the candidates, as
    :func:`embtransfer.transfer.regression.salt_coefficients` returns SALT's.

    ``donor`` (V_t, h_t) holds the donor's rows by target id (the PLM's input or output
    rows); candidate ``j`` is the target token ``candidate_target_ids[j]``, whose source
    row is ``candidate_source_ids[j]``. With ``centered`` the candidates' mean donor row is
    subtracted from candidates and targets before the fit (``stats["centered"]``); the
    method adds the matching source offset. Tokens whose donor row is degenerate get
    status ``zero_row`` and no coefficients.
    """
    t0 = time.perf_counter()
    target_ids = np.asarray(target_ids, np.int64)
    cand_t = np.asarray(candidate_target_ids, np.int64)
    cand_s = np.asarray(candidate_source_ids, np.int64)
    if cand_t.size == 0:
        raise ValueError("OMP needs shared tokens as candidates; the overlap has none")
    cands = np.asarray(donor[cand_t], np.float64)
    xs = np.asarray(donor[target_ids], np.float64)
    if centered:
        mean = cands.mean(axis=0)
        cands = cands - mean
        xs = xs - mean
    norms = np.linalg.norm(xs, axis=1)
    floor = ZERO_ROW_TOL * float(np.median(np.linalg.norm(cands, axis=1)))
    good = np.isfinite(norms) & (norms > floor)
    picked, coef, used = omp_select(xs[good], cands, k, batch_bytes=batch_bytes)
    k_used = np.zeros(target_ids.size, np.int32)
    k_used[good] = used
    keep = picked >= 0
    status = np.where(good, STATUSES.index("projected"), STATUSES.index("zero_row"))
    return {
        "target_ids": target_ids,
        "k_used": k_used,
        "status": np.asarray(STATUSES, dtype=object)[status],
        "source_ids": cand_s[picked[keep]],  # row-major: each token's picks in order
        "coefficients": coef[keep],
        "candidate_ids": picked[keep],  # index into the candidates (tests, stats)
        "stats": {
            "n_tokens": int(target_ids.size),
            "n_candidates": int(cand_t.size),
            "k": int(min(k, cand_t.size)),
            "n_zero_row": int((~good).sum()),
            "n_stopped_early": int((used < min(k, cand_t.size)).sum()),
            "centered": bool(centered),
            "seconds": round(time.perf_counter() - t0, 4),
        },
    }
