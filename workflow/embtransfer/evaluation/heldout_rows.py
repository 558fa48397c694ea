"""Scores for rows predicted for held-out shared tokens: target tokens the source vocabulary
has, hidden from every initialisation method as if the source lacked them, so that each
method's row for them can be compared with the token's true source row.

Two measures, each beside its chance level:

- retrieval: the rank of the true source row among candidate source rows by cosine to the
  predicted row (P@1, P@10, MRR);
- contrast: the centred cosine of the predicted row to its own true row minus its mean centred
  cosine to the other held-out tokens' true rows. A row that is the same for every token
  (the mean row, a centroid) has a mean contrast of exactly 0, whereas its raw cosine to the
  true rows can be high wherever the source rows share a common direction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# Cosines this close count as equal: the same cosine computed by two float64 sums in a
# different order differs by far less, two cosines of distinct float32 rows hardly ever.
TIE_TOLERANCE = 1e-10
# Candidate rows converted to float64 at a time: 16,384 x 640 floats is 84 MB, and the
# cosines of a chunk of 1,024 predicted rows against them 134 MB.
_CANDIDATE_BLOCK = 16_384

RETRIEVAL_COLUMNS = ["source_id", "rank", "hit_1", "hit_10", "reciprocal_rank",
                     "chance_1", "chance_10", "chance_rr"]
CONTRAST_COLUMNS = ["source_id", "cos_own", "cos_others", "contrast"]


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """The rows in float64 scaled to norm 1; a zero row stays zero, so its cosines are 0."""
    out = np.array(rows, dtype=np.float64)
    norms = np.linalg.norm(out, axis=1)
    nonzero = norms > 0
    out[nonzero] /= norms[nonzero, None]
    return out


def _check_rows(predicted: np.ndarray, source_rows: np.ndarray,
                true_ids: np.ndarray) -> np.ndarray:
    """The true ids as int64 after checking the shapes agree and the ids are source rows."""
    if predicted.ndim != 2 or source_rows.ndim != 2:
        raise ValueError(f"predicted {predicted.shape} and source rows {source_rows.shape} "
                         "must both be matrices")
    if predicted.shape[1] != source_rows.shape[1]:
        raise ValueError(f"predicted rows have width {predicted.shape[1]}, source rows "
                         f"{source_rows.shape[1]}")
    ids = np.asarray(true_ids)
    if ids.ndim != 1 or ids.shape[0] != predicted.shape[0]:
        raise ValueError(f"{predicted.shape[0]} predicted rows but true ids of shape "
                         f"{ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"true ids must be integers, not {ids.dtype}")
    ids = ids.astype(np.int64)
    outside = ids[(ids < 0) | (ids >= source_rows.shape[0])]
    if outside.size:
        raise ValueError(f"true ids {np.unique(outside)[:10].tolist()} are not rows of the "
                         f"{source_rows.shape[0]} source rows")
    return ids


def _harmonic(n: int) -> float:
    return float(np.sum(1.0 / np.arange(1, n + 1, dtype=np.float64)))


def retrieval_scores(predicted: np.ndarray, source_rows: np.ndarray, true_ids: np.ndarray,
                     candidates: np.ndarray | None = None, chunk: int = 1024) -> pd.DataFrame:
    """Per predicted row, the rank (1 = nearest) of its true source row ``true_ids[i]`` among
    the candidate source rows (default: all) by cosine similarity to the predicted row.

    Ties take the mean rank over the tie: rank = 1 + #(candidates with a greater cosine)
    + #(other candidates with an equal cosine) / 2, equal meaning within ``TIE_TOLERANCE``.
    The optimistic rank would put a zero row, whose cosine is 0 with every candidate, first;
    the mean rank puts a row that says nothing in the middle, (N + 1) / 2 of N candidates.
    ``hit_1`` and ``hit_10`` are 1 where rank <= 1 or 10, so a tie for the top is no hit;
    ``reciprocal_rank`` is 1 / rank, which for a zero row (2 / (N + 1)) is below chance.

    The chance columns are a uniformly random rank among the N candidates: ``chance_1`` 1/N,
    ``chance_10`` min(10, N)/N, ``chance_rr`` H_N/N (H_N the N-th harmonic number).

    Cosines are float64, ``chunk`` predicted rows against at most ``_CANDIDATE_BLOCK``
    candidate rows at a time, so that 262,144 source rows of width 640 need no float64 copy
    of their own. A true id that is not a candidate raises ValueError naming it.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, not {chunk}")
    ids = _check_rows(predicted, source_rows, true_ids)
    if candidates is None:
        pool = None
        count = source_rows.shape[0]
    else:
        pool = np.unique(np.asarray(candidates).astype(np.int64))
        outside = pool[(pool < 0) | (pool >= source_rows.shape[0])]
        if outside.size:
            raise ValueError(f"candidates {outside[:10].tolist()} are not rows of the "
                             f"{source_rows.shape[0]} source rows")
        missing = np.unique(ids[~np.isin(ids, pool)])
        if missing.size:
            raise ValueError(f"true ids {missing[:10].tolist()} are not among the "
                             f"{pool.size} candidates")
        count = pool.size
    n = ids.size
    if n == 0:
        return pd.DataFrame({c: pd.Series(dtype=np.float64) for c in RETRIEVAL_COLUMNS})
    if count == 0:
        raise ValueError("no candidate source rows")

    queries = unit_rows(predicted)
    own = np.einsum("ij,ij->i", queries, unit_rows(source_rows[ids]))
    greater = np.zeros(n, dtype=np.int64)
    equal = np.zeros(n, dtype=np.int64)
    # Candidate blocks outside, so each candidate row is converted to float64 once.
    for start in range(0, count, _CANDIDATE_BLOCK):
        stop = min(start + _CANDIDATE_BLOCK, count)
        rows = source_rows[start:stop] if pool is None else source_rows[pool[start:stop]]
        block = unit_rows(rows)
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            diff = queries[lo:hi] @ block.T
            diff -= own[lo:hi, None]
            greater[lo:hi] += np.count_nonzero(diff > TIE_TOLERANCE, axis=1)
            equal[lo:hi] += np.count_nonzero(np.abs(diff) <= TIE_TOLERANCE, axis=1)
    # ``equal`` counts the true row itself, as it is a candidate.
    rank = 1.0 + greater + (equal - 1) / 2.0
    return pd.DataFrame({
        "source_id": ids,
        "rank": rank,
        "hit_1": (rank <= 1).astype(np.int64),
        "hit_10": (rank <= 10).astype(np.int64),
        "reciprocal_rank": 1.0 / rank,
        "chance_1": np.full(n, 1.0 / count),
        "chance_10": np.full(n, min(10, count) / count),
        "chance_rr": np.full(n, _harmonic(count) / count),
    })


def contrast(predicted: np.ndarray, truths: np.ndarray, centre: np.ndarray) -> pd.DataFrame:
    """Per predicted row p_i with truth row t_i (both (n, h)) and c = ``centre``:
    ``cos_own`` = cos(p_i - c, t_i - c), ``cos_others`` = the mean over the other tokens
    j != i of cos(p_i - c, t_j - c), ``contrast`` = the difference.

    For a row that is the same for every token the mean contrast is exactly 0 (up to float
    error): with u its unit centred row and s the sum of the unit centred truth rows, the
    mean of cos_own is u.s / n and the mean of cos_others is (n u.s - u.s) / (n (n - 1)) =
    u.s / n. So no constant row wins it; the raw cosine to the truth rows has no such
    property, since source rows share a common direction. Zero centred rows have cosine 0.
    O(n h): cos_others is the cosine to s less the own term, over n - 1. Needs at least two
    tokens."""
    n = predicted.shape[0]
    if n < 2:
        raise ValueError(f"the contrast needs at least two tokens, not {n}")
    if truths.shape != predicted.shape:
        raise ValueError(f"truth rows {truths.shape} and predicted rows {predicted.shape} "
                         "must have one shape")
    c = np.asarray(centre, dtype=np.float64)
    if c.shape != (predicted.shape[1],):
        raise ValueError(f"centre has shape {c.shape}, not ({predicted.shape[1]},)")
    queries = unit_rows(np.asarray(predicted, dtype=np.float64) - c)
    units = unit_rows(np.asarray(truths, dtype=np.float64) - c)
    own = np.einsum("ij,ij->i", queries, units)
    others = (queries @ units.sum(axis=0) - own) / (n - 1)
    return pd.DataFrame({"cos_own": own, "cos_others": others, "contrast": own - others})


def contrast_scores(predicted: np.ndarray, source_rows: np.ndarray, true_ids: np.ndarray,
                    centre: np.ndarray | None = None) -> pd.DataFrame:
    """:func:`contrast` of each predicted row against its true source row
    ``source_rows[true_ids[i]]``, centred on ``centre`` (default: the mean of all source
    rows), with the ``source_id`` of each."""
    ids = _check_rows(predicted, source_rows, true_ids)
    # float64 accumulation without a float64 copy of every source row (contrast checks the
    # token count and the centre's shape)
    c = np.mean(source_rows, axis=0, dtype=np.float64) if centre is None else centre
    return pd.concat([pd.DataFrame({"source_id": ids}),
                      contrast(predicted, source_rows[ids], c)], axis=1)


def summary(scores: pd.DataFrame) -> dict[str, Any]:
    """The means over tokens of whichever scores are present, each beside its chance mean:
    P@1 and P@10 in %, MRR, and the mean contrast (chance 0: a row unrelated to the token,
    or one row for every token, scores 0 in expectation). None where there are no tokens."""
    out: dict[str, Any] = {"tokens": len(scores)}
    for key, column, scale in _SUMMARY:
        if column in scores:
            out[key] = float(scores[column].mean() * scale) if len(scores) else None
    if "contrast" in scores:
        out["chance_contrast"] = 0.0 if len(scores) else None
    return out


# (key in the summary, column of the scores, scale)
_SUMMARY = [
    ("p_at_1", "hit_1", 100.0), ("chance_p_at_1", "chance_1", 100.0),
    ("p_at_10", "hit_10", 100.0), ("chance_p_at_10", "chance_10", 100.0),
    ("mrr", "reciprocal_rank", 1.0), ("chance_mrr", "chance_rr", 1.0),
    ("contrast", "contrast", 1.0), ("cos_own", "cos_own", 1.0),
    ("cos_others", "cos_others", 1.0),
]
