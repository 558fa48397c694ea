"""Orthogonal Procrustes, dictionary alignment of fastText models, aligned-vector files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors import safe_open

from embtransfer.fasttext.vectors import load_fasttext, token_vectors, train_fasttext
from embtransfer.transfer.aligned import (
    AlignedVectors,
    align_from_dictionary,
    procrustes,
    read_aligned,
    softmax,
    softmax_neighbors,
    token_vectors_aligned,
    topk_cosine,
    write_aligned,
)


def random_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def polar_factor(M: np.ndarray) -> np.ndarray:
    """M (MᵀM)^(-1/2): the orthogonal factor of M, by an eigendecomposition (not an SVD)."""
    evals, evecs = np.linalg.eigh(M.T @ M)
    return M @ (evecs / np.sqrt(evals)) @ evecs.T


# --------------------------------------------------------------------------- Procrustes


def test_procrustes_recovers_orthogonal_map_from_noisy_pairs() -> None:
    rng = np.random.default_rng(0)
    d = 12
    W0 = random_orthogonal(d, rng)
    X = rng.standard_normal((400, d))
    Y = X @ W0 + 0.05 * rng.standard_normal((400, d))
    W = procrustes(X, Y)
    np.testing.assert_allclose(W.T @ W, np.eye(d), atol=1e-10)
    np.testing.assert_allclose(W, W0, atol=0.02)
    # the naive closed form: orthogonal polar factor of XᵀY
    np.testing.assert_allclose(W, polar_factor(X.T @ Y), atol=1e-9)
    # and it is the minimiser: no other orthogonal map (random ones, W0 itself) does better
    best = np.linalg.norm(X @ W - Y)
    for R in [W0] + [random_orthogonal(d, rng) for _ in range(20)]:
        assert best <= np.linalg.norm(X @ R - Y) + 1e-9


def test_procrustes_direction_maps_x_onto_y() -> None:
    rng = np.random.default_rng(1)
    W0 = random_orthogonal(6, rng)
    X = rng.standard_normal((50, 6))
    W = procrustes(X, X @ W0)
    np.testing.assert_allclose(X @ W, X @ W0, atol=1e-9)  # not W0ᵀ: X is mapped onto Y


def test_procrustes_normalize_uses_unit_rows() -> None:
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 5)) * rng.uniform(0.1, 10, (40, 1))
    Y = rng.standard_normal((40, 5)) * rng.uniform(0.1, 10, (40, 1))
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(
        procrustes(X, Y, normalize=True), polar_factor(unit(X).T @ unit(Y)), atol=1e-9
    )
    assert not np.allclose(procrustes(X, Y, normalize=True), procrustes(X, Y), atol=1e-3)


def test_procrustes_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="same shape"):
        procrustes(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="no pairs"):
        procrustes(np.zeros((0, 2)), np.zeros((0, 2)))


# --------------------------------------------------------------------------- neighbours


@pytest.mark.parametrize("k", [1, 4, 50])
def test_topk_cosine_matches_full_matrix(k: int) -> None:
    rng = np.random.default_rng(3)
    q, keys = rng.standard_normal((23, 7)), rng.standard_normal((31, 7))
    keys[5] = 0.0  # a zero key: similarity 0
    unit = lambda a: a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-30)  # noqa: E731
    full = unit(q) @ unit(keys).T
    want_i = np.argsort(-full, axis=1, kind="stable")[:, : min(k, 31)]
    for rows, cols in [(1024, 65536), (5, 7), (1, 1)]:
        idx, sims = topk_cosine(q, keys, k, chunk_rows=rows, chunk_cols=cols)
        np.testing.assert_array_equal(idx, want_i)
        np.testing.assert_allclose(sims, np.take_along_axis(full, want_i, 1), atol=1e-6)


def test_topk_cosine_skips_blocks_without_changing_the_answer() -> None:
    """Blocks that cannot enter a row's running top-k are skipped; the answer stays a full
    sort's. Keys in clusters, so most rows' best keys come early and later blocks mostly
    skip, while some rows find their best in the last block; k wider than a block too."""
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((6, 16))
    keys = centres[rng.integers(0, 6, 900)] + 0.3 * rng.standard_normal((900, 16))
    q = np.concatenate([centres[rng.integers(0, 6, 150)] + 0.3 * rng.standard_normal((150, 16)),
                        keys[-40:] + 1e-3 * rng.standard_normal((40, 16))])
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    full = (unit(q).astype(np.float32) @ unit(keys).astype(np.float32).T)
    for k, cols in [(10, 64), (10, 7), (1, 100), (25, 16)]:
        want_i = np.argsort(-full, axis=1, kind="stable")[:, :k]
        idx, sims = topk_cosine(q, keys, k, chunk_rows=37, chunk_cols=cols)
        np.testing.assert_allclose(sims, np.take_along_axis(full, want_i, 1), atol=1e-5)
        np.testing.assert_array_equal(idx, want_i)


@pytest.mark.parametrize("k", [1, 5, 12, 60])
def test_topk_cosine_searches_equal_rows_once_and_answers_as_a_full_sort(
        k: int, monkeypatch) -> None:
    """Token vectors repeat (two tokens of one word): equal query rows and equal key rows
    are searched once, and the answer is a full sort's over every key, equal keys by
    ascending index, also where k exceeds the distinct keys (60 of 40)."""
    import embtransfer.transfer.aligned as aligned_module

    rng = np.random.default_rng(7)
    base_k, base_q = rng.standard_normal((40, 9)), rng.standard_normal((15, 9))
    base_k[3] = 0.0  # a zero key row, repeated: similarity 0 to all
    key_of, query_of = rng.integers(0, 40, 300), rng.integers(0, 15, 50)
    keys, q = base_k[key_of], base_q[query_of]
    unit = lambda a: a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-30)  # noqa: E731
    full = (unit(base_q) @ unit(base_k).T)[query_of][:, key_of]  # equal rows: equal values
    want_i = np.argsort(-full, axis=1, kind="stable")[:, :k]
    searched = []
    real = aligned_module._running_topk

    def counting(rows, keys_searched, *args):
        searched.append((rows.shape[0], keys_searched.shape[0]))
        return real(rows, keys_searched, *args)

    monkeypatch.setattr(aligned_module, "_running_topk", counting)
    for rows, cols, budget in [(1024, 65536, 1 << 22), (4, 7, 1)]:  # budget 1: a query a chunk
        monkeypatch.setattr(aligned_module, "_EXPAND_BUDGET", budget)
        searched.clear()
        idx, sims = topk_cosine(q, keys, k, chunk_rows=rows, chunk_cols=cols)
        np.testing.assert_array_equal(idx, want_i)
        np.testing.assert_allclose(sims, np.take_along_axis(full, want_i, 1), atol=1e-6)
        assert sum(r for r, _ in searched) == np.unique(query_of).size
        assert {n for _, n in searched} == {np.unique(key_of).size}


def test_softmax_neighbors_reuses_searched_rows_and_equals_a_fresh_search(monkeypatch) -> None:
    """WECHSEL (all rows, k 10) then OFA (a subset, k 4) then the output side: one search
    per row, and every answer equal to a search on vectors that have seen no call."""
    import embtransfer.transfer.aligned as aligned_module

    rng = np.random.default_rng(5)
    source_missing = rng.random(40) < 0.2
    target_missing = rng.random(30) < 0.2

    def vectors() -> AlignedVectors:
        return AlignedVectors(np.random.default_rng(6).standard_normal((40, 8)), source_missing,
                              np.random.default_rng(7).standard_normal((30, 8)), target_missing)

    searched: list[int] = []
    real = aligned_module.topk_cosine

    def counting(queries, keys, k, *args):
        searched.append(len(queries))
        return real(queries, keys, k, *args)

    monkeypatch.setattr(aligned_module, "topk_cosine", counting)
    have = np.nonzero(~target_missing)[0]
    shared = vectors()
    calls = [(have[::2], 4, None), (have, 10, None), (have[::3][::-1], 4, 35), (have, 3, None)]
    for ids, k, n_source in calls:
        got = softmax_neighbors(shared, ids, k, 0.1, n_source=n_source)
        want = softmax_neighbors(vectors(), ids, k, 0.1, n_source=n_source)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    # fresh searches: 4 (want) + first call, its rows again at a larger k, a new limit (35)
    assert searched == [len(have[::2]), len(have[::2]), len(have), len(have),
                        len(have[::3]), len(have[::3]), len(have)]


def test_softmax_is_stable_and_matches_definition() -> None:
    x = np.array([[0.9, 0.5, -0.2], [1.0, 1.0, 1.0]])
    want = np.exp(x / 0.1) / np.exp(x / 0.1).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax(x, 0.1), want, rtol=1e-12)
    assert np.isfinite(softmax(np.array([1e4, 0.0]), 1e-3)).all()
    with pytest.raises(ValueError):
        softmax(x, 0.0)


# --------------------------------------------------------------------------- fastText


PARAMS = {
    "model": "skipgram", "dim": 16, "epoch": 10, "min_count": 1, "minn": 3, "maxn": 5,
    "neg": 5, "ws": 2, "lr": 0.05, "bucket": 20000, "t": 0.01,
}
N_WORDS = 120


@pytest.fixture(scope="module")
def bilingual(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two fastText models on texts from one sparse bigram chain over the same concepts.

    The target language is a word substitution of the source (disjoint letters, so
    no shared n-grams); each corpus is sampled independently from the chain.
    """
    rng = random.Random(0)

    def lexicon(letters: str) -> list[str]:
        words = (
            "".join(rng.choice(letters) for _ in range(rng.randint(4, 7))) for _ in range(400)
        )
        return list(dict.fromkeys(words))[:N_WORDS]

    src, tgt = lexicon("abcdefghijklmnop"), lexicon("qrstuvwxyzåäöéèü")
    successors = {i: rng.sample(range(N_WORDS), 4) for i in range(N_WORDS)}

    def corpus(seed: int, vocab: list[str]) -> str:
        r = random.Random(seed)
        lines = []
        for _ in range(3000):
            w, words = r.randrange(N_WORDS), []
            for _ in range(r.randint(8, 16)):
                words.append(vocab[w])
                w = r.choice(successors[w]) if r.random() < 0.9 else r.randrange(N_WORDS)
            lines.append(" ".join(words))
        return "\n".join(lines) + "\n"

    out = tmp_path_factory.mktemp("bilingual")
    models = {}
    for name, vocab, seed in (("source", src, 1), ("target", tgt, 2)):
        (out / f"{name}.txt").write_text(corpus(seed, vocab), encoding="utf-8")
        train_fasttext(out / f"{name}.txt", out / f"{name}.bin", PARAMS, seed=seed, threads=1)
        models[name] = load_fasttext(out / f"{name}.bin")
    return {"pairs": list(zip(src, tgt, strict=True)), **models}


def test_align_from_dictionary_recovers_translations(bilingual: dict) -> None:
    pairs = bilingual["pairs"]
    extra = [("nosuchword", pairs[0][1]), (pairs[1][0], "keinwort")]  # one side missing
    W, stats = align_from_dictionary(bilingual["source"], bilingual["target"], pairs + extra)
    assert W.shape == (16, 16) and W.dtype == np.float32
    np.testing.assert_allclose(W.T @ W, np.eye(16), atol=1e-5)
    assert stats["pairs"] == N_WORDS + 2
    assert stats["pairs_used"] == N_WORDS and stats["pairs_skipped"] == 2
    assert stats["correspondences"] == N_WORDS  # lower-case words: no extra case variants
    assert stats["p1_candidates"] == N_WORDS and stats["direction"] == "source_to_target"
    assert stats["precision_at_1"] > 0.7  # chance: 1/120

    # held out: fit on 80 pairs, translate the other 40 among all 120 target words
    W80, _ = align_from_dictionary(bilingual["source"], bilingual["target"], pairs[:80])
    src = np.stack([bilingual["source"].get_word_vector(s) for s, _ in pairs])
    tgt = np.stack([bilingual["target"].get_word_vector(t) for _, t in pairs])
    nearest, _ = topk_cosine(src[80:] @ W80, tgt, 1)
    assert (nearest[:, 0] == np.arange(80, N_WORDS)).mean() > 0.4

    # a shuffled dictionary cannot do this
    perm = np.random.default_rng(0).permutation(N_WORDS)
    shuffled = [(pairs[i][0], pairs[j][1]) for i, j in enumerate(perm)]
    _, bad = align_from_dictionary(bilingual["source"], bilingual["target"], shuffled)
    assert bad["precision_at_1"] < stats["precision_at_1"] - 0.4


def test_align_case_variants_and_subword_vectors(bilingual: dict) -> None:
    pairs = bilingual["pairs"][:30]
    upper = [(s.upper(), t.title()) for s, t in pairs]
    # in-vocabulary only (WECHSEL): the lower-case variants are found
    _, stats = align_from_dictionary(bilingual["source"], bilingual["target"], upper)
    assert stats["pairs_used"] == 30 and stats["correspondences"] == 30
    # with n-gram vectors any variant with a non-zero vector counts (upper/lower/title x
    # title/lower; unseen upper-case n-grams may hash to untrained, zero buckets)
    _, stats = align_from_dictionary(
        bilingual["source"], bilingual["target"], upper, in_vocab_only=False
    )
    assert stats["pairs_used"] == 30 and 30 * 2 < stats["correspondences"] <= 30 * 3 * 2
    with pytest.raises(ValueError, match="none of the"):
        align_from_dictionary(bilingual["source"], bilingual["target"], [("nope", "nein")])


def vocab_of(tokens: list[tuple[str, str]]) -> pd.DataFrame:
    """A minimal vocab table: (raw token, kind)."""
    return pd.DataFrame(
        {
            "id": np.arange(len(tokens), dtype=np.int64),
            "token": [t for t, _ in tokens],
            "bytes": [b"" if k == "special" else t.lstrip("Ġ").encode() for t, k in tokens],
            "kind": [k for _, k in tokens],
        }
    )


def test_token_vectors_aligned_maps_the_source_side(bilingual: dict, tmp_path: Path) -> None:
    s_words = [s for s, _ in bilingual["pairs"][:5]]
    t_words = [t for _, t in bilingual["pairs"][:5]]
    source_vocab = vocab_of([("<s>", "special")] + [("Ġ" + w, "normal") for w in s_words]
                            + [(s_words[0][:3], "normal"), ("Ġ", "normal")])
    target_vocab = vocab_of([("<pad>", "special")] + [(w, "normal") for w in t_words])
    W, stats = align_from_dictionary(
        bilingual["source"], bilingual["target"], bilingual["pairs"]
    )
    aligned = token_vectors_aligned(
        bilingual["source"], bilingual["target"], W, source_vocab, target_vocab
    )
    src, src_missing = token_vectors(bilingual["source"], source_vocab, mode="word")
    tgt, tgt_missing = token_vectors(bilingual["target"], target_vocab, mode="word")
    np.testing.assert_allclose(aligned.source, src @ W, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(aligned.target, tgt)
    np.testing.assert_array_equal(aligned.source_missing, [1, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(aligned.target_missing, tgt_missing)
    assert not np.any(aligned.source[aligned.source_missing])
    # in the shared space a source word is closest to its translation
    nearest, _ = topk_cosine(aligned.source[1:6], aligned.target[1:], 1)
    assert (nearest[:, 0] == np.arange(5)).sum() >= 3

    path = tmp_path / "aligned" / "vectors.safetensors"
    write_aligned(path, aligned, W, stats)
    back, W_back = read_aligned(path)
    for name in ("source", "source_missing", "target", "target_missing"):
        np.testing.assert_array_equal(getattr(back, name), getattr(aligned, name))
    assert back.source_missing.dtype == bool
    np.testing.assert_array_equal(W_back, W)
    with safe_open(str(path), framework="numpy") as f:  # the stats ride in the metadata
        assert json.loads(f.metadata()["stats"]) == stats
    assert [p.name for p in path.parent.iterdir()] == ["vectors.safetensors"]  # no temporaries


def test_write_aligned_refuses_bad_input(tmp_path: Path) -> None:
    good = AlignedVectors(np.zeros((3, 2), np.float32), np.zeros(3, bool),
                          np.zeros((2, 2), np.float32), np.zeros(2, bool))
    bad = AlignedVectors(good.source, np.zeros(2, bool), good.target, good.target_missing)
    with pytest.raises(ValueError, match="differ in length"):
        write_aligned(tmp_path / "a.safetensors", bad, np.eye(2), {})
    nan = AlignedVectors(good.source + np.nan, good.source_missing, good.target,
                         good.target_missing)
    with pytest.raises(ValueError, match="non-finite"):
        write_aligned(tmp_path / "a.safetensors", nan, np.eye(2), {})
    assert not list(tmp_path.iterdir())
