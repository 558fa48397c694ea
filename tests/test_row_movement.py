"""How far LAPT moved the new rows (embtransfer.evaluation.row_movement), against a
row-by-row computation written apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embtransfer.evaluation.row_movement import made_ids, new_ids, row_movement, side_movement
from embtransfer.models.loading import Embeddings


def _brute(before: np.ndarray, after: np.ndarray, ids: list[int]) -> tuple[float, float, float]:
    cosines, changes = [], []
    for i in ids:
        a, b = [float(x) for x in after[i]], [float(x) for x in before[i]]
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
        cosines.append(dot / (na * nb) if na * nb > 0 else 0.0)
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
        changes.append(diff / nb if nb > 0 else math.inf)
    return (float(np.median(cosines)), float(np.quantile(cosines, 0.1)),
            float(np.median(changes)))


@pytest.mark.parametrize("seed", range(5))
def test_movement_equals_a_row_by_row_computation(seed):
    rng = np.random.default_rng(seed)
    before = rng.normal(size=(40, 8)).astype(np.float32)
    after = before + rng.normal(scale=rng.uniform(0.01, 2), size=before.shape).astype(np.float32)
    shared = rng.choice(40, size=15, replace=False)
    ids = new_ids(40, shared)
    assert sorted(set(range(40)) - set(shared.tolist())) == ids.tolist()
    got = side_movement(before, after, ids)
    median, p10, change = _brute(before, after, ids.tolist())
    assert got["rows"] == 25
    assert got["median_cosine"] == pytest.approx(median, abs=1e-9)
    assert got["p10_cosine"] == pytest.approx(p10, abs=1e-9)
    assert got["median_relative_change"] == pytest.approx(change, abs=1e-9)


def test_unmoved_rows_read_one_and_shared_rows_are_left_out():
    rng = np.random.default_rng(0)
    before = rng.normal(size=(10, 4)).astype(np.float32)
    after = before.copy()
    after[:3] = -after[:3]  # shared rows that LAPT moved do not count
    moved = row_movement(Embeddings(before, None, True, "gpt2"),
                         Embeddings(after, None, True, "gpt2"),
                         new_ids(10, np.array([0, 1, 2, 99])))
    assert set(moved) == {"input"}  # tied: one side
    assert moved["input"]["rows"] == 7
    assert moved["input"]["median_cosine"] == pytest.approx(1.0)
    assert moved["input"]["median_relative_change"] == pytest.approx(0.0)
    untied = row_movement(Embeddings(before, before, False, "llama"),
                          Embeddings(after, -before, False, "llama"), new_ids(10, np.array([0])))
    assert untied["output"]["median_cosine"] == pytest.approx(-1.0)


def test_another_checkpoints_rows_are_refused():
    with pytest.raises(ValueError, match="not the same checkpoint"):
        side_movement(np.zeros((4, 2)), np.zeros((5, 2)), np.arange(3))


def test_an_extended_checkpoints_made_rows_are_the_appended_ones():
    """In an extended checkpoint the overlap's target ids are not row ids: the rows a method
    made are those after the source's (a replaced checkpoint's are the ids not copied)."""
    shared = np.array([0, 1, 5])
    extended = {"mode": "extend", "kept_source_rows": 12, "new_rows": 4}
    assert made_ids(extended, 16, shared).tolist() == [12, 13, 14, 15]
    replaced = {"mode": "replace", "kept_source_rows": 0, "new_rows": 16}
    assert made_ids(replaced, 16, shared).tolist() == new_ids(16, shared).tolist()
