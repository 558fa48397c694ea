"""How well a checkpoint's new rows mean what their tokens mean.

For every non-shared target token with a ground truth (the miniature world's,
:mod:`embtransfer.world.truth`, or a real dictionary's held-out half,
:mod:`embtransfer.data.dictionary_split`) and one embedding side of a checkpoint:

* **translation retrieval**: the source text rows (input or output side of the *source*
  model) ranked by cosine to the token's row; a hit at k when one of its translation's
  source ids is among the first k (P@1, P@10). Each token also keeps its chance of a hit at
  k (:func:`chance_hits`): a ranking that ignores the row scores that in expectation.
* **cosine to the oracle row**: the cosine between the token's row and the mean of its
  translation's source rows (the row ``world_oracle`` gives it).
* **centred cosine to the oracle row**: the same after subtracting the source's mean text
  row (of the same side) from both rows. Source rows share a common direction, so the raw
  cosine pays a row for sitting at the centroid (Mean's rows score about 0.2); centred, a
  row at the mean scores 0 (a centred row within float32 rounding of zero counts as zero)
  and a random row about 0. Its mean is dominated by a global offset where the source rows
  are far from isotropic.
* **contrast**: the centred cosine to the token's own oracle row minus its mean centred
  cosine to the other tokens' oracle rows (:func:`embtransfer.evaluation.heldout_rows.contrast`):
  0 for any row that is the same for every token, whatever its offset. The report tests this
  one; the two cosines above are kept in the per-token files, not tested (a mean row or a
  row drawn around the mean can beat a noisy copy of the truth on them).

Each token keeps its truth row's ``split`` (:mod:`embtransfer.world.split`): ``held_out``
concepts, the ``dictionary`` concepts WECHSEL and OFA were aligned on, or ``none``.

Per-token values are kept (:func:`token_scores`), so two methods are compared token by token
(:mod:`embtransfer.core.paired`). A checkpoint's rows are read in the target's id order
(:func:`embtransfer.models.loading.target_rows`): an extended checkpoint holds the source's
ids first.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.evaluation.heldout_rows import contrast

#: Retrieval depths reported.
DEPTHS = (1, 10)
#: Rows of the similarity matrix computed at once.
CHUNK = 2048
#: A centred row shorter than this share of its uncentred length is the mean row itself
#: (float32 rounding apart): its centred cosine is 0, not the cosine of rounding noise.
CENTRED_ZERO = 1e-5


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, h) float64 matrices; 0 where either row is zero."""
    denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return np.where(denom > 0, dots / np.where(denom > 0, denom, 1.0), 0.0)


def oracle_cosines(
    queries: np.ndarray, oracles: np.ndarray, centre: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Raw and centred cosine of each query row to its oracle row (both (n, h) float64);
    ``centre`` is the source's mean text row, subtracted from both for the centred one."""
    centred = queries - centre
    at_mean = np.linalg.norm(centred, axis=1) <= CENTRED_ZERO * np.linalg.norm(queries, axis=1)
    centred[at_mean] = 0.0
    return _cosines(queries, oracles), _cosines(centred, oracles - centre)


def chance_hits(candidates: int, translation_sizes: np.ndarray, k: int) -> np.ndarray:
    """Per token, the chance of a hit at ``k`` when the ``candidates`` rows are ranked at
    random: one of its ``translation_sizes`` source ids among the first k, the hypergeometric
    1 - C(candidates - L, k) / C(candidates, k) (k / candidates only for a one-piece
    translation)."""
    sizes = np.asarray(translation_sizes, np.float64)
    depth = min(k, candidates)
    miss = np.ones(sizes.size)
    for j in range(depth):  # C(N - L, k) / C(N, k) as a product of k ratios
        miss *= np.clip((candidates - sizes - j) / (candidates - j), 0.0, None)
    return 1.0 - miss


def token_scores(
    rows: np.ndarray,
    source: np.ndarray,
    text_ids: np.ndarray,
    target_ids: np.ndarray,
    translations: list[np.ndarray],
) -> pd.DataFrame:
    """Per token: ``target_id``, ``hit_1``, ``hit_10`` (0/1), ``chance_1``, ``chance_10``
    (:func:`chance_hits`), ``cos_oracle`` and ``cos_centred`` (:func:`oracle_cosines`,
    centred on the mean of ``source[text_ids]``) and ``contrast``
    (:func:`embtransfer.evaluation.heldout_rows.contrast` against the oracle rows, the same
    centre; NaN for a single token).

    ``rows``: the checkpoint's (V_t, h) matrix of one side; ``source``: the source model's
    (V_s, h) matrix of the same side; ``text_ids``: the source ids that are text tokens (the
    candidates); ``translations[i]``: the source ids meaning ``target_ids[i]``, a subset of
    ``text_ids``.
    """
    text_ids = np.asarray(text_ids, np.int64)
    target_ids = np.asarray(target_ids, np.int64)
    if rows.shape[1] != source.shape[1]:
        raise ValueError(
            f"the checkpoint's rows have width {rows.shape[1]}, the source's "
            f"{source.shape[1]}: not a transfer of this source"
        )
    position = np.full(source.shape[0], -1, np.int64)
    position[text_ids] = np.arange(text_ids.size)
    candidates = _unit(source[text_ids].astype(np.float64))
    queries = _unit(rows[target_ids].astype(np.float64))
    depth = min(max(DEPTHS), text_ids.size)
    top = np.empty((target_ids.size, depth), np.int64)
    for s in range(0, target_ids.size, CHUNK):
        sims = queries[s : s + CHUNK] @ candidates.T
        part = np.argpartition(-sims, depth - 1, axis=1)[:, :depth]
        order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
        top[s : s + CHUNK] = np.take_along_axis(part, order, axis=1)
    hits = {k: np.zeros(target_ids.size, np.int8) for k in DEPTHS}
    oracles = np.zeros((target_ids.size, source.shape[1]))
    for i, ids in enumerate(translations):
        ids = np.asarray(ids, np.int64)
        where = position[ids]
        if (where < 0).any():
            raise ValueError(
                f"target token {target_ids[i]}: its translation names source ids "
                f"{ids[where < 0].tolist()} that are not text tokens"
            )
        for k in DEPTHS:
            hits[k][i] = np.isin(top[i, :k], where).any()
        oracles[i] = source[ids].astype(np.float64).mean(axis=0)
    sizes = np.array([np.unique(ids).size for ids in translations], np.int64)
    centre = source[text_ids].astype(np.float64).mean(axis=0)
    predicted = rows[target_ids].astype(np.float64)
    cos, centred = oracle_cosines(predicted, oracles, centre)
    apart = (contrast(predicted, oracles, centre)["contrast"].to_numpy()
             if target_ids.size >= 2 else np.full(target_ids.size, np.nan))
    return pd.DataFrame(
        {
            "target_id": target_ids,
            **{f"hit_{k}": hits[k] for k in DEPTHS},
            **{f"chance_{k}": chance_hits(text_ids.size, sizes, k) for k in DEPTHS},
            "cos_oracle": cos,
            "cos_centred": centred,
            "contrast": apart,
        }
    )


#: The cosines a summary averages (each with its standard error).
COSINES = ("cos_oracle", "cos_centred", "contrast")


def summary(scores: pd.DataFrame) -> dict[str, Any]:
    """P@1 and P@10 (percent) with their binomial standard errors, and the mean raw and
    centred cosines to the oracle row with their standard errors, over ``scores``' tokens."""
    n = len(scores)
    if n == 0:
        return {
            "tokens": 0,
            "p_at_1": None,
            "p_at_1_se": None,
            "p_at_10": None,
            "p_at_10_se": None,
            **{k: None for c in COSINES for k in (c, f"{c}_se")},
        }
    out: dict[str, Any] = {"tokens": n}
    for k in DEPTHS:
        share = float(scores[f"hit_{k}"].mean())
        out |= {f"p_at_{k}": 100 * share, f"p_at_{k}_se": 100 * math.sqrt(share * (1 - share) / n)}
    for column in COSINES:
        cos = scores[column].to_numpy(np.float64)
        out[column] = float(cos.mean())
        out[f"{column}_se"] = float(cos.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    return out


def text_ids(source_vocab: pd.DataFrame, rows: int) -> np.ndarray:
    """The source ids that are text tokens (not special) and have a row: the candidates."""
    ids = source_vocab.loc[source_vocab["kind"] != "special", "id"].to_numpy(np.int64)
    return np.unique(ids[(ids >= 0) & (ids < rows)])


def score_checkpoints(
    source: Any, source_vocab: pd.DataFrame, truth: pd.DataFrame, checkpoints: dict[str, Any]
) -> pd.DataFrame:
    """Per (method, side, token): the scores of :func:`token_scores` over the non-shared
    tokens of ``truth``, with each token's ``split``. ``source`` and each checkpoint are
    :class:`embtransfer.models.loading.Embeddings` (``input``, ``output`` None when tied);
    an untied source's output side is scored against its output rows."""
    todo = truth[~truth["shared"].to_numpy(bool)]
    target_ids = todo["target_id"].to_numpy(np.int64)
    translations = list(todo["source_ids"])
    sides = {"input": source.input}
    if source.output is not None:
        sides["output"] = source.output
    parts = []
    for method, ckpt in checkpoints.items():
        for side, matrix in sides.items():
            rows = ckpt.input if side == "input" else ckpt.output
            if rows is None:
                raise ValueError(f"{method}: the checkpoint is tied but the source is not")
            if target_ids.size and target_ids.max() >= rows.shape[0]:
                raise ValueError(
                    f"{method}: the checkpoint has {rows.shape[0]} rows, the truth "
                    f"names target id {target_ids.max()}: another tokenizer's truth"
                )
            lacking = target_ids[~np.isfinite(rows[target_ids]).all(axis=1)]
            if lacking.size:
                raise ValueError(
                    f"{method}: the checkpoint has no finite row for target ids "
                    f"{lacking[:10].tolist()}: its tokenizer lacks them (not this target's "
                    "checkpoint?)")
            scores = token_scores(
                rows, matrix, text_ids(source_vocab, matrix.shape[0]), target_ids, translations
            )
            scores.insert(1, "split", todo["split"].to_numpy(object))
            scores.insert(0, "side", side)
            scores.insert(0, "method", method)
            parts.append(scores)
    columns = ["method", "side", "target_id", "split", *(f"hit_{k}" for k in DEPTHS),
               *(f"chance_{k}" for k in DEPTHS), *COSINES]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
