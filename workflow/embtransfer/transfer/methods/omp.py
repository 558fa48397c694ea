"""OMP (mergekit-tokensurgeon's default; Goddard & Neto 2025): copy shared tokens, fit the
others by orthogonal matching pursuit over the shared tokens in the target PLM's space.

Reference: ``mergekit.tokensurgeon.batch_omp`` (mergekit 0.1.5), with the target PLM as
the donor (the model that already has the new tokenizer) and the source LLM as the base.
:func:`embtransfer.transfer.omp_solver.omp_coefficients` picks each non-shared token's support
(``k`` shared tokens) and least-squares coefficients on the PLM's rows, in the format of
SALT's projection; :func:`embtransfer.transfer.regression.apply_coefficients` combines the
same tokens' source rows with them, as for ``salt``. SALT's coefficients are least squares
on its support too: the two differ only in how the support is chosen (sparsemax over
fastText cosines there, greedy residual correlation in the PLM space here) and its size.

* Candidates: the shared tokens of the overlap stage that are not special tokens (a
  special token's row is learnt for its role, not its text; the pairing by role,
  cls -> bos, would put unrelated rows behind equal coefficients).
* The output side of an untied source: a second, independent OMP on the PLM's own
  output head where it has an untied one; otherwise the input side's coefficients.
* ``centered``: the candidates' mean PLM row is subtracted before the fit, and the
  candidates' mean source row times ``1 - sum(c)`` added to the combination (an affine
  fit; the reference does not centre).
* A token whose PLM row is zero or not finite (``zero_row``) is drawn from N(mean, std)
  of the source rows, as SALT's fallback, with ``inputs.rng(name, side)``.

``omp_salt_k`` is the same method with ``k`` the median of SALT's ``k_used`` over its
projected tokens (read from SALT's projection), so a report can tell the support's
size from its choice. Where a run has both on a pair, with the same ``centered``, rule
``omp_solve`` solves once to the larger k for both (:func:`solve_shared`: OMP's first k
picks do not depend on how many follow) and each transfer job reads its k's fit
(:func:`read_fits`); at real shapes the solve is most of both jobs' time.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from embtransfer.core.atomic import atomic_path
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_normal,
)
from embtransfer.transfer.omp_solver import omp_coefficients_at
from embtransfer.transfer.regression import STATUSES, apply_coefficients


def candidates(inputs: TransferInputs) -> tuple[np.ndarray, np.ndarray]:
    """(target ids, source ids) of the shared tokens OMP may pick: no special tokens."""
    target_ids, source_ids = inputs.shared()
    vocab = inputs.target_vocab
    if "kind" in vocab.columns:
        special = vocab.loc[vocab["kind"] == "special", "id"].to_numpy(np.int64)
        keep = ~np.isin(target_ids, special)
        target_ids, source_ids = target_ids[keep], source_ids[keep]
    return target_ids, source_ids


def salt_median_k(inputs: TransferInputs) -> int:
    """The median support size of SALT's projected tokens (rounded, at least 1)."""
    projected = inputs.projected
    if projected is None:
        raise ValueError("omp_salt_k needs SALT's projection (inputs.projected)")
    k_used = np.asarray(projected["k_used"])[np.asarray(projected["status"]) == "projected"]
    if k_used.size == 0:
        raise ValueError("omp_salt_k: SALT projected no token, so it has no median k")
    return max(1, round(float(np.median(k_used))))


def _donors(inputs: TransferInputs) -> dict[str, np.ndarray]:
    """The PLM's rows each side is fitted on: its input rows, and its untied head's for the
    output side where it has one."""
    if inputs.plm_input is None:
        raise ValueError("OMP needs the target PLM's embeddings (inputs.plm_input)")
    donors = {"plm_input": inputs.plm_input}
    if inputs.plm_output is not None:
        donors["plm_output"] = inputs.plm_output
    return donors


def _donor(inputs: TransferInputs, side: str) -> str:
    """The PLM's rows a side is fitted on: its untied head's for the output side where it
    has one (a fit of its own), else its input rows."""
    return "plm_output" if side == "output" and inputs.plm_output is not None else "plm_input"


def _fit(inputs: TransferInputs, donor: str, k: int, centered: bool) -> dict[str, Any]:
    """OMP coefficients on one donor matrix, computed once for both sides (or read from
    the shared solve: :func:`read_fits`)."""
    key = ("omp", donor, k, centered)
    if key not in inputs.memo:
        inputs.memo.update(_solve(inputs, donor, [k], centered))
    return inputs.memo[key]


def _solve(inputs: TransferInputs, donor: str, ks: list[int], centered: bool
           ) -> dict[tuple, dict[str, Any]]:
    cand_t, cand_s = candidates(inputs)
    fits = omp_coefficients_at(_donors(inputs)[donor], nonshared_ids(inputs), cand_t, cand_s,
                               ks, centered=centered)
    return {("omp", donor, k, centered): fit for k, fit in fits.items()}


def solve_shared(inputs: TransferInputs, k: int, centered: bool) -> dict[tuple, dict[str, Any]]:
    """The fits of ``omp`` (``k``) and ``omp_salt_k`` (SALT's median k) on every donor the
    transfer reads (the PLM's head only for an untied source's output side), one solve per
    donor to the larger k."""
    fits: dict[tuple, dict[str, Any]] = {}
    sides = ["input"] + (["output"] if inputs.source_output is not None else [])
    for donor in dict.fromkeys(_donor(inputs, side) for side in sides):
        fits.update(_solve(inputs, donor, sorted({k, salt_median_k(inputs)}), centered))
    return fits


_ARRAYS = ("target_ids", "k_used", "source_ids", "coefficients", "candidate_ids")


def write_fits(path: str | os.PathLike, fits: dict[tuple, dict[str, Any]]) -> None:
    """:func:`solve_shared`'s fits as one safetensors file (statuses as codes, statistics in
    its metadata)."""
    arrays, meta = {}, {}
    for (_, donor, k, centered), fit in fits.items():
        name = f"{donor}.{k}.{int(centered)}"
        for field in _ARRAYS:
            arrays[f"{name}.{field}"] = np.ascontiguousarray(fit[field])
        arrays[f"{name}.status"] = np.array([STATUSES.index(s) for s in fit["status"]], np.int8)
        meta[name] = json.dumps(fit["stats"])
    with atomic_path(path) as tmp:
        save_file(arrays, str(tmp), metadata=meta)


def read_fits(path: str | os.PathLike, inputs: TransferInputs) -> None:
    """Put :func:`write_fits`'s fits on ``inputs.memo``, where :func:`_fit` finds them;
    refuses a file whose tokens are not these inputs' non-shared tokens."""
    with safe_open(str(path), "np") as f:
        meta = f.metadata() or {}
        for name, stats in meta.items():
            donor, k, centered = name.split(".")
            fit = {field: f.get_tensor(f"{name}.{field}") for field in _ARRAYS}
            if not np.array_equal(fit["target_ids"], nonshared_ids(inputs)):
                raise ValueError(f"{path} holds OMP fits of other tokens than this transfer's "
                                 "non-shared tokens: rerun rule omp_solve")
            fit["status"] = np.asarray(STATUSES, dtype=object)[f.get_tensor(f"{name}.status")]
            fit["stats"] = json.loads(stats)
            inputs.memo[("omp", donor, int(k), bool(int(centered)))] = fit


def run_omp(
    inputs: TransferInputs, params: dict[str, Any], side: str, name: str, k: int
) -> SideResult:
    if inputs.plm_input is None:
        raise ValueError(f"{name} needs the target PLM's embeddings (inputs.plm_input)")
    donor = _donor(inputs, side)
    fit = _fit(inputs, donor, k, bool(params["centered"]))
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    source = inputs.source_matrix(side)
    values = apply_coefficients(fit, source)
    if params["centered"]:  # the affine fit: c S + (1 - sum c) * mean source row
        k_used = np.asarray(fit["k_used"], np.int64)
        total = np.zeros(k_used.size)
        np.add.at(total, np.repeat(np.arange(k_used.size), k_used), fit["coefficients"])
        offset = source[candidates(inputs)[1]].astype(np.float64).mean(axis=0)
        fitted = k_used > 0
        values[fitted] += ((1.0 - total[fitted])[:, None] * offset).astype(np.float32)
    target_ids = np.asarray(fit["target_ids"], np.int64)
    status = np.asarray(fit["status"], dtype=object)
    done = status == "projected"
    rows[target_ids[done]] = values[done]
    how[target_ids[done]] = "projected"
    how[target_ids[~done]] = status[~done].astype(str)
    fallback = np.flatnonzero(how == "zero_row")  # increasing target id
    rows[fallback] = source_normal(inputs, side, inputs.rng(name, side), fallback.size)
    stats = {"counts": count_labels(how), "k": int(fit["stats"]["k"]),
             "n_stopped_early": fit["stats"]["n_stopped_early"],
             "donor": donor}
    return SideResult(rows=rows, how=how, stats=stats)


@register("omp")
def omp(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    return run_omp(inputs, params, side, "omp", int(params["k"]))


@register("omp_salt_k")
def omp_salt_k(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    return run_omp(inputs, params, side, "omp_salt_k", salt_median_k(inputs))
