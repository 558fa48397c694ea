"""Orthogonal matching pursuit (OMP) coefficients in the format of SALT's projection.

The default of mergekit's ``mergekit-tokensurgeon`` (Goddard & Neto 2025, arXiv 2506.06607;
reference: ``mergekit.tokensurgeon.batch_omp``, mergekit 0.1.5). For each new token with
donor row ``x`` (here the target PLM's row) OMP greedily picks ``k`` candidate rows
``d_j`` (the shared tokens' PLM rows, unnormalised): at each step the candidate with the
largest ``|r . d_j|`` for the current residual ``r``, then refits ``x`` by least squares on
every row picked so far and updates ``r``. The final coefficients are that least-squares
fit; :func:`embtransfer.transfer.regression.apply_coefficients` combines the same tokens'
source rows with them, exactly as for SALT.

Arithmetic. Each step scores every candidate at once: one product of the batch's
residuals (tokens x h) with all candidate rows (h x N) in the faster precision here
(:func:`default_score_dtype`: bfloat16 on AMX, ~0.65 TFLOPS a core; float32 elsewhere, ~0.14
TFLOPS a core with AVX-512, where oneDNN's bfloat16 without AMX runs at ~0.1), which
is compute-bound, where Batch OMP's Gram update (``alpha0 - G[I]^T c``, the previous
version) read t of G's rows per token and step from memory. The pick must still be the
float64 one: :class:`_Screen` bounds each low-precision score's error (the rows' roundings
by Cauchy-Schwarz, the float32 sums, the result's rounding), keeps the candidates that may
beat the best within those bounds (about 7 of 4,828 at h = 768), rescores them in float32
(sampled products: only those pairs) and, where float32 still leaves a near tie, from the
float64 residual. The coefficients come from the inverse ``L^{-1}`` of the Cholesky factor
``L`` of ``G[I, I]``, grown by one row per pick (``w = L^{-1} G[I, j]``, diagonal
``d = sqrt(G[j, j] - w.w)``, new row ``(-w^T L^{-1} / d, 1 / d)``): two small products a
step and a rank-1 update of ``c = L^{-T} y``, no triangular solves, in float64 with G's
entries from the float64 Gram matrix (kept where it takes at most :data:`GRAM_BYTES`,
N <= 11,585) or from sampled float64 products of the new pick with the picks before.
The residual ``x - D_I^T c`` for the next product is formed in float32 by a sparse (CSR)
product of the coefficients with the candidates (no per-token copies of the picked rows),
with a bound on its distance to the float64 one that the screen adds to its own.
Memory: per batch of tokens, the scores (N bfloat16 each) and ``L^{-1}`` (k x k float64).
Threads: batches run side by side in single-threaded worker threads (torch releases the
GIL in its operations), not with torch's intra-op threads, which each step's many small
operations do not use well.

Early stop. A token stops before ``k`` when its residual vanishes (relative
:data:`RESIDUAL_TOL`; ``|r|^2 = |x|^2 - |L^{-1} alpha0[I]|^2``, and where that is near
zero the residual itself) or the next pick is linearly dependent on those before (its
orthogonal part, the new diagonal of ``L``, below :data:`DEPENDENT_TOL` of its norm, e.g.
more picks than the PLM's width); ``k_used`` is then smaller. The reference keeps picking
and divides by a clamped norm.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from embtransfer.core.workspace import Workspace
from embtransfer.transfer.regression import DEFAULT_BATCH_BYTES, STATUSES

#: Tokens per batch at most: the scores' product (tokens x h by h x N) runs near the CPU's
#: peak from about 256 rows; 1,024 share each step's ~40 small operations more (5-9 %
#: faster than 512 at t5_de's size, benchmarks/README.md).
BATCH_TOKENS = 1024
#: Tokens per batch at least when batches are split across threads (torch's thread count).
MIN_THREAD_TOKENS = 64
#: Candidates per block of the first scan: the scores are read once for each block's
#: maximum, then again only in the blocks that reach the best's error window.
SCAN_BLOCK = 32
#: Share of the candidate blocks left in doubt by the screen's first cut above which a step
#: scores every candidate in float64 instead: near the width (k close to h) the residual
#: lies in a few dimensions, every score is within the bf16 bound of the best, and
#: screening them one by one costs ~50x one dense product.
DENSE_SHARE = 0.25
#: The float64 Gram matrix (the Cholesky factor's entries, gathered) up to this size;
#: above it (N > 11,585) those entries are products of the picks' stored float64 rows.
GRAM_BYTES = 2**30
#: float32's unit roundoff
U32 = 2.0**-24
#: The residual is zero below this fraction of the token's row norm: stop.
RESIDUAL_TOL = 1e-10
#: A pick whose part orthogonal to the picks before is below this fraction of its norm adds
#: nothing (its square comes from a float64 subtraction: resolved to ~1e-8 of the norm).
DEPENDENT_TOL = 1e-7
#: A donor row whose norm is below this fraction of the candidates' median norm (or is not
#: finite) is degenerate: the token is not fitted (status ``zero_row``).
ZERO_ROW_TOL = 1e-6


def bfloat16_native() -> bool:
    """Whether oneDNN runs bfloat16 products natively here (AVX-512 BF16 or AMX)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check is not None and check())
    except RuntimeError:
        return False


def _product_seconds(dtype: torch.dtype, h: int = 768, n: int = 4096, rows: int = 256,
                     repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed (rows x h) @ (h x n) products in ``dtype``, on this
    thread's torch threads (the solve's batches run at one)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(rows, h, generator=gen).to(dtype)
    b = torch.randn(h, n, generator=gen).to(dtype)
    a @ b  # the first call sets up oneDNN's kernel
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def default_score_dtype() -> torch.dtype:
    """The faster screening precision on this CPU: bfloat16 where oneDNN runs it natively
    and it beats float32, else float32. Timed once per process (a few milliseconds), since
    native is not enough: on AMX bfloat16 runs ~5x float32's rate, on AVX-512 BF16 alone
    (no AMX, ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``) ~0.7x (benchmarks/README.md). The
    picks are float64 OMP's in either precision (the screen's bounds), so the choice
    changes the time, never the result."""
    if not bfloat16_native():
        return torch.float32
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        faster = _product_seconds(torch.bfloat16) < _product_seconds(torch.float32)
    finally:
        torch.set_num_threads(threads)
    return torch.bfloat16 if faster else torch.float32


def omp_select(
    targets: np.ndarray,
    candidates: np.ndarray,
    k: int,
    *,
    batch_bytes: int | None = None,
    score_dtype: torch.dtype | None = None,
    gram_bytes: int = GRAM_BYTES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OMP of each row of ``targets`` (B, h) over the rows of ``candidates`` (N, h).

    Returns (``picked`` (B, k) int64 candidate indices in pick order, ``coef`` (B, k)
    float64 least-squares coefficients, ``k_used`` (B,) int64): entries past a token's
    ``k_used`` are -1 and 0. ``k`` is capped by N. Tokens go in batches of at most
    :data:`BATCH_TOKENS` whose work (scores, the Cholesky factor's inverse) stays
    under ``batch_bytes`` (all threads' batches together); at ``torch.get_num_threads()``
    T > 1, T worker threads take batches side by side, each at one torch thread (the
    results are the same as at one thread). ``score_dtype`` (bfloat16 or float32; default
    :func:`default_score_dtype`) is the screening product's precision: the picks are the
    float64 ones either way. The float64 Gram matrix is kept where it takes at most
    ``gram_bytes``.
    """
    return omp_select_at(targets, candidates, [k], batch_bytes=batch_bytes,
                         score_dtype=score_dtype, gram_bytes=gram_bytes)[k]


def omp_select_at(
    targets: np.ndarray,
    candidates: np.ndarray,
    ks: Sequence[int],
    *,
    batch_bytes: int | None = None,
    score_dtype: torch.dtype | None = None,
    gram_bytes: int = GRAM_BYTES,
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`omp_select` at each ``k`` of ``ks`` (by ``k`` as asked), from one solve to the
    largest: OMP's picks are greedy, so its first k picks do not depend on how many follow,
    and the coefficients after k picks are the least squares on those (the solve's state
    after step k). Two supports of one pair cost the larger one's solve (``omp`` and
    ``omp_salt_k`` share theirs: :mod:`embtransfer.transfer.methods.omp`)."""
    x_all = torch.from_numpy(np.ascontiguousarray(targets, np.float64))
    d64 = torch.from_numpy(np.ascontiguousarray(candidates, np.float64))
    n, h = d64.shape
    if x_all.shape[1] != h:
        raise ValueError(f"targets have width {x_all.shape[1]}, candidates {h}")
    capped = {asked: min(int(asked), n) for asked in ks}
    k = max(capped.values())
    b_total = x_all.shape[0]
    out = {c: (np.full((b_total, c), -1, np.int64), np.zeros((b_total, c), np.float64),
               np.zeros(b_total, np.int64)) for c in set(capped.values())}
    if b_total == 0 or k == 0:
        return {asked: out[c] for asked, c in capped.items()}
    screen = _Screen(d64, score_dtype or default_score_dtype())
    gram = d64 @ d64.T if 8 * n * n <= gram_bytes else None
    budget = batch_bytes or DEFAULT_BATCH_BYTES["cpu"] * 32
    # per token: the scores (N, screening dtype, and a mask), L^{-1} (k x k float64), the
    # coefficients and picks (k each), residuals and rows (h float64 each)
    per_token = (screen.dtype.itemsize + 1) * n + 8 * (k * k + 4 * k + 4 * h)
    threads = torch.get_num_threads()
    size = max(1, min(b_total, BATCH_TOKENS, budget // (per_token * threads)))
    if threads > 1:  # at least a batch per thread where the tokens allow
        size = min(size, max(MIN_THREAD_TOKENS, -(-b_total // threads)))
    starts = range(0, b_total, size)
    workers = min(threads, len(starts))

    def run(start: int) -> None:
        if workers > 1:
            torch.set_num_threads(1)  # this thread's own: its batches run single-threaded
        stop = min(start + size, b_total)
        for c, result in _omp_batch(x_all[start:stop], screen, gram, k, tuple(out)).items():
            for whole, part in zip(out[c], result, strict=True):
                whole[start:stop] = part

    empty = torch.zeros(0, dtype=torch.int64)
    _csr(empty, empty, empty.double(), (0, 0))  # torch's one warning, here
    if workers == 1:
        for start in starts:
            run(start)
        return {asked: out[c] for asked, c in capped.items()}
    # a batch per thread, each single-threaded: each step's many small operations
    # (cuts, gathers, k x k products) gain nothing from torch's intra-op threads, while
    # whole batches side by side scale with the cores (torch releases the GIL)
    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, starts))
    finally:
        torch.set_num_threads(threads)  # MKL's setting is process-wide
    return {asked: out[c] for asked, c in capped.items()}


class _Screen:
    """Each residual's pick: the candidate with the largest float64 ``|r . d_j|``, from a
    low-precision product with every candidate, then float32 and float64 products with the
    few that the previous stage's error bound leaves in doubt.

    The residual comes in float32 (``r~``) with a bound ``eps`` on its distance to the
    float64 one ``r``. Stage 1 scales it to norm 1 and the candidates by their largest
    norm, so each score lies in [-1, 1]; rows are rounded to ``dtype`` (errors ``rho``
    for the residual, ``delta_j`` for candidate j, both measured; ``rho`` grows by
    ``2 eps / |r~|`` for ``r~``'s own error) and multiplied with float32 accumulation
    (oneDNN's kernels; bfloat16 products are exact in float32). Against the exact scaled
    score ``s_j``, the computed one ``s~_j`` is off by at most
    ``b_j = rho |d_j| + delta_j + rho delta_j + gamma |r^| |d^_j|`` (Cauchy-Schwarz on the
    rows' roundings, then ``gamma = (h + 1) 2**-24`` for the float32 sums) plus ``u'
    |s~_j|`` for the result's own rounding to ``dtype`` (unit roundoff ``u``, ``u' = u /
    (1 - u)``). The float64 best ``j*`` then has ``|s~_j*| (1 + u') + b_j* >= |s~_i| (1 -
    u') - b_i`` for every ``i``; the candidates that pass this against the stage's best
    ``i`` go on (about 7 of 4,828 at h = 768 in bfloat16; measured errors stay under a
    fifth of ``b_j``, tests/test_omp.py). Stage 2 scores them in float32 (``r~ . d_j``,
    off by ``(eps + (2**-24 + gamma) |r~|) |d_j|`` at most) and keeps those within that of
    its best, and where that leaves more than one, stage 3 scores them from the float64
    residual. Tokens that need stage 3 are few (near ties within ~1e-4).
    """

    def __init__(self, d64: torch.Tensor, dtype: torch.dtype) -> None:
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"score_dtype must be bfloat16 or float32, not {dtype}")
        self.dtype = dtype
        self.d64 = d64
        self.d32 = d64.to(torch.float32)
        h = d64.shape[1]
        self.d_norm = d64.norm(dim=1)
        scaled = d64 / (float(self.d_norm.max()) or 1.0)
        low = scaled.to(dtype)
        low64 = low.to(torch.float64)
        delta = (scaled - low64).norm(dim=1)
        self.gamma = (h + 1) * U32 / (1 - (h + 1) * U32)
        # b_j = rho * per_rho[j] + fixed[j] (|r| = 1, |r^| <= 1 + rho)
        self.fixed = delta + self.gamma * low64.norm(dim=1)
        self.per_rho = scaled.norm(dim=1) + self.fixed
        self.fixed_max, self.per_rho_max = float(self.fixed.max()), float(self.per_rho.max())
        # (h, N) (the product's faster layout), zero columns up to whole blocks
        n = d64.shape[0]
        self.d_t = torch.zeros(h, -(-n // SCAN_BLOCK) * SCAN_BLOCK, dtype=dtype)
        self.d_t[:, :n] = low.T
        u = torch.finfo(dtype).eps / 2
        self.u = u / (1 - u)
        # each thread's scores go into its own reused buffer: a fresh (b, N) product each
        # step costs page faults, ~20 % of the product's time (benchmarks/README.md)
        self._local = threading.local()

    def scores(self, r32: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(|s~| (b, N) in ``dtype``, rho and |r~| (b,) float64) of the residuals ``r32``
        (b, h), each within ``eps`` (b,) of the float64 one."""
        # in float32: the unit vector is then off by (h + 3) 2**-24 at most, and rho's
        # own float32 norm by h 2**-24 of it
        norm = r32.norm(dim=1, keepdim=True)
        unit = r32 / torch.where(norm > 0, norm, 1.0)
        low = unit.to(self.dtype)
        rho = (unit - low.float()).norm(dim=1).double() * (1 + self.gamma)
        norm = norm.squeeze(1).double()
        rho += (r32.shape[1] + 3) * U32 + 2 * eps / norm
        work = getattr(self._local, "work", None)
        if work is None:
            work = self._local.work = Workspace()
        out = work.matrix("scores", self.dtype, low.shape[0], self.d_t.shape[1])
        return torch.mm(low, self.d_t, out=out).abs_(), rho, norm

    def pick(
        self,
        r32: torch.Tensor,
        eps: torch.Tensor,
        done: torch.Tensor,
        resid64: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Each residual's float64 best candidate, the picks ``done`` (b, t) excluded
        (ties: the lowest index, as NumPy's argmax); ``resid64(rows)`` gives the float64
        residuals of those rows."""
        b, n = r32.shape[0], self.d64.shape[0]
        scores, rho, r_norm = self.scores(r32, eps)
        u = self.u
        # the best, and a first cut with every bound at its largest (picks made are in:
        # their exact scores are 0, below the best's); one pass over the scores for the
        # blocks' maxima, then only the blocks that reach the cut
        # block i holds the candidates i, i + w, i + 2 w, ... (w = N / SCAN_BLOCK, padded):
        # the maxima then run along rows of the scores, which is fast
        width = self.d_t.shape[1] // SCAN_BLOCK
        blocks = scores.view(b, SCAN_BLOCK, width)
        block_max = _nonnegative_max(blocks, dim=1).float()
        bound_max = rho * self.per_rho_max + self.fixed_max
        floor = (block_max.amax(dim=1).double() * (1 - u) - 2 * bound_max) / (1 + u)
        floor = _float_below(floor)
        row, blk = (block_max >= floor[:, None]).nonzero().unbind(1)
        if row.numel() > DENSE_SHARE * b * width:
            return self.dense_pick(done, resid64(torch.arange(b)))
        inside = blocks[row, :, blk] >= floor[row, None]  # (blocks, SCAN_BLOCK)
        at, off = inside.nonzero().unbind(1)
        row, cand = row[at], off * width + blk[at]
        order = torch.argsort(row * self.d_t.shape[1] + cand)  # by row, then candidate
        row, cand = row[order], cand[order]
        s1 = scores[row, cand].double()
        row, cand, s1 = row[cand < n], cand[cand < n], s1[cand < n]
        # then each candidate's own bound against the best's lower end
        b_j = rho[row] * self.per_rho[cand] + self.fixed[cand]
        if done.shape[1]:  # the picks made (exact score 0) among those that may score 0
            maybe = (s1 * (1 - u) <= b_j).nonzero().squeeze(1)
            made = (done[row[maybe]] == cand[maybe, None]).any(dim=1)
            s1[maybe[made]] = -torch.inf  # out of the cut below
        low_end = torch.full((b,), -torch.inf, dtype=torch.float64)
        low_end.scatter_reduce_(0, row, s1 * (1 - u) - b_j, "amax")
        keep = s1 * (1 + u) + b_j >= low_end[row]
        row, cand, s1 = row[keep], cand[keep], s1[keep]
        new = _first_best(row, cand, s1, torch.zeros(b, dtype=torch.int64))
        row, cand = _several(row, cand, b)
        if row.numel() == 0:
            return new
        # stage 2: float32 products, off by at most err (float64)
        s2 = _sampled_products(r32, self.d32, row, cand).double().abs_()
        err = (eps[row] + (U32 + self.gamma) * 1.01 * r_norm[row]) * self.d_norm[cand]
        top = torch.full((b,), -torch.inf, dtype=torch.float64)
        top.scatter_reduce_(0, row, s2 - err, "amax")
        new = _first_best(row, cand, s2, new)  # where stage 2 leaves one
        keep = s2 + err >= top[row]
        row, cand = _several(row[keep], cand[keep], b)
        if row.numel() == 0:
            return new
        # stage 3: float64 products with the float64 residuals
        rows, local = row.unique(return_inverse=True)  # only those rows' residuals
        exact = _sampled_products(resid64(rows), self.d64, local, cand).abs_()
        return _first_best(row, cand, exact, new)


    def dense_pick(self, done: torch.Tensor, r64: torch.Tensor) -> torch.Tensor:
        """Each float64 residual's best candidate from every float64 score, the picks
        ``done`` (b, t; -1: none) excluded (ties: the lowest index)."""
        n = self.d64.shape[0]
        exact = torch.cat([(r64 @ self.d64.T).abs_(), r64.new_zeros(r64.shape[0], 1)], dim=1)
        exact.scatter_(1, torch.where(done >= 0, done, n), -torch.inf)  # column n: no pick
        return exact[:, :n].argmax(dim=1)  # the first of equal maxima


def _nonnegative_max(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The maximum along ``dim`` of non-negative bfloat16 or float32 ``values`` (the scores
    after ``abs_``), taken on their bits: non-negative floats order as their bit patterns,
    and an integer maximum is ~2.5x faster than bfloat16's, which converts every element."""
    bits = torch.int16 if values.dtype == torch.bfloat16 else torch.int32
    return values.view(bits).amax(dim=dim).view(values.dtype)


def _float_below(v: torch.Tensor) -> torch.Tensor:
    """float64 ``v`` rounded down to float32."""
    v32 = v.float()
    return torch.where(v32.double() > v, torch.nextafter(v32, v32.new_tensor(-torch.inf)), v32)


def _several(row: torch.Tensor, cand: torch.Tensor, b: int) -> tuple[torch.Tensor, ...]:
    """The pairs of rows that have more than one."""
    several = torch.bincount(row, minlength=b)[row] > 1
    return row[several], cand[several]


def _first_best(
    row: torch.Tensor, cand: torch.Tensor, score: torch.Tensor, new: torch.Tensor
) -> torch.Tensor:
    """``new`` with each row in ``row`` set to its best-scoring ``cand`` (the lowest
    index among equal scores)."""
    top = torch.full(new.shape, -torch.inf, dtype=score.dtype)
    top.scatter_reduce_(0, row, score, "amax")
    winner = score == top[row]
    first = new.clone()
    first[row] = torch.iinfo(torch.int64).max
    first.scatter_reduce_(0, row[winner], cand[winner], "amin")
    return first


def _sampled_products(
    r: torch.Tensor, d: torch.Tensor, row: torch.Tensor, cand: torch.Tensor
) -> torch.Tensor:
    """``r[row] . d[cand]`` for pairs sorted by row: a sampled product (CSR pattern) reads
    each candidate row in place instead of gathering copies (~10x faster)."""
    counts = torch.bincount(row, minlength=r.shape[0])
    crow = torch.zeros(r.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=crow[1:])
    pattern = _csr(crow, cand, torch.zeros(cand.shape[0], dtype=r.dtype), (r.shape[0], d.shape[0]))
    return torch.sparse.sampled_addmm(pattern, r, d.T, beta=0.0).values()


_csr_warned = False


def _csr(crow: torch.Tensor, col: torch.Tensor, val: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A CSR tensor. torch warns once per process that CSR support is in beta: the first
    call silences that (:func:`omp_select` makes it before any worker thread starts, as
    ``catch_warnings`` is not thread-safe)."""
    global _csr_warned
    if not _csr_warned:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.sparse_csr_tensor(torch.zeros(1, dtype=torch.int64), col[:0], val[:0], (0, 0))
        _csr_warned = True
    return torch.sparse_csr_tensor(crow, col, val, shape, check_invariants=False)


def _residuals(
    x: torch.Tensor, coef: torch.Tensor, picked: torch.Tensor, d: torch.Tensor
) -> torch.Tensor:
    """``x - coef @ d[picked]`` row by row (``x`` (b, h), ``coef`` and ``picked`` (b, t),
    slots with ``picked`` < 0 must have ``coef`` 0), in ``d``'s dtype: a sparse (CSR)
    product reads each candidate row in place, without the (b, t, h) gathered copies a
    batched product needs (~1.5x faster, and no such copies to keep)."""
    b, t = picked.shape
    crow = torch.arange(0, b * t + 1, t, dtype=torch.int64)
    weights = _csr(crow, picked.clamp(min=0).flatten(), coef.to(d.dtype).flatten(), (b, d.shape[0]))
    return torch.addmm(x.to(d.dtype), weights, d, alpha=-1)


def _gram_column(
    gram: torch.Tensor | None,
    d64: torch.Tensor,
    atom: torch.Tensor,
    new: torch.Tensor,
    picked: torch.Tensor,
    t: int,
) -> torch.Tensor:
    """G[I, j] (b, k) in float64 for each token's new pick ``new`` (rows ``atom``) against
    its picks so far, gathered for the first ``t`` slots only, 0 past them (``bmm`` takes
    L^{-1}'s contiguous rows :t in whole: it loops over strided ones one by one); a stopped
    token's -1 slots hold anything (L^{-1}'s rows are 0 there)."""
    b, k = picked.shape
    column = torch.zeros(b, k, dtype=torch.float64)
    if gram is not None:
        column[:, :t] = torch.take(gram, new[:, None] * gram.shape[0] + picked[:, :t].clamp(min=0))
    else:
        column[:, :t] = _sampled_products(
            atom, d64, torch.arange(b).repeat_interleave(t), picked[:, :t].clamp(min=0).flatten()
        ).view(b, t)
    return column


def _omp_batch(
    x: torch.Tensor,
    screen: _Screen,
    gram: torch.Tensor | None,
    k: int,
    at: Iterable[int],
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(picked, coef, k_used) of the batch after each number of steps in ``at`` (k the
    largest)."""
    snapshots: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    b, h = x.shape
    d64, d32 = screen.d64, screen.d32
    d_sq = screen.d_norm.square()
    pick_norm = torch.zeros(b, k, dtype=torch.float64)
    # L^{-1} for the Cholesky factor L of G[I, I] = L L^T, grown a row per pick: one
    # product per step for w = L^{-1} G[I, j] and one for the new row, where L itself
    # needs two triangular solves (and their slice copies) per step
    linv = torch.zeros(b, k, k, dtype=torch.float64)
    y = torch.zeros(b, k, dtype=torch.float64)  # L^{-1} (x . d_I): x's part on each pick
    coef = torch.zeros(b, k, dtype=torch.float64)  # L^{-T} y, a rank-1 update per pick
    picked = torch.full((b, k), -1, dtype=torch.int64)
    active = torch.ones(b, dtype=torch.bool)
    x32 = x.to(torch.float32)
    x_sq = x.square().sum(dim=1)
    x_norm = x_sq.sqrt()
    r32, eps = x32, x_norm * U32  # the residual in float32, and its distance to float64's

    def resid64(sel: torch.Tensor, t: int) -> torch.Tensor:
        """x - D_I^T c in float64 for the tokens ``sel`` (t picks so far)."""
        if t == 0:
            return x[sel]
        return _residuals(x[sel], coef[sel, :t], picked[sel, :t], d64)

    for t in range(k):
        if not active.any():
            break
        new = _pick_live(screen, r32, eps, picked[:, :t], active,
                         lambda sel, t=t: resid64(sel, t))
        atom = d64.index_select(0, new)  # (b, h)
        # w = L^{-1} G[I, j]
        g_new = _gram_column(gram, d64, atom, new, picked, t)
        w = torch.bmm(linv[:, :t], g_new.unsqueeze(-1)).squeeze(-1)  # (b, t)
        diag_sq = d_sq[new] - w.square().sum(dim=1)
        # the part of d_j orthogonal to the picks has norm sqrt(diag_sq)
        active &= diag_sq > DEPENDENT_TOL**2 * d_sq[new]
        if not active.any():
            break
        # stopped tokens' slots: L^{-1}'s row e_t and y 0, so their coefficients stay 0
        diag = torch.where(active, diag_sq, 1.0).sqrt_()
        w *= active[:, None]
        picked[:, t] = torch.where(active, new, -1)
        pick_norm[:, t] = screen.d_norm[new] * active
        # L's new row (w, diag): L^{-1}'s is (-w^T L^{-1} / diag, 1 / diag)
        row = torch.bmm(w.unsqueeze(1), linv[:, :t]).squeeze(1).div_(-diag[:, None])
        row[:, t] = 1.0 / diag
        linv[:, t] = row
        y_t = ((x * atom).sum(dim=1) - (w * y[:, :t]).sum(dim=1)) / diag
        y[:, t] = torch.where(active, y_t, 0.0)
        coef.addcmul_(y[:, t, None], row)  # c = L^{-T} y gains y_t times the new row
        # |r|^2 = |x|^2 - |y|^2; near zero it loses its digits: the residual itself there
        r_sq = x_sq - y[:, : t + 1].square().sum(dim=1)
        small = (active & (r_sq <= 1e-8 * x_sq)).nonzero().squeeze(1)
        if small.numel():
            r_norm = resid64(small, t + 1).norm(dim=1)
            active[small] = r_norm > RESIDUAL_TOL * x_norm[small]
        if t + 1 in at and t + 1 < k:
            snapshots[t + 1] = _state(picked, coef, t + 1)
        if t + 1 < k:
            r32 = _residuals(x32, coef[:, : t + 1], picked[:, : t + 1], d32)
            # roundings of x, c and the rows (one each), and of the float32 sums (t + 2)
            c_mass = (coef[:, : t + 1].abs() * pick_norm[:, : t + 1]).sum(dim=1)
            eps = (t + 6) * 1.01 * U32 * (x_norm + c_mass)
    for steps in at:  # all stopped before this many steps: the final state is theirs
        if steps not in snapshots:
            snapshots[steps] = _state(picked, coef, steps)
    return snapshots


def _state(picked: torch.Tensor, coef: torch.Tensor, steps: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(picked, coef, k_used) of a batch after ``steps`` steps, copied (the solve goes on):
    the coefficients of a stopped token's -1 slots 0."""
    p, c = picked[:, :steps].clone(), coef[:, :steps].clone()
    c[p < 0] = 0.0
    return p.numpy(), c.numpy(), (p >= 0).sum(dim=1).numpy()


def _pick_live(screen: _Screen, r32: torch.Tensor, eps: torch.Tensor, picked: torch.Tensor,
               active: torch.Tensor, resid64: Callable[[torch.Tensor], torch.Tensor]
               ) -> torch.Tensor:
    """Each token's next pick (``screen.pick``); stopped tokens are left out of the scores
    (their pick is 0, and their slots stay -1 and 0). ``resid64(sel)``: the float64
    residuals of the tokens ``sel`` of the whole batch."""
    if active.all():
        return screen.pick(r32, eps, picked, resid64)
    live = active.nonzero().squeeze(1)
    new = torch.zeros(r32.shape[0], dtype=torch.int64)
    new[live] = screen.pick(r32[live], eps[live], picked[live], lambda sel: resid64(live[sel]))
    return new


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
    return omp_coefficients_at(donor, target_ids, candidate_target_ids, candidate_source_ids,
                               [k], centered=centered, batch_bytes=batch_bytes)[k]


def omp_coefficients_at(
    donor: np.ndarray,
    target_ids: np.ndarray,
    candidate_target_ids: np.ndarray,
    candidate_source_ids: np.ndarray,
    ks: Sequence[int],
    *,
    centered: bool = False,
    batch_bytes: int | None = None,
) -> dict[int, dict[str, Any]]:
    """:func:`omp_coefficients` at each ``k`` of ``ks``, from one solve
    (:func:`omp_select_at`)."""
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
    solved = omp_select_at(xs[good], cands, ks, batch_bytes=batch_bytes)
    seconds = round(time.perf_counter() - t0, 4)
    status = np.where(good, STATUSES.index("projected"), STATUSES.index("zero_row"))
    fits = {}
    for k, (picked, coef, used) in solved.items():
        k_used = np.zeros(target_ids.size, np.int32)
        k_used[good] = used
        keep = picked >= 0
        fits[k] = {
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
                "seconds": seconds,
            },
        }
    return fits
