"""TokAlign (Li et al., ACL 2025; code ``ZNLP/TokAlign``): each target token takes the rows
of one source token, the one whose place among the shared tokens is most like its own.

Reference: ``src/cal_trans_matrix.py`` (``convert2relative_rep`` and its main loop) and
``src/convert.py`` (``trans2switch``). Each tokenizer's GloVe space is trained apart on one
corpus tokenized its way (:mod:`embtransfer.transfer.glove`, rule ``tokalign_glove``), so the
two spaces share no coordinates; what they share is the tokens both vocabularies hold.

* **pivots**: the shared tokens (the overlap, the reference's exact-string matches) with a
  GloVe vector on both sides, in a seeded shuffled order, the first ``pivots`` of them;
* **relative representation**: each token's cosines to the pivots in its own space (unit
  GloVe vectors times the unit pivot vectors);
* **the map**: a shared token keeps its match (``copied``); any other target token with a
  vector takes the source token whose relative representation has the largest dot product
  with its own (``aligned``: the reference's ``rep1 @ rep2.T`` and argmax); one without a
  vector takes a source token drawn uniformly (``random_token``);
* **the rows**: the mapped source token's input row, and its output row for an untied
  source (the reference copies both).

Where this departs from the reference, and why: candidates and random draws are the
source's text tokens with a vector (:meth:`TransferInputs.statistic_ids`), not every id, so
no special token's role row and no held-out row is copied; the pivots are drawn with
numpy's generator seeded by the run, not Python's ``random.seed(0)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.evaluation.heldout_rows import unit_rows
from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import count_labels, empty_result

#: Target rows whose relative representations are compared with every candidate at once.
CHUNK = 4096


def pick_pivots(gold_t: np.ndarray, gold_s: np.ndarray, target_missing: np.ndarray,
                source_missing: np.ndarray, count: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """(target ids, source ids) of the pivots: the gold pairs in a shuffled order, those with
    a vector on both sides, the first ``count``."""
    order = rng.permutation(len(gold_t))
    t, s = np.asarray(gold_t, np.int64)[order], np.asarray(gold_s, np.int64)[order]
    both = ~target_missing[t] & ~source_missing[s]
    return t[both][:count], s[both][:count]


def relative_map(target: np.ndarray, target_missing: np.ndarray, source: np.ndarray,
                 source_missing: np.ndarray, pivots: tuple[np.ndarray, np.ndarray],
                 candidates: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """For each target id of ``todo`` (each with a vector), the candidate source id whose
    relative representation (cosines to the pivots, :func:`pick_pivots`) has the largest
    dot product with its own; the first such candidate on a tie."""
    pivot_t, pivot_s = pivots
    if pivot_t.size == 0:
        raise ValueError("tokalign: no shared token has a GloVe vector on both sides to pivot "
                         "on; train GloVe on more text or lower its min_count")
    if target_missing[todo].any():
        raise ValueError("tokalign: relative_map got target tokens without a vector")
    cand = np.asarray(candidates, np.int64)
    cand = cand[~source_missing[cand]]
    if cand.size == 0:
        raise ValueError("tokalign: no candidate source token has a GloVe vector")
    rel_source = unit_rows(source[cand]) @ unit_rows(source[pivot_s]).T
    pivot_rows = unit_rows(target[pivot_t]).T
    out = np.empty(todo.size, np.int64)
    for start in range(0, todo.size, CHUNK):
        part = todo[start : start + CHUNK]
        rel_target = unit_rows(target[part]) @ pivot_rows
        out[start : start + CHUNK] = cand[np.argmax(rel_target @ rel_source.T, axis=1)]
    return out


def token_map(inputs: TransferInputs, params: dict[str, Any]
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """(source id, label) of every target token and the number of pivots (shared by both
    sides: computed once)."""
    if "tokalign" in inputs.memo:
        return inputs.memo["tokalign"]
    if inputs.glove is None:
        raise ValueError("tokalign needs the GloVe vectors of both tokenizations "
                         "(inputs.glove)")
    (source, source_missing), (target, target_missing) = inputs.glove["source"], \
        inputs.glove["target"]
    if target.shape[0] != inputs.n_target:
        raise ValueError(f"tokalign: {target.shape[0]} target GloVe vectors for "
                         f"{inputs.n_target} target tokens")
    rng = np.random.default_rng([inputs.seed, 0x70CA])
    shared_t, shared_s = inputs.shared()
    pivots = pick_pivots(shared_t, shared_s, target_missing, source_missing,
                         int(params["pivots"]), rng)
    mapped = np.full(inputs.n_target, -1, np.int64)
    how = np.full(inputs.n_target, "unset", object)
    mapped[shared_t], how[shared_t] = shared_s, "copied"
    candidates = inputs.statistic_ids()
    candidates = candidates[candidates < source.shape[0]]
    rest = np.flatnonzero(mapped < 0)
    seen, lost = rest[~target_missing[rest]], rest[target_missing[rest]]
    mapped[seen] = relative_map(target, target_missing, source, source_missing, pivots,
                                candidates, seen)
    how[seen] = "aligned"
    mapped[lost] = rng.choice(candidates, lost.size) if lost.size else lost
    how[lost] = "random_token"
    inputs.memo["tokalign"] = (mapped, how, int(pivots[0].size))
    return inputs.memo["tokalign"]


@register("tokalign")
def tokalign(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    mapped, how, pivots = token_map(inputs, params)
    rows, _ = empty_result(inputs, side)
    rows[:] = inputs.source_matrix(side)[mapped]
    return SideResult(rows, how.copy(), {"counts": count_labels(how), "pivots": pivots})
