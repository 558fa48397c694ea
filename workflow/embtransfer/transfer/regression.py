"""SALT step 4: per-token coefficients that project non-shared target tokens into the
source space, and their application to source rows (docs/design.md §4.3).

For a non-shared target token ``t`` with neighbour set ``N`` (its sparsemax
support), ``A = E'_t`` holds the target PLM rows of ``N`` (k x h_t) and ``S = E'_s``
the source rows of ``N`` (k x h_s). The paper maps ``e_t`` (t's own PLM row) with
``X = pinv(A) S``. Since ``pinv(A) = A^T (A A^T)^+``::

    e_t X = c S,    c = e_t pinv(A) = (e_t A^T) G^+,    G = A A^T (k x k)

so only ``k`` coefficients per token are solved for and the h_t x h_s matrix ``X``
is never formed. ``c`` depends on PLM rows only: :func:`salt_coefficients` (the
regression job, which reads no source model) solves it once, and
:func:`apply_coefficients` (the ``salt`` method in the transfer job) forms ``c S`` for
every side (input embeddings and an untied LM head). :func:`salt_project` does both.

Batching. Tokens are sorted by (k, target id) and cut into batches, so a batch's
neighbour sets have nearly equal sizes (little padding) and the batches do not
depend on the order of the neighbour table. Each batch pads to its largest k with
zero rows; a zero row adds a zero row and column to ``G`` (an exactly-zero
eigenvalue, cut off) and its coefficient is masked to zero, so padding changes
nothing. ``G^+`` comes from one batched ``torch.linalg.eigh``; the same code runs on
CPU and CUDA. The solve's batches are bounded by the bytes of their float64 PLM rows, the
application's (same order, same padding, zero coefficients) by those of their source
rows. A float64 product's last bit can depend on the batch shape; the float32 rows
almost never do.

rcond. ``rcond`` has numpy.linalg.pinv's meaning: singular values
``sigma <= rcond * sigma_max`` of ``A`` are treated as zero. ``G``'s eigenvalues are
``sigma**2``, so eigenvalues ``<= rcond**2 * lambda_max`` are dropped. The default is
:data:`DEFAULT_RCOND` = 1e-6, not numpy's 1e-15:

* embeddings are float32; their rounding (relative 6e-8) leaves spurious singular
  values of about 1e-7 * sigma_max in nearly rank-deficient neighbour sets, which
  numpy's 1e-15 would invert into coefficients of 1e7 and more;
* the Gram route resolves eigenvalues only down to about k * eps(dtype) *
  lambda_max (2e-16 per unit of k in float64), i.e. singular values down to about
  sqrt(k * eps) * sigma_max (4.8e-7 for k = 1024 in float64; 1.9e-3 for k = 30 in
  float32); an rcond below :func:`min_rcond` is refused.
* ``torch.linalg.pinv`` uses ``rtol = max(k, h_t) * eps(dtype)`` when neither
  ``atol`` nor ``rtol`` is given (same meaning as numpy's rcond): 9.2e-5 for a
  float32 matrix with h_t = 768, 1.7e-13 in float64. ``numpy.linalg.pinv(A,
  rcond=r)`` and ``torch.linalg.pinv(A, rtol=r)`` both equal this module with
  ``rcond=r`` for any r >= min_rcond.

For well-conditioned neighbour sets (the usual case: k is far below h_t) every
rcond between 1e-12 and 1e-4 gives the same rows; rcond only decides how nearly
dependent neighbour rows (duplicated or untrained PLM rows) are handled.

Precision. The solve runs in float64 by default: float32 Gram matrices square the
condition number; on the test problems float32 misses numpy by up to 6e-4 relative
(20% of tokens beyond 1e-5) even with rcond 1e-2, while float64 agrees to 4e-8. At
paper scale (20k tokens, h_t 768, h_s 2048, 2 CPU threads) float64 takes 1.1 s,
float32 0.7 s. Coefficients are stored in the solve's dtype and applied in it; rows are
float32.

Ridge (an option beyond the paper): ``ridge > 0`` gives ``c = e_t A^T (G + ridge
I)^-1``; ``ridge`` is absolute, in the units of ``G`` (squared PLM row norms), and
replaces the rcond cut-off.

Conditioning. Every projected token carries its ``k``, the numerical ``rank`` of its
neighbour rows ``A`` at ``rcond`` (the count of eigenvalues the cut-off keeps; counted with a
ridge too, as it describes the neighbour set; ``k > h_t`` is always deficient) and its
``amplification`` ``|c|_2``. As ``k`` nears ``h_t``, ``G``'s smallest kept eigenvalues near
zero and ``c`` grows, while ``c A`` (``e_t``'s projection onto the neighbours' span) stays no
longer than ``e_t``: the large coefficients cancel on the PLM rows, and nothing makes them
cancel on the source rows. ``|c|_2`` measures that: for source rows that are orthogonal with
equal norms ``s``, ``|c S| = |c|_2 s`` exactly (for uncorrelated rows, in expectation), so it
is how many times longer the projected row is than the rows it combines. It needs no source
rows (this solve reads none) and costs one norm per token. Trained source rows are
neither orthogonal nor equally long; on the default run's rows (PLM ``gpt2_vi_mini``,
source ``llama_mini``) the measured ratio ``|c S| / median_j |S_j|`` has a median 1.7-1.9
times ``|c|_2``'s at every k/h from 0.1 to 1.2 (``benchmarks/bench_salt_conditioning.py``):
the two grow together.
:func:`conditioning_summary` aggregates them into the record (``stats["conditioning"]``);
the report tabulates it per setting.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from embtransfer.core.atomic import atomic_path, check_finite, write_json
from embtransfer.core.devices import resolve_device
from embtransfer.core.logs import without_run_values
from embtransfer.core.workspace import Workspace
from embtransfer.neighbors.search import Neighbors, count_summary
from embtransfer.transfer.method_catalog import defaults

#: SALT's options with their defaults (the method catalog holds them): salt_project's defaults.
SALT = defaults("salt")

#: Relative singular-value cut-off (numpy.linalg.pinv semantics); see the module docstring.
DEFAULT_RCOND: float = SALT["rcond"]

#: Gathered float64 neighbour rows per batch (both sides together) stay below this, by
#: device type. On CPU a cache-sized batch is fastest (measured at paper scale: 16 MiB
#: 1.0 s, 64 MiB 1.2 s, 512 MiB 1.5 s); a GPU wants few, large launches.
DEFAULT_BATCH_BYTES = {"cpu": 16 * 2**20, "cuda": 512 * 2**20}

#: The embedding sides salt_project takes (methods.base.SIDES; the salt method imports this
#: module, so it does not import the methods package).
SIDES = ("input", "output")

#: Per-token status; the projection file stores the index into this tuple (int8).
#: ``zero_row``: OMP's (embtransfer.transfer.omp_solver) token whose PLM row is zero or not finite.
STATUSES = ("projected", "missing_vector", "too_few_neighbors", "zero_row")
PROJECTED, MISSING_VECTOR, TOO_FEW_NEIGHBORS, ZERO_ROW = range(len(STATUSES))

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def min_rcond(dtype: torch.dtype, k: int = 1024) -> float:
    """Smallest rcond the Gram route resolves for neighbour sets of up to ``k`` rows.

    Rounding moves G's eigenvalues by about k * eps * lambda_max (in practice less),
    so a cut-off on eigenvalues below that separates nothing.
    """
    return math.sqrt(k * torch.finfo(dtype).eps)


def _as_float(matrix: np.ndarray, what: str) -> np.ndarray:
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D matrix, got shape {matrix.shape}")
    if matrix.dtype not in (np.float32, np.float64):
        matrix = matrix.astype(np.float32)
    return matrix


def _check_ids(ids: np.ndarray, n_rows: int, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n_rows):
        bad = ids[(ids < 0) | (ids >= n_rows)]
        raise ValueError(
            f"{what}: token ids {bad[:5].tolist()} are outside the embedding matrix "
            f"({n_rows} rows); the neighbour table and the model disagree"
        )


def _stage(
    matrix: np.ndarray, ids: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, np.ndarray]:
    """The matrix as a tensor on ``device`` and ``ids`` re-indexed into it.

    On CPU the numpy memory is shared (no copy). Elsewhere only the rows in ``ids``
    travel (the shared tokens, not the whole vocabulary).
    """
    if device.type == "cpu":
        with warnings.catch_warnings():
            # read-only arrays (memory maps) are fine: the tensor is never written
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(np.ascontiguousarray(matrix)), ids
    unique, inverse = np.unique(ids, return_inverse=True)
    return torch.from_numpy(np.ascontiguousarray(matrix[unique])).to(device), inverse.reshape(-1)


def _cap_neighbors(
    neighbors: Neighbors, max_neighbors: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, neighbour target ids, neighbour source ids, capped) after keeping the
    ``max_neighbors`` most similar entries of each row (ties: smaller target id)."""
    offsets = np.asarray(neighbors.offsets, np.int64)
    nt = np.asarray(neighbors.neighbor_target_ids, np.int64)
    ns = np.asarray(neighbors.neighbor_source_ids, np.int64)
    k = np.diff(offsets)
    if max_neighbors is None or not (k > max_neighbors).any():
        return offsets, nt, ns, np.zeros(k.size, bool)
    row = np.repeat(np.arange(k.size), k)
    sim = np.asarray(neighbors.similarities, np.float64)
    order = np.lexsort((nt, -sim, row))  # by row, then decreasing similarity, then id
    rank = np.arange(order.size) - offsets[row[order]]
    keep = order[rank < max_neighbors]
    keep.sort()  # restore the table's order inside each row
    new_k = np.minimum(k, max_neighbors)
    new_offsets = np.concatenate([[0], np.cumsum(new_k)]).astype(np.int64)
    return new_offsets, nt[keep], ns[keep], k > max_neighbors


def _check_options(
    min_neighbors: int,
    max_neighbors: int | None,
    ridge: float,
    batch_tokens: int,
    dtype: torch.dtype | str,
) -> torch.dtype:
    if min_neighbors < 1:
        raise ValueError(f"min_neighbors must be >= 1, got {min_neighbors}")
    if max_neighbors is not None and max_neighbors < min_neighbors:
        raise ValueError(f"max_neighbors ({max_neighbors}) < min_neighbors ({min_neighbors})")
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge}")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    dtype = _DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    return dtype


def _batches(
    order: np.ndarray, k: np.ndarray, batch_tokens: int, batch_bytes: int, bytes_per_entry: int
) -> list[np.ndarray]:
    """``order`` (sorted by k) cut into batches of at most ``batch_tokens`` tokens whose
    padded (tokens x k_max) entries take at most ``batch_bytes``."""
    batches: list[np.ndarray] = []
    start = 0
    while start < order.size:
        k_max = int(k[order[min(start + batch_tokens, order.size) - 1]])  # sorted by k
        size = min(batch_tokens, max(1, batch_bytes // (k_max * bytes_per_entry)))
        batches.append(order[start : start + size])
        start += size
    return batches


def _padded(kb: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat (B, k_max) index into per-entry arrays, mask of real entries); a padded slot
    repeats its row's first entry."""
    slot = np.arange(int(kb.max()))
    mask = slot[None, :] < kb[:, None]
    return np.where(mask, starts[:, None] + slot[None, :], starts[:, None]), mask


def _default_batch_bytes(device: torch.device, batch_bytes: int | None) -> int:
    if batch_bytes is not None:
        return batch_bytes
    return DEFAULT_BATCH_BYTES.get(device.type, DEFAULT_BATCH_BYTES["cuda"])


def _by_k(rows: np.ndarray, k: np.ndarray, target_ids: np.ndarray) -> np.ndarray:
    """``rows`` sorted by (k, target id): batches of similar k, independent of the table's
    order."""
    return rows[np.lexsort((target_ids[rows], k[rows]))]


def _largest_batch(batches: list[np.ndarray], k: np.ndarray) -> int:
    """Padded entries of the largest batch: the workspace's rows, allocated once."""
    return max((b.size * int(k[b].max()) for b in batches), default=0)


@dataclass
class _Table:
    """The neighbour table, checked and capped, by table row."""

    target_ids: np.ndarray  # int64
    offsets: np.ndarray  # int64, into the flat neighbour arrays
    neighbor_target_ids: np.ndarray  # int64
    neighbor_source_ids: np.ndarray  # int64
    capped: np.ndarray  # bool: more than max_neighbors neighbours
    status: np.ndarray  # index into STATUSES

    @property
    def k(self) -> np.ndarray:
        return np.diff(self.offsets)


def _checked_table(
    neighbors: Neighbors, n_plm_rows: int, min_neighbors: int, max_neighbors: int | None
) -> _Table:
    target_ids = np.asarray(neighbors.target_ids, np.int64)
    if np.unique(target_ids).size != target_ids.size:
        raise ValueError("the neighbour table lists a target token twice")
    offsets, nbr_t, nbr_s, capped = _cap_neighbors(neighbors, max_neighbors)
    _check_ids(target_ids, n_plm_rows, "target PLM input embeddings")
    _check_ids(nbr_t, n_plm_rows, "target PLM input embeddings (neighbours)")
    if nbr_s.size and nbr_s.min() < 0:
        raise ValueError("the neighbour table holds negative source ids")
    k = np.diff(offsets)
    missing = np.asarray(neighbors.missing, bool)
    status = np.where(
        missing, MISSING_VECTOR, np.where(k < min_neighbors, TOO_FEW_NEIGHBORS, PROJECTED)
    )
    return _Table(target_ids, offsets, nbr_t, nbr_s, capped, status)


@dataclass
class _Layout:
    """The result's layout: tokens in target-id order (so the table's row order cannot
    matter), each projected token's neighbours in the table's order."""

    order: np.ndarray  # output row -> table row
    position: np.ndarray  # table row -> output row
    k_used: np.ndarray  # int32 by output row; 0 when not projected
    offsets: np.ndarray  # int64 into the output's entries
    entries: np.ndarray  # output entry -> table entry

    @classmethod
    def of(cls, table: _Table) -> _Layout:
        k_used_by_row = np.where(table.status == PROJECTED, table.k, 0)
        order = np.argsort(table.target_ids, kind="stable")
        position = np.empty(order.size, np.int64)
        position[order] = np.arange(order.size)
        k_used = k_used_by_row[order].astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(k_used, dtype=np.int64)])
        shift = np.repeat(table.offsets[:-1][order] - offsets[:-1], k_used)
        return cls(order, position, k_used, offsets, np.arange(offsets[-1]) + shift)


def _check_rcond(rcond: float, dtype: torch.dtype, k_max: int) -> None:
    floor = min_rcond(dtype, k_max)
    if rcond < floor:
        raise ValueError(
            f"rcond={rcond:g} is below what the Gram-matrix solve resolves in {dtype} "
            f"with k up to {k_max} ({floor:.2g}); "
            "see embtransfer.transfer.regression"
        )


def _solve_batch(
    a: torch.Tensor, e: torch.Tensor, ridge: float, rcond: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``c = e A^T G^+`` of a batch: ``a`` (B, k, h) zero-padded neighbour rows, ``e``
    (B, h) the tokens' own rows. Returns (c (B, k), the numerical rank of each token's
    ``A`` at ``rcond`` (B,)); the rank is counted with a ridge too (it describes the
    neighbour set, not the solve)."""
    gram = a @ a.mT  # (B, k, k)
    rhs = (a @ e.unsqueeze(-1)).squeeze(-1)  # e_t A^T, (B, k)
    eigval, eigvec = torch.linalg.eigh(gram)
    # numpy's rule on singular values, squared: keep sigma > rcond * sigma_max
    keep = eigval > (rcond**2) * eigval[:, -1:].clamp_min(0)
    if ridge > 0:
        inv = 1.0 / (eigval.clamp_min(0) + ridge)
    else:
        inv = torch.where(keep, eigval, torch.ones_like(eigval)).reciprocal() * keep
    coef = ((rhs.unsqueeze(1) @ eigvec) * inv.unsqueeze(1)) @ eigvec.mT  # (B, 1, k)
    return coef.squeeze(1), keep.sum(-1)


def _stage_rows(
    plm: np.ndarray, table: _Table, device: torch.device
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """(the PLM rows on ``device``, their index of each neighbour, of each token itself)."""
    nbr_t = table.neighbor_target_ids
    plm_t, index = _stage(plm, np.concatenate([nbr_t, table.target_ids]), device)
    return plm_t, index[: nbr_t.size], index[nbr_t.size :]


def _solve(
    staged: tuple[torch.Tensor, np.ndarray, np.ndarray],
    table: _Table,
    layout: _Layout,
    batches: list[np.ndarray],
    dtype: torch.dtype,
    ridge: float,
    rcond: float,
    device: torch.device,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    """Coefficients in the layout's entries; per output row the numerical ``rank`` of the
    neighbour rows (int32) and the ``amplification`` |c|_2 (float64), 0 where not
    projected; the counts of ``batches`` and ``padded_entries``."""
    plm_t, nbr_t_idx, self_idx = staged
    k, h_t = table.k, plm_t.shape[1]
    coefficients = np.zeros(
        layout.entries.size, np.float64 if dtype == torch.float64 else np.float32
    )
    per_token = {
        "rank": np.zeros(layout.order.size, np.int32),
        "amplification": np.zeros(layout.order.size, np.float64),
    }
    work = Workspace(device, _largest_batch(batches, k))
    padded_entries = 0
    for batch in batches:
        kb = k[batch]
        flat, mask_np = _padded(kb, table.offsets[batch])
        padded_entries += mask_np.size
        maskf = torch.from_numpy(mask_np).to(device).to(dtype)
        a = work.gather("a", plm_t, nbr_t_idx[flat].reshape(-1), dtype)
        a = a.view(batch.size, flat.shape[1], h_t).mul_(maskf.unsqueeze(-1))  # padding is 0
        e = plm_t.index_select(0, torch.from_numpy(self_idx[batch]).to(device)).to(dtype)
        coef, rank = _solve_batch(a, e, ridge, rcond)
        # row-major over (token, slot): each token's k entries in the table's order
        rows = layout.position[batch]
        coefficients[_padded(kb, layout.offsets[rows])[0][mask_np]] = coef.cpu().numpy()[mask_np]
        per_token["rank"][rows] = rank.cpu().numpy()
        per_token["amplification"][rows] = torch.linalg.vector_norm(coef, dim=-1).cpu().numpy()
    return coefficients, per_token, {"batches": len(batches), "padded_entries": padded_entries}


def salt_coefficients(
    plm_input: np.ndarray,
    neighbors: Neighbors,
    *,
    min_neighbors: int = SALT["min_neighbors"],
    max_neighbors: int | None = SALT["max_neighbors"],
    ridge: float = SALT["ridge"],
    rcond: float = DEFAULT_RCOND,
    device: str | torch.device = "auto",
    batch_tokens: int = SALT["batch_tokens"],
    dtype: torch.dtype | str = SALT["dtype"],
    batch_bytes: int | None = None,
) -> dict[str, Any]:
    """Solve every non-shared token's coefficients ``c`` (see the module docstring).

    ``plm_input`` (V_t, h_t) is indexed by target id. Returns, in target-id order,
    ``target_ids`` (int64), ``k_used`` (int32, neighbours used; 0 when not projected),
    ``status`` (one of :data:`STATUSES`), and per projected token ``k_used`` entries of
    ``source_ids`` (int64, the neighbours' source ids) and ``coefficients`` (the solve's
    dtype), in the neighbour table's order; per token its conditioning (0 when not
    projected; see the module docstring): ``rank`` (int32, the neighbour rows' numerical
    rank at ``rcond``) and ``amplification`` (float64, |c|_2); plus ``stats``, with their
    summary under ``conditioning`` (:func:`conditioning_summary`).
    :func:`apply_coefficients` turns them into rows of any source matrix.
    ``min_neighbors`` / ``max_neighbors`` / ``ridge`` are options beyond the paper; the
    defaults reproduce it. ``dtype`` (torch dtype or ``"float64"`` / ``"float32"``) is the
    solve's precision. ``batch_bytes`` bounds the gathered PLM rows per batch (default by
    device, :data:`DEFAULT_BATCH_BYTES`), ``batch_tokens`` the tokens.
    """
    t_start = time.perf_counter()
    dtype = _check_options(min_neighbors, max_neighbors, ridge, batch_tokens, dtype)
    dev = torch.device(resolve_device(device))
    batch_bytes = _default_batch_bytes(dev, batch_bytes)
    plm = _as_float(plm_input, "target PLM input embeddings")
    table = _checked_table(neighbors, plm.shape[0], min_neighbors, max_neighbors)
    layout = _Layout.of(table)
    k = table.k
    todo = _by_k(np.flatnonzero(table.status == PROJECTED), k, table.target_ids)
    if ridge == 0 and todo.size:
        _check_rcond(rcond, dtype, int(k[todo].max()))
    staged = _stage_rows(plm, table, dev)
    t_prepared = time.perf_counter()

    # batch boundaries first, so the work buffer can be allocated once
    batches = _batches(todo, k, batch_tokens, batch_bytes, 8 * plm.shape[1])  # float64 rows
    coefficients, per_token, solved = _solve(
        staged, table, layout, batches, dtype, ridge, rcond, dev
    )
    t_solved = time.perf_counter()
    if not np.isfinite(coefficients).all():
        raise FloatingPointError("SALT's solve produced non-finite coefficients")

    options = {
        "min_neighbors": min_neighbors,
        "max_neighbors": max_neighbors,
        "ridge": float(ridge),
        "rcond": float(rcond),
        "dtype": str(dtype).removeprefix("torch."),
        "batch_tokens": batch_tokens,
        "batch_bytes": batch_bytes,
    }
    stats = _salt_stats(table, k[todo], solved, options, dev, (t_start, t_prepared, t_solved))
    stats["conditioning"] = conditioning_summary(
        layout.k_used, per_token["rank"], per_token["amplification"], plm.shape[1]
    )
    return {
        "target_ids": table.target_ids[layout.order],
        "k_used": layout.k_used,
        "status": np.asarray(STATUSES, dtype=object)[table.status[layout.order]],
        "source_ids": table.neighbor_source_ids[layout.entries],
        "coefficients": coefficients,
        **per_token,
        "stats": stats,
    }


def _salt_stats(
    table: _Table,
    k_projected: np.ndarray,
    solved: dict[str, int],
    options: dict[str, Any],
    device: torch.device,
    times: tuple[float, float, float],
) -> dict[str, Any]:
    """The solve's statistics (the coefficients' JSON, less the run values); ``times``:
    when the call started, was prepared and had solved (perf_counter)."""
    t_start, t_prepared, t_solved = times
    padded = solved["padded_entries"]
    return {
        "n_tokens": int(table.target_ids.size),
        # SALT's own statuses (zero_row is OMP's)
        "counts": {s: int((table.status == i).sum()) for i, s in enumerate(STATUSES[:ZERO_ROW])},
        "n_capped": int(table.capped.sum()),
        "k_used": count_summary(k_projected),
        "batches": solved["batches"],
        "padding_fraction": float(1 - k_projected.sum() / padded) if padded else 0.0,
        "options": options,
        "device": str(device),
        "seconds": {
            "prepare": round(t_prepared - t_start, 4),
            "solve": round(t_solved - t_prepared, 4),
            "total": round(time.perf_counter() - t_start, 4),
        },
    }


def _quantiles(values: np.ndarray) -> dict[str, float | None]:
    """Median, 90th and 99th percentile and maximum (None each when there are none)."""
    if values.size == 0:
        return {"median": None, "p90": None, "p99": None, "max": None}
    median, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"median": float(median), "p90": float(p90), "p99": float(p99),
            "max": float(values.max())}


def conditioning_summary(
    k_used: np.ndarray, rank: np.ndarray, amplification: np.ndarray, h_t: int
) -> dict[str, Any]:
    """The projected tokens' (``k_used > 0``) conditioning, for the regression record and
    the report (embtransfer.report.diagnostics): the PLM width ``h_t``, k/h_t and
    the amplification |c|_2 as :func:`_quantiles`, and how many tokens (and what share)
    have neighbour rows of lower numerical rank than k."""
    projected = np.asarray(k_used) > 0
    k = np.asarray(k_used, np.int64)[projected]
    deficiency = k - np.asarray(rank, np.int64)[projected]
    n_deficient = int((deficiency > 0).sum())
    return {
        "h_t": int(h_t),
        "k_over_h": _quantiles(k / h_t),
        "n_rank_deficient": n_deficient,
        "rank_deficient_share": n_deficient / k.size if k.size else None,
        "max_rank_deficiency": int(deficiency.max()) if k.size else None,
        "amplification": _quantiles(np.asarray(amplification, np.float64)[projected]),
    }


def apply_coefficients(
    coefficients: dict[str, Any],
    source: np.ndarray,
    *,
    device: str | torch.device = "cpu",
    batch_tokens: int = SALT["batch_tokens"],
    batch_bytes: int | None = None,
) -> np.ndarray:
    """Rows ``c S`` of one source matrix (V_s, h_s), float32 (n, h_s) in the order of
    ``coefficients["target_ids"]``; rows of tokens not projected are zero.

    ``coefficients`` is :func:`salt_coefficients`' result (or :func:`read_coefficients`').
    The arithmetic runs in the coefficients' dtype, in batches of tokens sorted by (k,
    target id) padded to the batch's largest k, so the rows do not depend on the order
    of the neighbour table. The only place coefficients meet source rows: the ``salt``
    method and :func:`salt_project` both call it.
    """
    source = _as_float(source, "source embeddings")
    source_ids = np.asarray(coefficients["source_ids"], np.int64)
    coef_flat = np.asarray(coefficients["coefficients"])
    k = np.asarray(coefficients["k_used"], np.int64)
    target_ids = np.asarray(coefficients["target_ids"], np.int64)
    if coef_flat.dtype not in (np.float32, np.float64):
        raise ValueError(f"coefficients must be float32 or float64, got {coef_flat.dtype}")
    if k.size != target_ids.size or source_ids.size != coef_flat.size or k.sum() != coef_flat.size:
        raise ValueError(
            f"inconsistent coefficients: {target_ids.size} tokens, {k.size} k_used, "
            f"{int(k.sum())} entries by k_used, {source_ids.size} source ids, "
            f"{coef_flat.size} coefficients"
        )
    _check_ids(source_ids, source.shape[0], "source embeddings (neighbours)")
    dtype = torch.from_numpy(coef_flat[:0]).dtype
    dev = torch.device(resolve_device(device))
    batch_bytes = _default_batch_bytes(dev, batch_bytes)
    offsets = np.concatenate([[0], np.cumsum(k)])
    h_s = source.shape[1]
    rows = np.zeros((target_ids.size, h_s), np.float32)
    todo = _by_k(np.flatnonzero(k > 0), k, target_ids)
    staged, source_idx = _stage(source, source_ids, dev)
    coef_t = torch.from_numpy(np.ascontiguousarray(coef_flat)).to(dev)
    batches = _batches(todo, k, batch_tokens, batch_bytes, 8 * h_s)  # float64 source rows
    work = Workspace(dev, _largest_batch(batches, k))
    for batch in batches:
        kb = k[batch]
        flat, mask_np = _padded(kb, offsets[batch])
        flat_t = torch.from_numpy(flat).to(dev)
        coef = coef_t[flat_t] * torch.from_numpy(mask_np).to(dev).to(dtype)  # padding is 0
        gathered = work.gather("s", staged, source_idx[flat].reshape(-1), dtype)
        out = coef.unsqueeze(1) @ gathered.view(batch.size, flat.shape[1], h_s)
        rows[batch] = out.squeeze(1).to(torch.float32).cpu().numpy()
    if not np.isfinite(rows).all():
        raise FloatingPointError("SALT's coefficients gave non-finite rows")
    return rows


def salt_project(
    plm_input: np.ndarray,
    source_matrices: dict[str, np.ndarray],
    neighbors: Neighbors,
    *,
    device: str | torch.device = "auto",
    **options: Any,
) -> dict[str, Any]:
    """:func:`salt_coefficients` then :func:`apply_coefficients` to each source matrix.

    ``source_matrices`` holds ``"input"`` and optionally ``"output"`` (V_s, h_s) by
    source id; ``options`` are :func:`salt_coefficients`' keywords. Returns its result
    with one float32 (n, h_s) array of rows per key of ``source_matrices`` added (rows
    not projected are zero) and ``stats["sides"]``. The workflow splits the two steps
    across its jobs; tests and benchmarks use this.
    """
    if not source_matrices:
        raise ValueError("source_matrices is empty: nothing to project")
    if set(source_matrices) - set(SIDES):
        raise ValueError(
            f"source_matrices keys must be among {SIDES}, got {sorted(source_matrices)}"
        )
    n_source_rows = {np.shape(m)[0] for m in source_matrices.values()}
    if len(n_source_rows) != 1:
        raise ValueError(f"source matrices disagree on the vocabulary size: {n_source_rows}")
    result = salt_coefficients(plm_input, neighbors, device=device, **options)
    for side, matrix in source_matrices.items():
        result[side] = apply_coefficients(result, matrix, device=device)
    result["stats"]["sides"] = list(source_matrices)
    return result


def status_codes(status: np.ndarray) -> np.ndarray:
    """Status labels (or codes) as int8 indices into :data:`STATUSES`."""
    status = np.asarray(status)
    if status.dtype.kind in "iu":
        return status.astype(np.int8)
    lookup = {name: i for i, name in enumerate(STATUSES)}
    try:
        return np.array([lookup[s] for s in status.tolist()], np.int8)
    except KeyError as err:
        raise ValueError(f"unknown projection status {err.args[0]!r}; known: {STATUSES}") from None


def status_labels(status: np.ndarray) -> np.ndarray:
    """Status codes (or labels) as an object array of :data:`STATUSES` names."""
    status = np.asarray(status)
    if status.dtype.kind in "iu":
        if status.size and (status.min() < 0 or status.max() >= len(STATUSES)):
            raise ValueError(f"projection status codes outside 0..{len(STATUSES) - 1}")
        return np.asarray(STATUSES, dtype=object)[status.astype(np.int64)]
    return status.astype(object)


def write_coefficients(
    result: dict[str, Any], tensors_path: str | Any, meta_path: str | Any
) -> None:
    """Write :func:`salt_coefficients`' result: arrays to safetensors, stats to JSON.

    ``status`` is stored as int8 codes (safetensors holds no strings); the JSON lists
    the code names. :func:`read_coefficients` reads it back for the ``salt`` method.
    """
    check_finite("SALT coefficients", np.asarray(result["coefficients"]))
    arrays = {
        "target_ids": np.asarray(result["target_ids"], np.int64),
        "k_used": np.asarray(result["k_used"], np.int32),
        "status": status_codes(result["status"]),
        "source_ids": np.asarray(result["source_ids"], np.int64),
        "coefficients": np.ascontiguousarray(result["coefficients"]),
        "rank": np.asarray(result["rank"], np.int32),
        "amplification": np.asarray(result["amplification"], np.float64),
    }
    with atomic_path(tensors_path) as tmp:
        save_file(arrays, str(tmp))
    # Timings go to the job's log, not into the artifact (byte-identical reruns).
    write_json(
        meta_path, {"status_codes": list(STATUSES), "stats": without_run_values(result["stats"])}
    )


def read_coefficients(path: str | Any, n_source_rows: int | None = None) -> dict[str, np.ndarray]:
    """The arrays :func:`write_coefficients` wrote, ``status`` as labels: the ``salt``
    method's ``inputs.projected``.

    With ``n_source_rows`` (the source's vocabulary size) a file whose source ids do not
    fit the source model (made for another, or an older, source) is refused, naming it.
    """
    coefficients = load_file(str(path))
    coefficients["status"] = status_labels(coefficients["status"])
    source_ids = coefficients["source_ids"]
    k = coefficients["k_used"].astype(np.int64)
    if k.sum() != source_ids.size or source_ids.size != coefficients["coefficients"].size:
        raise ValueError(
            f"{path}: the SALT coefficients are inconsistent (k_used sums to "
            f"{int(k.sum())}, {source_ids.size} source ids, "
            f"{coefficients['coefficients'].size} coefficients); rebuild it"
        )
    if (
        n_source_rows is not None
        and source_ids.size
        and (source_ids.min() < 0 or source_ids.max() >= n_source_rows)
    ):
        raise ValueError(
            f"{path}: SALT coefficients refer to source ids up to {int(source_ids.max())}, "
            f"but the source model has {n_source_rows} rows; the file is stale against the "
            "source model: delete it and rerun the salt_regression rule"
        )
    return coefficients
