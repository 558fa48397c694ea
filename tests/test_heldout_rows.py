"""The scores of rows predicted for held-out shared tokens: that they reach their best for the
true rows, degrade with noise, sit at chance for random rows and give a constant row no
credit, and that the vectorised ranks and contrasts match brute-force ones."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from embtransfer.evaluation import heldout_rows
from embtransfer.evaluation.heldout_rows import contrast_scores, retrieval_scores, summary


def _source(seed: int, rows: int, width: int, offset: float = 0.0) -> np.ndarray:
    # An offset gives the rows the common direction real embedding matrices have.
    return np.random.default_rng(seed).standard_normal((rows, width)) + offset


def _scores(predicted: np.ndarray, source: np.ndarray, ids: np.ndarray) -> dict:
    contrast = contrast_scores(predicted, source, ids).drop(columns="source_id")
    return summary(retrieval_scores(predicted, source, ids).join(contrast))


def test_true_rows_score_best() -> None:
    source = _source(0, 500, 32, offset=0.5)
    ids = np.random.default_rng(1).choice(500, 60, replace=False)
    got = _scores(source[ids], source, ids)
    assert got["p_at_1"] == 100.0 and got["p_at_10"] == 100.0
    assert got["mrr"] == 1.0
    assert got["chance_p_at_1"] == pytest.approx(100 / 500)
    assert got["contrast"] > 0.9


def _decreasing(values: list[float], bounds: tuple[float, ...]) -> None:
    for a, b in zip(values, values[1:], strict=False):
        # Two levels may both sit at a bound (every token found, or none).
        assert a > b or (a == b and a in bounds), values


def test_noise_degrades_every_score() -> None:
    source = _source(7, 2000, 32, offset=0.5)
    rng = np.random.default_rng(8)
    ids = rng.choice(2000, 500, replace=False)
    # The same noise at every scale, so the levels differ only in its size; from noise as
    # large as the rows (scale 1) to noise that drowns them (scale 50, near chance).
    noise = rng.standard_normal((500, 32))
    levels = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 50.0]
    got = [_scores(source[ids] + s * noise, source, ids) for s in levels]
    _decreasing([g["p_at_1"] for g in got], (0.0, 100.0))
    _decreasing([g["p_at_10"] for g in got], (0.0, 100.0))
    _decreasing([g["mrr"] for g in got], (1.0,))
    _decreasing([g["contrast"] for g in got], ())
    assert got[0]["p_at_1"] == 100.0 and got[-1]["p_at_1"] < 1.0


def test_random_rows_sit_at_chance() -> None:
    candidates, n = 50, 2000
    source = _source(3, candidates, 16, offset=0.5)
    rng = np.random.default_rng(4)
    # True ids drawn uniformly and independently of the predicted rows: each token's rank
    # is then uniform over 1..N whatever the source rows, and independent between tokens.
    ids = rng.integers(0, candidates, n)
    predicted = rng.standard_normal((n, 16))
    got = summary(retrieval_scores(predicted, source, ids))
    k = np.arange(1, candidates + 1)
    mrr = np.mean(1 / k)
    assert got["chance_mrr"] == pytest.approx(mrr)
    # 4 standard errors of the mean over n tokens of a uniformly random rank's 1/rank
    se_rr = math.sqrt((np.mean(1 / k**2) - mrr**2) / n)
    assert abs(got["mrr"] - mrr) < 4 * se_rr
    p10 = 10 / candidates
    assert got["chance_p_at_10"] == pytest.approx(100 * p10)
    assert abs(got["p_at_10"] / 100 - p10) < 4 * math.sqrt(p10 * (1 - p10) / n)
    contrast = contrast_scores(predicted, source, ids)["contrast"]
    assert abs(contrast.mean()) < 4 * contrast.std() / math.sqrt(n)


def _fixed_query_ranks(query: np.ndarray, source: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The rank of each true row when one fixed row is the query for every token."""
    unit = source / np.linalg.norm(source, axis=1, keepdims=True)
    cos = unit @ (query / np.linalg.norm(query))
    return np.array([1 + np.sum(cos > cos[i]) + (np.sum(cos == cos[i]) - 1) / 2 for i in ids])


def test_constant_rows_score_the_fixed_query_and_no_contrast() -> None:
    source = _source(5, 300, 16, offset=1.0)
    ids = np.random.default_rng(6).choice(300, 80, replace=False)
    rows = {"mean": source.mean(axis=0), "constant": np.random.default_rng(9).standard_normal(16)}
    for name, row in rows.items():
        predicted = np.tile(row, (80, 1))
        ranks = retrieval_scores(predicted, source, ids)["rank"].to_numpy()
        np.testing.assert_array_equal(ranks, _fixed_query_ranks(row, source, ids), err_msg=name)
        assert abs(contrast_scores(predicted, source, ids)["contrast"].mean()) < 1e-12, name
    # The raw cosine has no such guard: the mean row is close to every true row.
    mean_row = rows["mean"]
    raw = source[ids] @ mean_row / (np.linalg.norm(source[ids], axis=1)
                                    * np.linalg.norm(mean_row))
    assert raw.mean() > 0.5
    # A zero row ties every candidate: the middle rank.
    zero = retrieval_scores(np.zeros((80, 16)), source, ids)
    assert (zero["rank"] == (300 + 1) / 2).all()


def _brute_ranks(predicted: np.ndarray, source: np.ndarray, ids: np.ndarray) -> list[float]:
    def cos(a: list[float], b: list[float]) -> float:
        na = math.sqrt(sum(x * x for x in a))
        nb = math.sqrt(sum(x * x for x in b))
        if na == 0 or nb == 0:
            return 0.0
        return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)

    ranks = []
    for p, t in zip(predicted.tolist(), ids.tolist(), strict=True):
        own = cos(p, source[t].tolist())
        greater = equal = 0
        for j, row in enumerate(source.tolist()):
            c = cos(p, row)
            if abs(c - own) <= 1e-12:
                equal += j != t
            elif c > own:
                greater += 1
        ranks.append(1 + greater + equal / 2)
    return ranks


@pytest.mark.parametrize("seed", range(5))
def test_ranks_match_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Small integers: zero rows, duplicate rows and distinct rows at equal cosines.
    source = rng.integers(-1, 3, (20, 4)).astype(np.float64)
    source[5] = source[2]
    source[11] = source[2]
    source[7] = 0.0
    ids = rng.integers(0, 20, 15)
    predicted = rng.integers(-1, 3, (15, 4)).astype(np.float64)
    predicted[0] = 0.0
    predicted[1] = source[ids[1]]
    got = retrieval_scores(predicted, source, ids)["rank"].tolist()
    assert got == _brute_ranks(predicted, source, ids)
    assert got[0] == (20 + 1) / 2  # the zero row ties every candidate


@pytest.mark.parametrize("seed", range(3))
def test_contrast_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    source = rng.standard_normal((40, 6)) + 0.3
    ids = rng.choice(40, 12, replace=False)
    predicted = rng.standard_normal((12, 6))
    predicted[3] = source.mean(axis=0)  # a zero centred row
    centre = source.mean(axis=0)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        return 0.0 if norm == 0 else float(a @ b / norm)

    own = [cos(predicted[i] - centre, source[ids[i]] - centre) for i in range(12)]
    others = [np.mean([cos(predicted[i] - centre, source[ids[j]] - centre)
                       for j in range(12) if j != i]) for i in range(12)]
    got = contrast_scores(predicted, source, ids)
    np.testing.assert_allclose(got["cos_own"], own, atol=1e-12)
    np.testing.assert_allclose(got["cos_others"], others, atol=1e-12)
    np.testing.assert_allclose(got["contrast"], np.subtract(own, others), atol=1e-12)
    # An explicit centre replaces the mean.
    zero_centre = contrast_scores(predicted, source, ids, centre=np.zeros(6))
    assert zero_centre["cos_own"][0] == pytest.approx(cos(predicted[0], source[ids[0]]))


def test_candidates_restrict_the_ranking() -> None:
    source = _source(11, 200, 8)
    rng = np.random.default_rng(12)
    pool = np.sort(rng.choice(200, 40, replace=False))
    ids = rng.choice(pool, 25)
    predicted = source[ids] + rng.standard_normal((25, 8))
    got = retrieval_scores(predicted, source, ids, candidates=pool)
    # the same ranking over a matrix of only the candidate rows
    position = {int(s): i for i, s in enumerate(pool)}
    alone = retrieval_scores(predicted, source[pool], np.array([position[int(i)] for i in ids]))
    np.testing.assert_array_equal(got["rank"], alone["rank"])
    assert (got["chance_1"] == 1 / 40).all()
    full = retrieval_scores(predicted, source, ids)
    assert (got["rank"] <= full["rank"]).all() and (got["rank"] < full["rank"]).any()
    outsider = int(np.setdiff1d(np.arange(200), pool)[0])
    with pytest.raises(ValueError, match=rf"\b{outsider}\b"):
        retrieval_scores(predicted, source, np.r_[ids[:-1], outsider], candidates=pool)


def test_chunking_does_not_change_the_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(13, 300, 16)
    source[10:20] = source[0]  # ties across candidate blocks
    rng = np.random.default_rng(14)
    ids = rng.choice(300, 50, replace=False)
    predicted = source[ids] + 2 * rng.standard_normal((50, 16))
    predicted[:5] = source[0]
    whole = retrieval_scores(predicted, source, ids, chunk=1024)
    for chunk in (1, 7):
        pd.testing.assert_frame_equal(retrieval_scores(predicted, source, ids, chunk=chunk),
                                      whole)
    monkeypatch.setattr(heldout_rows, "_CANDIDATE_BLOCK", 13)
    pd.testing.assert_frame_equal(retrieval_scores(predicted, source, ids, chunk=7), whole)


def test_summary_of_no_tokens() -> None:
    empty = retrieval_scores(np.zeros((0, 4)), np.ones((3, 4)), np.zeros(0, dtype=np.int64))
    assert summary(empty)["mrr"] is None and summary(empty)["tokens"] == 0
