"""SALT step 4: project non-shared target tokens into the source space (docs/design.md §4.3).

For a non-shared target token ``t`` with neighbour set ``N`` (its sparsemax
support), ``A = E'_t`` holds the target PLM rows of ``N`` (k x h_t) and ``S = E'_s``
the source rows of ``N`` (k x h_s). The paper maps ``e_t`` (t's own PLM row) with
``X = pinv(A) S``. Since ``pinv(A) = A^T (A A^T)^+``::

    e_t X = c S,    c = e_t pinv(A) = (e_t A^T) G^+,    G = A A^T (k x k)

so only ``k`` coefficients per token are solved for and the h_t x h_s matrix ``X``
is never formed. ``c`` depends on PLM rows only: it is computed once and applied
to every side (input embeddings and an untied LM head).

Batching. Tokens are sorted by (k, target id) and cut into batches, so a batch's
neighbour sets have nearly equal sizes (little padding) and the batches do not
depend on the order of the neighbour table. Each batch pads to its largest k with
zero rows; a zero row adds a zero row and column to ``G`` (an exactly-zero
eigenvalue, cut off) and its coefficient is masked to zero, so padding changes
nothing. ``G^+`` comes from one batched ``torch.linalg.eigh``; the same code runs on
CPU and CUDA.

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
float32 0.7 s. Output rows are float32.

Ridge (an option beyond the paper): ``ridge > 0`` gives ``c = e_t A^T (G + ridge
I)^-1``; ``ridge`` is absolute, in the units of ``G`` (squared PLM row norms), and
replaces the rcond cut-off.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from embtransfer.core.atomic import atomic_path, check_finite, write_json
from embtransfer.core.logs import without_run_values
from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer.catalog import defaults
from embtransfer.transfer.methods.base import SIDES

#: SALT's options with their defaults (the method catalog holds them): salt_project's defaults.
SALT = defaults("salt")

#: Relative singular-value cut-off (numpy.linalg.pinv semantics); see the module docstring.
DEFAULT_RCOND: float = SALT["rcond"]

#: Gathered float64 neighbour rows per batch (both sides together) stay below this, by
#: device type. On CPU a cache-sized batch is fastest (measured at paper scale: 16 MiB
#: 1.0 s, 64 MiB 1.2 s, 512 MiB 1.5 s); a GPU wants few, large launches.
DEFAULT_BATCH_BYTES = {"cpu": 16 * 2**20, "cuda": 512 * 2**20}

#: Per-token status; the projection file stores the index into this tuple (int8).
STATUSES = ("projected", "missing_vector", "too_few_neighbors")

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def min_rcond(dtype: torch.dtype, k: int = 1024) -> float:
    """Smallest rcond the Gram route resolves for neighbour sets of up to ``k`` rows.

    Rounding moves G's eigenvalues by about k * eps * lambda_max (in practice less),
    so a cut-off on eigenvalues below that separates nothing.
    """
    return math.sqrt(k * torch.finfo(dtype).eps)


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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


class _Workspace:
    """Row buffers reused across batches.

    Gathering thousands of rows and widening them to float64 in fresh tensors each
    batch costs more in page faults than in arithmetic (measured 4x on CPU); here
    every batch gathers into, and widens into, the same memory.
    """

    def __init__(self, device: torch.device, entries: int) -> None:
        self.device = device
        self.entries = entries
        self.buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def _buffer(self, name: str, dtype: torch.dtype, width: int) -> torch.Tensor:
        buf = self.buffers.get((name, dtype))
        if buf is None or buf.shape[1] != width:
            buf = torch.empty((self.entries, width), dtype=dtype, device=self.device)
            self.buffers[(name, dtype)] = buf
        return buf

    def gather(
        self, name: str, matrix: torch.Tensor, ids: np.ndarray, dtype: torch.dtype
    ) -> torch.Tensor:
        """``matrix[ids]`` as ``dtype``, (len(ids), width), in a reused buffer."""
        n, width = ids.size, matrix.shape[1]
        index = torch.from_numpy(ids).to(self.device)
        raw = self._buffer(name, matrix.dtype, width)[:n]
        torch.index_select(matrix, 0, index, out=raw)
        if matrix.dtype == dtype:
            return raw
        return self._buffer(name, dtype, width)[:n].copy_(raw)


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


def _summary(values: np.ndarray) -> dict[str, float | int | None]:
    if values.size == 0:
        return {"min": None, "mean": None, "max": None}
    return {"min": int(values.min()), "mean": float(values.mean()), "max": int(values.max())}


def salt_project(
    plm_input: np.ndarray,
    source_matrices: dict[str, np.ndarray],
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
    """Project every non-shared token of ``neighbors`` (see the module docstring).

    ``plm_input`` (V_t, h_t) is indexed by target id; each matrix in
    ``source_matrices`` (``"input"`` and optionally ``"output"``, (V_s, h_s)) by
    source id. Returns ``target_ids`` (int64, sorted), one float32 (n, h_s) array per
    key of ``source_matrices`` (rows not projected are zero), ``k_used`` (int32,
    neighbours used; 0 when not projected), ``status`` (one of :data:`STATUSES`) and
    ``stats``. ``min_neighbors`` / ``max_neighbors`` / ``ridge`` are options beyond the
    paper; the defaults reproduce it. ``dtype`` (torch dtype or ``"float64"`` /
    ``"float32"``) is the solve's precision. ``batch_bytes`` bounds the gathered rows per
    batch (default by device, :data:`DEFAULT_BATCH_BYTES`), ``batch_tokens`` the tokens.
    """
    t_start = time.perf_counter()
    if min_neighbors < 1:
        raise ValueError(f"min_neighbors must be >= 1, got {min_neighbors}")
    if max_neighbors is not None and max_neighbors < min_neighbors:
        raise ValueError(f"max_neighbors ({max_neighbors}) < min_neighbors ({min_neighbors})")
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge}")
    dtype = _DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if not source_matrices:
        raise ValueError("source_matrices is empty: nothing to project")
    if set(source_matrices) - set(SIDES):
        raise ValueError(
            f"source_matrices keys must be among {SIDES}, got {sorted(source_matrices)}"
        )
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    dev = resolve_device(device)
    if batch_bytes is None:
        batch_bytes = DEFAULT_BATCH_BYTES.get(dev.type, DEFAULT_BATCH_BYTES["cuda"])

    plm = _as_float(plm_input, "target PLM input embeddings")
    sources = {
        side: _as_float(m, f"source {side} embeddings") for side, m in source_matrices.items()
    }
    n_source_rows = {m.shape[0] for m in sources.values()}
    if len(n_source_rows) != 1:
        raise ValueError(f"source matrices disagree on the vocabulary size: {n_source_rows}")

    target_ids = np.asarray(neighbors.target_ids, np.int64)
    if np.unique(target_ids).size != target_ids.size:
        raise ValueError("the neighbour table lists a target token twice")
    offsets, nbr_t, nbr_s, capped = _cap_neighbors(neighbors, max_neighbors)
    _check_ids(target_ids, plm.shape[0], "target PLM input embeddings")
    _check_ids(nbr_t, plm.shape[0], "target PLM input embeddings (neighbours)")
    _check_ids(nbr_s, next(iter(sources.values())).shape[0], "source embeddings (neighbours)")

    k = np.diff(offsets)
    missing = np.asarray(neighbors.missing, bool)
    status_raw = np.where(missing, 1, np.where(k < min_neighbors, 2, 0))
    # output in target-id order, so the table's row order cannot matter
    out_order = np.argsort(target_ids, kind="stable")
    n = target_ids.size
    h_s = {side: m.shape[1] for side, m in sources.items()}
    result: dict[str, Any] = {
        "target_ids": target_ids[out_order],
        "k_used": np.where(status_raw == 0, k, 0)[out_order].astype(np.int32),
        "status": np.asarray(STATUSES, dtype=object)[status_raw[out_order]],
    }
    rows = {side: np.zeros((n, h), np.float32) for side, h in h_s.items()}
    position = np.empty(n, np.int64)  # table row -> output row
    position[out_order] = np.arange(n)

    # projected table rows by (k, target id): batches of similar k, independent of order
    todo = np.flatnonzero(status_raw == 0)
    todo = todo[np.lexsort((target_ids[todo], k[todo]))]

    h_t = plm.shape[1]
    if ridge == 0 and todo.size:
        floor = min_rcond(dtype, int(k[todo].max()))
        if rcond < floor:
            raise ValueError(
                f"rcond={rcond:g} is below what the Gram-matrix solve resolves in {dtype} "
                f"with k up to {int(k[todo].max())} ({floor:.2g}); "
                "see embtransfer.transfer.regression"
            )
    all_nbr_t = nbr_t
    plm_t, nbr_t_idx = _stage(plm, np.concatenate([all_nbr_t, target_ids]), dev)
    nbr_t_idx, self_idx = nbr_t_idx[: all_nbr_t.size], nbr_t_idx[all_nbr_t.size :]
    staged_src: dict[str, torch.Tensor] = {}
    nbr_s_idx = nbr_s
    for side, matrix in sources.items():
        staged_src[side], nbr_s_idx = _stage(matrix, nbr_s, dev)
    t_prepared = time.perf_counter()

    # batch boundaries first, so the work buffers can be allocated once
    bytes_per_entry = 8 * (h_t + sum(h_s.values()))  # float64 rows, both sides
    batches: list[np.ndarray] = []
    start = 0
    while start < todo.size:
        k_max = int(k[todo[min(start + batch_tokens, todo.size) - 1]])  # sorted by k
        size = min(batch_tokens, max(1, batch_bytes // (k_max * bytes_per_entry)))
        batches.append(todo[start : start + size])
        start += size
    entries = max((b.size * int(k[b].max()) for b in batches), default=0)
    work = _Workspace(dev, entries)

    n_rank_deficient = padded_entries = 0
    for batch in batches:
        kb = k[batch]
        k_max = int(kb.max())
        # flat (B, k_max) index into the neighbour arrays; padded slots repeat the row's first
        slot = np.arange(k_max)
        mask_np = slot[None, :] < kb[:, None]
        flat = np.where(mask_np, offsets[batch][:, None] + slot[None, :], offsets[batch][:, None])
        padded_entries += mask_np.size
        maskf = torch.from_numpy(mask_np).to(dev).to(dtype)

        a = work.gather("a", plm_t, nbr_t_idx[flat].reshape(-1), dtype)
        a = a.view(batch.size, k_max, h_t).mul_(maskf.unsqueeze(-1))  # padded rows are zero
        e = plm_t.index_select(0, torch.from_numpy(self_idx[batch]).to(dev)).to(dtype)
        gram = a @ a.mT  # (B, k, k)
        rhs = (a @ e.unsqueeze(-1)).squeeze(-1)  # e_t A^T, (B, k)
        eigval, eigvec = torch.linalg.eigh(gram)
        if ridge > 0:
            inv = 1.0 / (eigval.clamp_min(0) + ridge)
        else:
            # numpy's rule on singular values, squared: keep sigma > rcond * sigma_max
            cutoff = (rcond**2) * eigval[:, -1:].clamp_min(0)
            keep = eigval > cutoff
            inv = torch.where(keep, eigval, torch.ones_like(eigval)).reciprocal() * keep
            n_rank_deficient += int((keep.sum(-1).cpu().numpy() < kb).sum())
        coef = ((rhs.unsqueeze(1) @ eigvec) * inv.unsqueeze(1)) @ eigvec.mT  # (B, 1, k)
        coef = coef * maskf.unsqueeze(1)

        source_idx = nbr_s_idx[flat].reshape(-1)
        out_pos = position[batch]
        for side, src in staged_src.items():
            rows_s = work.gather(side, src, source_idx, dtype)
            out = coef @ rows_s.view(batch.size, k_max, h_s[side])
            rows[side][out_pos] = out.squeeze(1).to(torch.float32).cpu().numpy()
    t_solved = time.perf_counter()

    for side, matrix in rows.items():
        if not np.isfinite(matrix).all():
            raise FloatingPointError(f"SALT projection produced non-finite {side} rows")
        result[side] = matrix
    counts = {s: int((status_raw == i).sum()) for i, s in enumerate(STATUSES)}
    result["stats"] = {
        "n_tokens": int(n),
        "counts": counts,
        "n_capped": int(capped.sum()),
        "n_rank_deficient": int(n_rank_deficient),
        "k_used": _summary(k[todo]),
        "batches": len(batches),
        "padding_fraction": float(1 - k[todo].sum() / padded_entries) if padded_entries else 0.0,
        "options": {
            "min_neighbors": min_neighbors,
            "max_neighbors": max_neighbors,
            "ridge": float(ridge),
            "rcond": float(rcond),
            "dtype": str(dtype).removeprefix("torch."),
            "batch_tokens": batch_tokens,
            "batch_bytes": batch_bytes,
        },
        "device": str(dev),
        "sides": list(sources),
        "seconds": {
            "prepare": round(t_prepared - t_start, 4),
            "solve": round(t_solved - t_prepared, 4),
            "total": round(time.perf_counter() - t_start, 4),
        },
    }
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


def write_projection(result: dict[str, Any], tensors_path: str | Any, meta_path: str | Any) -> None:
    """Write :func:`salt_project`'s result: arrays to safetensors, stats to JSON.

    ``status`` is stored as int8 codes (safetensors holds no strings); the JSON
    lists the code names. Loaded back with ``safetensors.numpy.load_file`` this is
    what the ``salt`` method reads as ``inputs.projected``.
    """
    arrays = {
        "target_ids": np.asarray(result["target_ids"], np.int64),
        "k_used": np.asarray(result["k_used"], np.int32),
        "status": status_codes(result["status"]),
    }
    for side in ("input", "output"):
        if side in result:
            check_finite(f"projected {side} rows", result[side])
            arrays[side] = np.ascontiguousarray(result[side], np.float32)
    with atomic_path(tensors_path) as tmp:
        save_file(arrays, str(tmp))
    # Timings go to the job's log, not into the artifact (byte-identical reruns).
    write_json(meta_path, {"status_codes": list(STATUSES),
                           "stats": without_run_values(result["stats"])})


def read_projection(path: str | Any) -> dict[str, np.ndarray]:
    """The arrays :func:`write_projection` wrote, ``status`` as labels: the ``salt``
    method's ``inputs.projected``."""
    projected = load_file(str(path))
    projected["status"] = status_labels(projected["status"])
    return projected
