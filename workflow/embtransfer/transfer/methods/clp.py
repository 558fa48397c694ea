"""CLP-Transfer (Ostendorff & Rehm 2023) and CLP+ (Yamaguchi et al. 2024); docs/design.md §4.4.

Both copy shared tokens' source rows (``copied``) and build every other target
token t from the shared tokens' source rows, weighted by the cosine similarity
s_to = cos(p_t, p_o) of the target PLM's input embeddings p (rows by target id)
of t and each shared token o:

``clp``       e_t = sum_o (s_to / sum_o' s_to') * source_row(o)      (``weighted``)

              Linear normalisation of the raw cosines over *all* shared tokens,
              exactly as the reference implementation
              (github.com/malteos/clp-transfer, clp.py: ``norm_sims = token_sims
              / token_sims.sum()``; ``np.average(overlapping_token_vecs,
              weights=norm_sims)``), which has no top-k: ``k: null`` (default)
              reproduces it. Negative cosines stay in as negative weights, as
              there. ``k: <int>`` is an option, not the paper: only the k most
              similar shared tokens, their cosines normalised the same way.
              A row whose cosine sum is ~0 (|sum| < 1e-6) has no usable
              weights (the reference divides by zero); it is drawn from
              N(mean, std) of the source rows and labelled ``degenerate``.

``clp_plus``  e_t = sum_o sparsemax(s_t)_o * source_row(o)           (``weighted``)

              As the CLP+ reference (Yamaguchi et al., ``entmax.sparsemax`` over
              the full cosine row, then the weighted sum); computed exactly by
              :mod:`embtransfer.neighbors.sparsemax` (top-``prefilter_k`` shortcut with
              the full-row fallback).

Shared tokens are taken sorted by target id, so the order of the overlap table
does not matter. Shared tokens whose PLM row is zero have no cosine and are left
out of the candidates (counted); non-shared tokens whose PLM row is zero are
drawn from N(mean, std) (``missing_vector``). CLP's dense weights are applied factorised
(``u (C^T S) / u (C^T 1)``, the same sums regrouped, float64): no query x shared similarity
matrix, which at paper scale (20k x 30k x 2048) made the reference's cost. CLP with ``k``
and CLP+ compute the similarity matrix ``chunk_rows`` rows at a time (one float32 matmul
per chunk).

For untied sources the output side repeats the same weights with the source LM
head's rows (the PLM's input space measures similarity on both sides; the CLP+
reference uses the helper model's output embeddings for the head instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from embtransfer.core.topk import topk_lowest_index
from embtransfer.core.workspace import Workspace
from embtransfer.neighbors.sparsemax import sparsemax_block
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_normal,
    sparse_combine,
)

#: |sum of cosines| below this leaves a CLP row without usable weights.
MIN_SIM_SUM = 1e-6
_MIN_NORM = 1e-8


def _unit_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1)
    ok = norms > _MIN_NORM
    return (x / np.where(ok, norms, 1.0)[:, None]).astype(np.float32, copy=False), ok


class _Setup:
    """Candidates, query rows and their unit PLM vectors, shared by both variants."""

    def __init__(self, inputs: TransferInputs, side: str, name: str) -> None:
        plm = inputs.plm_input
        if plm is None:
            raise ValueError(f"{name} needs the target PLM's input embeddings (inputs.plm_input)")
        if plm.ndim != 2 or plm.shape[0] < inputs.n_target:
            raise ValueError(
                f"{name}: PLM embeddings {plm.shape} have fewer rows than the target "
                f"vocabulary ({inputs.n_target}); the PLM and the target tokenizer disagree"
            )
        unit, ok = _unit_rows(plm[: inputs.n_target])
        shared_t, shared_s = inputs.shared()  # sorted by target id
        cand = ok[shared_t]
        if not cand.any():
            raise ValueError(f"{name}: no shared token has a non-zero PLM embedding")
        self.n_shared_dropped = int((~cand).sum())
        self.cand_unit = torch.from_numpy(np.ascontiguousarray(unit[shared_t[cand]]))
        self.cand_source = shared_s[cand]
        todo = nonshared_ids(inputs)
        self.queries = todo[ok[todo]]
        self.no_vector = todo[~ok[todo]]
        self.unit = unit
        self.rows, self.how = empty_result(inputs, side)
        copy_shared(inputs, side, self.rows, self.how)

    def similarity_chunks(self, chunk_rows: int):
        """(target ids, cosine block [chunk, n_candidates] float32) per chunk of queries."""
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be >= 1")
        with torch.inference_mode():
            for s in range(0, self.queries.size, chunk_rows):
                ids = self.queries[s : s + chunk_rows]
                yield ids, (torch.from_numpy(self.unit[ids]) @ self.cand_unit.T).numpy()

    def finish(self, inputs: TransferInputs, side: str, name: str) -> SideResult:
        rng = inputs.rng(name, side)
        self.rows[self.no_vector] = source_normal(inputs, side, rng, self.no_vector.size)
        self.how[self.no_vector] = "missing_vector"
        bad = self.how == "degenerate"
        self.rows[bad] = source_normal(inputs, side, rng, int(bad.sum()))
        return SideResult(
            self.rows,
            self.how,
            {"counts": count_labels(self.how), "shared_without_plm_vector": self.n_shared_dropped},
        )


@register("clp")
def clp(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    k = params["k"]
    if k is not None and int(k) < 1:
        raise ValueError(f"clp: k must be >= 1 or null, got {k}")
    st = _Setup(inputs, side, "clp")
    if k is None or int(k) >= st.cand_source.size:
        _clp_dense(st, inputs.source_matrix(side), int(params["chunk_rows"]))
    else:
        _clp_top_k(st, inputs.source_matrix(side), int(k), int(params["chunk_rows"]))
    result = st.finish(inputs, side, "clp")
    result.stats["k"] = None if k is None else int(k)
    return result


def _clp_dense(st: _Setup, source: np.ndarray, chunk_rows: int) -> None:
    """The reference's weights over every shared token, factorised: with unit PLM rows u
    (query) and c_o (candidates), sum_o (u.c_o) source_row(o) = u (C^T S) and the cosine sum
    u (C^T 1), so the h_p x h_s matrix C^T S is formed once (float64) in place of a query x
    shared similarity matrix and its product with S (1.6 TFLOP at 31,753 x 18,247 tokens,
    width 768 and 640; 26 s of a core, against ~1 s)."""
    cand = st.cand_unit.numpy().astype(np.float64)
    summed = cand.T @ np.asarray(source[st.cand_source], dtype=np.float64)
    cosine_sum = cand.sum(axis=0)
    for s in range(0, st.queries.size, chunk_rows):
        ids = st.queries[s : s + chunk_rows]
        unit = st.unit[ids].astype(np.float64)
        total = unit @ cosine_sum
        ok = np.abs(total) >= MIN_SIM_SUM
        st.rows[ids[ok]] = (unit[ok] @ summed) / total[ok, None]
        st.how[ids[ok]] = "weighted"
        st.how[ids[~ok]] = "degenerate"


def _clp_top_k(st: _Setup, source: np.ndarray, k: int, chunk_rows: int) -> None:
    """Only the k most similar shared tokens of each query (an option, not the paper)."""
    for ids, sims in st.similarity_chunks(chunk_rows):
        with torch.inference_mode():
            top, idx = topk_lowest_index(torch.from_numpy(sims), k)  # ties: lower target id
        total = top.sum(dim=1, dtype=torch.float64)
        ok = (total.abs() >= MIN_SIM_SUM).numpy()
        weights = (top / total.to(torch.float32).unsqueeze(1))[ok].numpy()
        offsets = np.arange(weights.shape[0] + 1, dtype=np.int64) * k
        columns = st.cand_source[idx[ok].numpy()].ravel()
        st.rows[ids[ok]] = sparse_combine(offsets, columns, weights.ravel(), source)
        st.how[ids[ok]] = "weighted"
        st.how[ids[~ok]] = "degenerate"


@register("clp_plus")
def clp_plus(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    prefilter_k = int(params["prefilter_k"])
    st = _Setup(inputs, side, "clp_plus")
    source = inputs.source_matrix(side)
    workspace = Workspace()
    support: list[np.ndarray] = []
    fallback = 0
    for ids, sims in st.similarity_chunks(int(params["chunk_rows"])):
        part = sparsemax_block(np.ascontiguousarray(sims), prefilter_k, None, workspace)
        st.rows[ids] = sparse_combine(
            part.indptr, st.cand_source[part.indices], part.weights, source
        )
        st.how[ids] = "weighted"
        support.append(part.support)
        fallback += part.n_fallback
    result = st.finish(inputs, side, "clp_plus")
    sizes = np.concatenate(support) if support else np.zeros(0, np.int64)
    result.stats["support"] = {
        "mean": float(sizes.mean()) if sizes.size else None,
        "max": int(sizes.max()) if sizes.size else None,
    }
    result.stats["fallback_rows"] = int(fallback)
    return result
