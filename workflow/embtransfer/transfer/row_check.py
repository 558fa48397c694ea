"""Check the new rows of a transferred checkpoint against the source's own rows.

NaN/Inf rows are refused before anything is written
(:mod:`embtransfer.transfer.transferred_model`); this check catches finite rows that no
healthy method makes. It flags, it does not stop: the checkpoint is written, scored and
ranked as any other, and ``transfer.json`` (``row_check``), the job's log, the zero-shot
record and the report's zero-shot table say which rows are wrong and what to change.

The new rows are the rows the method computed: every row except those it copied from the
source (label ``copied``). The input and the output embeddings are checked separately, each
against the source's matrix of the same side (a tied model has one matrix: the input side).
With ``M`` the longest row of that source matrix (Euclidean norm, over all its rows) and
``m`` its median row norm, a new row is

* **blown up** when its norm exceeds ``BLOWN_UP * M`` (:data:`BLOWN_UP` = 10);
* **zero** when its norm is at most ``ZERO * m`` (:data:`ZERO` = 1e-4).

Why these bounds (fixed from what healthy methods can produce, not from any run):

* A convex combination of source rows (a copy, Mean, Subword-mean, FOCUS, CLP+ and
  WECHSEL's weights) has norm at most ``M`` by the triangle inequality: never blown up.
* A Gaussian draw with the source rows' mean and (diagonal or full) covariance (Random,
  Random-copy, Multivariate, SALT's fallbacks): ``E||x||^2`` is the mean squared source row
  norm, at most ``M^2``, and ``||x||`` is a Lipschitz function of a standard Gaussian with
  constant ``sqrt(lambda_max)`` <= ``sqrt(trace) <= M``, so
  ``P(||x|| > c M) <= exp(-(c - 1)^2 / 2)`` whatever the source's covariance. For no
  healthy row to flag in a 256,000-token vocabulary with probability 1 - 1e-6, ``c`` must
  exceed ``1 + sqrt(2 ln(2.56e11))`` = 8.2; 10 is the round bound above it (per row
  ``exp(-40.5)``, 3e-18). A smaller multiple holds for diagonal draws but not for a
  full-covariance one where one direction dominates (the default source's LM head:
  Multivariate's draws reach 1.7 x its longest row).
* What ten times the longest source row means: a new output row that long outscores every
  source token by an order of magnitude for the hidden states along it (one such row can
  spoil bits per byte), an input row that long swamps the residual stream. Every such
  row is counted, not only whether one exists; the longest new row's ratio to ``M`` is
  recorded on each side whether or not it flags.
* A row at 1e-4 of the median carries no signal (its logit or contribution is 0.01 % of a
  typical row's): the method produced nothing for the token. An average of real rows stays
  far above it (even n centred independent rows average to about 1/sqrt(n) of a row).

Blown-up rows come from weights that do not sum convexly: SALT's per-token pseudo-inverse
amplifies the projection when the neighbours used (k) come close to the target PLM's width h
(so the message for SALT names ``max_neighbors``, ``ridge`` and a wider PLM), and CLP divides
signed cosines by their sum, which can come close to 0 (its message names ``k`` and
``clp_plus``); :data:`ADVICE` holds each method's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

#: A new row is blown up when its norm exceeds this multiple of the longest source row.
BLOWN_UP = 10.0
#: A new row is zero when its norm is at most this fraction of the median source row.
ZERO = 1e-4
#: How many of the worst rows each side names.
WORST = 5
#: The label of rows copied from the source (not checked: they are the source's own).
COPIED = "copied"
#: What to change, by method, when rows are flagged; :data:`GENERIC_ADVICE` elsewhere.
ADVICE = {
    "salt": (
        "SALT's per-token least squares amplifies where the neighbours it uses (k) come "
        "close to the target PLM's width h (k/h near 1): cap transfer.options.salt."
        "max_neighbors well below h, set transfer.options.salt.ridge > 0, or recycle a "
        "wider target PLM"
    ),
    "clp": "CLP divides each token's signed PLM cosines by their sum, which explodes where "
    "that sum comes close to 0: set transfer.options.clp.k (only the k most similar shared "
    "tokens) or use clp_plus",
    "lstsq": "the global least-squares map is ill-conditioned: set "
    "transfer.options.lstsq.ridge > 0",
    "omp": "OMP's least squares amplifies when k comes close to the PLM's width: lower "
    "transfer.options.omp.k",
    "omp_salt_k": "OMP's least squares amplifies when SALT's support size comes close to the "
    "PLM's width: cap transfer.options.salt.max_neighbors or use omp with a smaller k",
}
GENERIC_ADVICE = (
    "check the method's inputs (the target PLM, the fastText vectors, the aligned vectors, "
    "the neighbour tables) and its options (transfer.options.{method})"
)
_BLOCK_ROWS = 8192


def row_norms(matrix: np.ndarray | torch.Tensor) -> np.ndarray:
    """Euclidean norm of every row, in float64, block by block (no full-size float64 copy;
    a model's bf16 matrix is read as it is). A float64 row is scaled by its largest entry
    first, so a finite row's norm is finite even where its squares would overflow; rows of
    narrower floats (float32, bfloat16: at most ~3.4e38) cannot overflow float64's squares,
    so theirs are summed directly (3x faster on Gemma 3's 262k source rows, the same norms
    to ~1e-15)."""
    norms = np.zeros(matrix.shape[0])
    wide = matrix.dtype in (np.float64, torch.float64)
    for s in range(0, matrix.shape[0], _BLOCK_ROWS):
        block = matrix[s : s + _BLOCK_ROWS]
        if isinstance(block, torch.Tensor):
            block = block.detach()
            block = (block if wide else block.float()).numpy()
        if not wide:  # squares summed in float64 without a float64 copy of the block
            block = np.asarray(block)
            norms[s : s + _BLOCK_ROWS] = np.sqrt(
                np.einsum("ij,ij->i", block, block, dtype=np.float64))
            continue
        block = np.asarray(block, np.float64)
        scale = np.abs(block).max(axis=1, initial=0.0)
        safe = np.where(scale > 0, scale, 1.0)
        norms[s : s + _BLOCK_ROWS] = scale * np.linalg.norm(block / safe[:, None], axis=1)
    return norms


def check_side(
    source: np.ndarray | torch.Tensor,
    rows: np.ndarray,
    token_ids: np.ndarray,
    labels: np.ndarray,
    tokens: Callable[[list[int]], list[str]],
) -> dict[str, Any]:
    """The check of one side's new rows (``rows[labels != copied]``) against ``source``."""
    norms_source = row_norms(source)
    if norms_source.size == 0 or norms_source.max() == 0:
        raise ValueError(
            "the source embedding matrix is empty or all zero: it cannot be what the method "
            "read; check the source checkpoint"
        )
    longest, median = float(norms_source.max()), float(np.median(norms_source))
    new = np.flatnonzero(labels != COPIED)
    all_norms = row_norms(rows)
    norms = all_norms[new]
    ratio = norms / longest
    blown = new[ratio > BLOWN_UP]
    zero = new[norms <= ZERO * median]
    order = np.argsort(-ratio[ratio > BLOWN_UP], kind="stable")
    worst_rows = np.concatenate([blown[order], zero])[:WORST]
    names = tokens(token_ids[worst_rows].tolist()) if worst_rows.size else []
    flagged = np.concatenate([blown, zero])
    kinds, counts = np.unique(labels[flagged].astype(str), return_counts=True)
    return {
        "new_rows": int(new.size),
        "source_longest_norm": longest,
        "source_median_norm": median,
        "blown_up": int(blown.size),
        "zero": int(zero.size),
        "flagged": int(flagged.size),
        "share": flagged.size / new.size if new.size else 0.0,
        "max_ratio": float(ratio.max()) if ratio.size else 0.0,
        "flagged_labels": {str(k): int(n) for k, n in zip(kinds, counts, strict=True)},
        "worst": [
            {"id": int(token_ids[r]), "token": str(name), "label": str(labels[r]),
             "ratio": float(all_norms[r] / longest)}
            for r, name in zip(worst_rows.tolist(), names, strict=True)
        ],
    }


def check_new_rows(
    source_input: np.ndarray | torch.Tensor,
    source_output: np.ndarray | torch.Tensor | None,
    input_rows: np.ndarray,
    output_rows: np.ndarray | None,
    token_ids: np.ndarray,
    tokens: Callable[[list[int]], list[str]],
    labels: Sequence[str] | np.ndarray | None = None,
    method: str | None = None,
) -> dict[str, Any]:
    """``transfer.json``'s ``row_check``: :func:`check_side` of the input rows and, for an
    untied model (``output_rows`` given), of the output rows; ``flagged`` (any row flagged),
    ``flagged_rows`` (both sides' flagged rows together) and a ``message`` saying what is
    wrong and what to change.

    ``token_ids`` are the ids the rows belong to (row order), ``tokens`` names ids,
    ``labels`` the method's label of each row (None: every row is new).
    """
    if (output_rows is None) != (source_output is None):
        raise ValueError("output rows and the source's output matrix come together (untied) "
                         "or not at all (tied)")
    labels = (np.full(len(token_ids), "new", dtype=object) if labels is None
              else np.asarray(labels, dtype=object))
    if labels.shape != (len(token_ids),):
        raise ValueError(f"{labels.shape[0]} row labels for {len(token_ids)} rows")
    token_ids = np.asarray(token_ids, np.int64)
    sides = {"input": check_side(source_input, input_rows, token_ids, labels, tokens)}
    if output_rows is not None:
        sides["output"] = check_side(source_output, output_rows, token_ids, labels, tokens)
    total = sum(side["flagged"] for side in sides.values())
    return {
        "blown_up_factor": BLOWN_UP,
        "zero_factor": ZERO,
        **sides,
        "flagged": total > 0,
        "flagged_rows": total,
        "message": _message(sides, method),
    }


def _message(sides: dict[str, dict[str, Any]], method: str | None) -> str:
    name = method or "the method"
    if not any(side["flagged"] for side in sides.values()):
        return (f"row check: every new row of {name} lies within the source's own rows' "
                f"scale (norm above {ZERO:g} x the median source row, at most {BLOWN_UP:g} x "
                "the longest)")
    parts = []
    for side_name, side in sides.items():
        if not side["flagged"]:
            continue
        worst = ", ".join(f"{w['id']} {w['token']!r} ({w['ratio']:.3g}x)" for w in side["worst"])
        parts.append(
            f"{side['flagged']} of the {side['new_rows']} new {side_name} rows "
            f"({side['share']:.2%}): {side['blown_up']} blown up (norm over {BLOWN_UP:g} x "
            f"the source's longest row, up to {side['max_ratio']:.3g}x), {side['zero']} zero "
            f"(by label {side['flagged_labels']}); worst token ids {worst}"
        )
    advice = ADVICE.get(method or "", GENERIC_ADVICE.format(method=method or "<method>"))
    return (f"row check: {name} made absurd rows: {'; '.join(parts)}. Its zero-shot scores "
            f"are not the method's: {advice}")
