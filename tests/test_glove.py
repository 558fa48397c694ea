"""GloVe (embtransfer.transfer.glove) against brute force: the co-occurrence counts against
nested loops, and the fitted objective against a direct minimisation of the same loss."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from embtransfer.transfer.glove import ALPHA, cooccurrence, glove_loss, glove_vectors, train_glove


def brute_cooccurrence(lines, vocab_size, window, min_count):
    counts = np.zeros(vocab_size, np.int64)
    for line in lines:
        for t in line:
            counts[t] += 1
    matrix = np.zeros((vocab_size, vocab_size))
    for line in lines:
        kept = [t for t in line if counts[t] >= min_count]
        for i in range(len(kept)):
            for j in range(i + 1, min(i + window, len(kept) - 1) + 1):
                matrix[kept[i], kept[j]] += 1.0 / (j - i)
                matrix[kept[j], kept[i]] += 1.0 / (j - i)
    return matrix, counts


@pytest.mark.parametrize("seed", range(6))
def test_cooccurrence_equals_nested_loops(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(3, 12))
    lines = [rng.integers(0, vocab, int(rng.integers(0, 25))).tolist()
             for _ in range(int(rng.integers(1, 6)))]
    window, min_count = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    rows, cols, values, counts = cooccurrence(lines, vocab, window, min_count)
    want, want_counts = brute_cooccurrence(lines, vocab, window, min_count)
    got = np.zeros((vocab, vocab))
    got[rows, cols] = values
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(counts, want_counts)
    assert (values > 0).all()


def test_a_window_never_crosses_a_line():
    rows, cols, _, _ = cooccurrence([[0, 1], [2, 3]], 4, window=5)
    assert {(int(a), int(b)) for a, b in zip(rows, cols, strict=True)} == {
        (0, 1), (1, 0), (2, 3), (3, 2)}


def _toy(seed):
    rng = np.random.default_rng(seed)
    vocab = 7
    lines = [rng.integers(0, vocab, 60).tolist() for _ in range(4)]
    return vocab, cooccurrence(lines, vocab, window=3)


def test_the_loss_is_the_weighted_least_squares_objective():
    rng = np.random.default_rng(1)
    vocab, (rows, cols, values, _) = _toy(1)
    w, v = rng.normal(size=(vocab, 3)), rng.normal(size=(vocab, 3))
    bw, bv = rng.normal(size=vocab), rng.normal(size=vocab)
    total = 0.0
    for a, b, x in zip(rows, cols, values, strict=True):
        f = min(1.0, (x / 4.0) ** ALPHA)
        total += f * (w[a] @ v[b] + bw[a] + bv[b] - np.log(x)) ** 2
    assert glove_loss(w, v, bw, bv, rows, cols, values, 4.0) == pytest.approx(total)


@pytest.mark.parametrize("seed", range(3))
def test_adagrad_reaches_the_minimum_a_direct_minimisation_finds(seed):
    """On a toy matrix, the fitted loss comes within a few per cent of the best of several
    L-BFGS minimisations of the same objective (it is not convex: several starts)."""
    vocab, (rows, cols, values, _) = _toy(seed)
    dim, x_max = 3, 4.0

    def loss(theta):
        w, v = theta[: vocab * dim].reshape(vocab, dim), theta[vocab * dim : 2 * vocab * dim]
        v = v.reshape(vocab, dim)
        bw, bv = theta[2 * vocab * dim : 2 * vocab * dim + vocab], theta[-vocab:]
        return glove_loss(w, v, bw, bv, rows, cols, values, x_max)

    rng = np.random.default_rng(seed)
    best = min(scipy.optimize.minimize(loss, rng.normal(scale=0.3, size=2 * vocab * (dim + 1)),
                                       method="L-BFGS-B").fun for _ in range(5))
    # mini-batches of 8 entries, as a pass over a real corpus's entries runs
    _, record = train_glove(rows, cols, values, vocab, dim, iterations=1000, x_max=x_max,
                            learning_rate=0.5, seed=seed, batch=8)
    assert record["loss"][-1] <= best * 1.05 + 1e-3
    assert record["loss"][-1] < record["loss"][0]


def test_rare_and_unseen_ids_have_no_vector_and_the_fit_is_seeded():
    lines = [[0, 1, 2, 0, 1, 2, 3], [0, 2, 1, 0]]
    args = dict(vocab_size=6, dim=4, window=2, min_count=2, iterations=5, x_max=10.0)
    vectors, missing, record = glove_vectors(lines, seed=3, **args)
    assert missing.tolist() == [False, False, False, True, True, True]  # 3 once, 4-5 never
    assert not vectors[missing].any()
    again, _, _ = glove_vectors(lines, seed=3, **args)
    np.testing.assert_array_equal(vectors, again)
    assert record["kept_ids"] == 3 and record["tokens"] == 11
