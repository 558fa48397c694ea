"""Orthogonal matching pursuit (OMP) coefficients in the format of SALT's projection.

The default of mergekit's ``mergekit-tokensurgeon`` (Goddard & Neto 2025, arXiv 2506.06607;
reference: ``mergekit.tokensurgeon.batch_omp``, mergekit 0.1.5). For each new token with
donor row ``x`` (here the target PLM's row) OMP greedily picks ``k`` candidate rows
``d_j`` (the shared tokens' PLM rows, unnormalised): at each step the candidate with the
largest ``|r . d_j|`` for the current residual ``r``, then refits ``x`` by least squares on
every row picked so far and updates ``r``. The final coefficients are that least-squares
fit; :func:`embtransfer.transfer.regression.apply_coefficients` combines the same tokens'
source rows with them, exactly as for SALT.

Arithmetic: Batch OMP (Rubinstein, Zibulevsky & Elad 2008). The residual is never
formed; its scores come from ``alpha0 = D x`` (one product per batch of tokens) and the
Gram matrix ``G = D D^T`` (once): after picks ``I`` with least-squares coefficients ``c``,
``alpha = alpha0 - G[I]^T c``, ``t`` of G's rows per token and step instead of a product
of width h (k/2 = 32 against h = 768 on average). ``c`` solves ``G[I, I] c = alpha0[I]``
through the Cholesky factor ``L`` of ``G[I, I]``, grown by one row per pick (``w = L^{-1}
G[I, j]``, diagonal ``sqrt(G[j, j] - w.w)``) and two triangular solves, all in float64 with
G's entries for the factor taken from the float64 rows. The scores run in float32 (G's
rows are gathered per token and step: memory-bound, so half float64's bytes are half its
time); where a token's best float32 scores lie closer than their error bound (doubled:
:data:`TIE_MARGIN` for ``alpha0``'s products, G's and ``c``'s roundings for the rest), those
candidates are rescored from the float64 residual ``x - D_I^T c``, so the choice is the
float64 one. Memory: G in float32 (N^2 * 4 bytes: 1.3 GB for N = 18,234) and, per batch of
tokens, their gathered rows of G (k x N float32 each) within ``batch_bytes``.

Early stop. A token stops before ``k`` when its residual vanishes (relative
:data:`RESIDUAL_TOL`; ``|r|^2 = |x|^2 - |L^{-1} alpha0[I]|^2``, and where that is near
zero the residual itself) or the next pick is linearly dependent on those before (its
orthogonal part, the new diagonal of ``L``, below :data:`DEPENDENT_TOL` of its norm, e.g.
more picks than the PLM's width); ``k_used`` is then smaller. The reference keeps picking
and divides by a clamped norm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from embtransfer.transfer.regression import DEFAULT_BATCH_BYTES, STATUSES

#: float32 products ``x . d_j`` are within this fraction of ``|x| * max|d_j|`` of the
#: float64 ones (a bound: h * 2**-24 = 4.6e-5 for h = 768, the worst case of float32
#: summation); candidates within twice the scores' bound of the best are rescored in float64.
TIE_MARGIN = 1e-4
#: The residual is zero below this fraction of the token's row norm: stop.
RESIDUAL_TOL = 1e-10
#: A pick whose part orthogonal to the picks before is below this fraction of its norm adds
#: nothing (its square comes from a float64 subtraction: resolved to ~1e-8 of the norm).
DEPENDENT_TOL = 1e-7
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
    ``k_used`` are -1 and 0. ``k`` is capped by N. Batches of tokens keep their work
    (scores, the picked rows of the Gram matrix and of the candidates, the Cholesky
    factor) under ``batch_bytes``; the Gram matrix itself (N x N float32) is shared.
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
    d32 = d64.to(torch.float32)
    # G = D D^T (N, N), once: products in float64, stored rounded to float32 (so each
    # entry is within 2**-24 of its own size), in blocks of rows to bound the float64 part
    gram = torch.empty(n, n, dtype=torch.float32)
    step = max(1, (64 * 2**20) // (8 * n))
    for i in range(0, n, step):
        gram[i : i + step] = d64[i : i + step] @ d64.T
    budget = batch_bytes or DEFAULT_BATCH_BYTES["cpu"] * 32
    # per token: alpha0, alpha, scores (float32, N each); the picked rows of G (k x N
    # float32) and of D (k x h float64); the factor L (k x k float64)
    per_token = 4 * (3 + k) * n + 8 * (k * h + k * k + 4 * h)
    size = max(1, min(b_total, budget // per_token))
    for start in range(0, b_total, size):
        stop = min(start + size, b_total)
        p, c, u = _omp_batch(x_all[start:stop], d64, d32, gram, k, tie_margin)
        picked[start:stop], coef[start:stop], k_used[start:stop] = p, c, u
    return picked, coef, k_used


def _pick(
    alpha: torch.Tensor, window: torch.Tensor, resid: Callable[[torch.Tensor], torch.Tensor],
    d64: torch.Tensor, done: torch.Tensor,
) -> torch.Tensor:
    """Each token's candidate with the largest float64 ``|r . d_j|`` (rows in ``done``
    excluded), from the float32 scores ``alpha``; candidates whose score is within
    ``window`` (the float32 error bound, doubled) of the best are rescored in float64
    from the exact residual ``resid(rows)``."""
    scores = alpha.abs_().scatter_(1, done, -1.0)
    best, new = scores.max(dim=1)
    floor = best - window
    some = ((scores >= floor[:, None]).sum(dim=1) > 1).nonzero().squeeze(1)
    if some.numel() == 0:
        return new
    width = min(16, scores.shape[1])
    top, idx = scores[some].topk(width, dim=1)
    inside = top >= floor[some, None]
    idx_all = torch.zeros(scores.shape[0], width, dtype=torch.int64)
    inside_all = torch.zeros(scores.shape[0], width, dtype=torch.bool)
    idx_all[some], inside_all[some] = idx, inside
    idx, inside = idx_all, inside_all
    r64 = resid(some)  # (n, h) float64
    wide = inside[some, -1]  # the window may hold more than `width`: a whole row
    if wide.any():
        rows = some[wide]
        exact = (r64[wide] @ d64.T).abs_().scatter_(1, done[rows], -1.0)
        new[rows] = exact.argmax(dim=1)
    few = ~wide
    if few.any():
        rows = some[few]
        exact = torch.bmm(d64[idx[rows]], r64[few].unsqueeze(-1)).squeeze(-1).abs_()
        exact = torch.where(inside[rows], exact, torch.full_like(exact, -1.0))
        new[rows] = idx[rows].gather(1, exact.argmax(dim=1, keepdim=True)).squeeze(1)
    return new


def _omp_batch(
    x: torch.Tensor, d64: torch.Tensor, d32: torch.Tensor, gram: torch.Tensor, k: int,
    tie_margin: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b, h = x.shape
    n = d64.shape[0]
    d_norm = d64.norm(dim=1)
    d_sq = d_norm.square()
    d_max = float(d_norm.max())
    # float32 error bound of a score alpha_j = alpha0_j - sum_s c_s G[s, j], over d_max:
    # alpha0's product of width h, (h + 2) * 2**-24 * |x|; G's rounding, c's and the
    # sum over t <= k picks, (k + 3) * 2**-24 * sum_s |c_s| |d_s|; both doubled for safety
    margin_x = max(tie_margin, 2 * (h + 2) * 2.0**-24)
    margin_c = 2 * (k + 3) * 2.0**-24
    x32 = x.to(torch.float32)
    alpha0 = x32 @ d32.T  # (b, N) float32: x . d_j
    alpha = alpha0.clone()
    # G's and D's rows of the picks, slot-major: a step's gather writes one block
    g_rows = torch.empty(k, b, n, dtype=torch.float32)
    d_rows = torch.empty(k, b, h, dtype=torch.float64)
    chol = torch.zeros(b, k, k, dtype=torch.float64)  # L: G[I, I] = L L^T
    y = torch.zeros(b, k, dtype=torch.float64)  # L^{-1} (x . d_I): x's part on each pick
    coef = torch.zeros(b, k, dtype=torch.float64)
    picked = torch.full((b, k), -1, dtype=torch.int64)
    active = torch.ones(b, dtype=torch.bool)
    x_sq = x.square().sum(dim=1)
    x_norm = x_sq.sqrt()

    def resid(sel: torch.Tensor, t: int) -> torch.Tensor:
        """x - D_I^T c in float64 for the tokens ``sel`` (t picks so far)."""
        if t == 0:
            return x[sel]
        return torch.baddbmm(x[sel, None], coef[sel, None, :t],
                             d_rows[:t, sel].transpose(0, 1), alpha=-1).squeeze(1)

    for t in range(k):
        done = picked[:, :t].clamp(min=0)  # a stopped token's -1s: it picks no more
        spread = margin_x * x_norm + margin_c * (coef[:, :t].abs() * d_norm[done]).sum(dim=1)
        window = (2 * d_max * spread).to(torch.float32)
        new = _pick(alpha, window, lambda sel, t=t: resid(sel, t), d64, done)
        atom = torch.index_select(d64, 0, new, out=d_rows[t])  # (b, h)
        torch.index_select(gram, 0, new, out=g_rows[t])
        # Cholesky update: w = L^{-1} G[I, j] (G's entries exact, from float64 rows)
        g_new = torch.bmm(d_rows[:t].transpose(0, 1), atom.unsqueeze(-1))  # (b, t, 1)
        w = torch.linalg.solve_triangular(chol[:, :t, :t], g_new, upper=False).squeeze(-1)
        diag_sq = d_sq[new] - w.square().sum(dim=1)
        # the part of d_j orthogonal to the picks has norm sqrt(diag_sq)
        active &= diag_sq > (DEPENDENT_TOL * d_norm[new]).square()
        if not active.any():
            break
        # stopped tokens' slots: L's row e_t and y 0, so their coefficients come out 0
        diag = torch.where(active, diag_sq, 1.0).sqrt_()
        picked[:, t] = torch.where(active, new, -1)
        chol[:, t, :t] = w * active[:, None]
        chol[:, t, t] = diag
        y_t = ((x * atom).sum(dim=1) - (w * y[:, :t]).sum(dim=1)) / diag
        y[:, t] = torch.where(active, y_t, 0.0)
        # c = (L L^T)^{-1} (x . d_I) = L^{-T} y
        coef[:, : t + 1] = torch.linalg.solve_triangular(
            chol[:, : t + 1, : t + 1].mT, y[:, : t + 1, None], upper=True).squeeze(-1)
        # |r|^2 = |x|^2 - |y|^2; near zero it loses its digits: the residual itself there
        r_sq = x_sq - y[:, : t + 1].square().sum(dim=1)
        small = (active & (r_sq <= 1e-8 * x_sq)).nonzero().squeeze(1)
        if small.numel():
            r_norm = resid(small, t + 1).norm(dim=1)
            active[small] = r_norm > RESIDUAL_TOL * x_norm[small]
        if t + 1 < k:
            # alpha = alpha0 - G[I]^T c: the scores of the new residual
            alpha = torch.baddbmm(alpha0.unsqueeze(1), coef[:, None, : t + 1].to(torch.float32),
                                  g_rows[: t + 1].transpose(0, 1), alpha=-1).squeeze(1)
    used = (picked >= 0).sum(dim=1)
    coef[picked < 0] = 0.0
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
