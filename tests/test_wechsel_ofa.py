"""WECHSEL and OFA against naive (full-matrix, per-token) implementations of their definitions."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import embtransfer.transfer.methods.ofa as ofa_module
import embtransfer.transfer.methods.wechsel  # noqa: F401  (registers "wechsel")
from embtransfer.transfer.aligned import AlignedVectors
from embtransfer.transfer.method_catalog import OptionError, resolve_options
from embtransfer.transfer.methods.base import TransferInputs, get_method

V_S, V_T, H, D = 150, 60, 24, 8
SIDES = ("input", "output")


def make_inputs(seed: int = 0, tied: bool = False) -> TransferInputs:
    rng = np.random.default_rng(seed)
    source_input = rng.standard_normal((V_S, H)).astype(np.float32)
    source_output = None if tied else rng.standard_normal((V_S, H)).astype(np.float32)
    # clustered static vectors so that neighbours are meaningful and weights uneven
    centers = rng.standard_normal((10, D))
    src_vec = centers[rng.integers(0, 10, V_S)] + 0.4 * rng.standard_normal((V_S, D))
    tgt_vec = centers[rng.integers(0, 10, V_T)] + 0.4 * rng.standard_normal((V_T, D))
    src_missing = np.zeros(V_S, bool)
    src_missing[[0, 7, 40, 41]] = True
    tgt_missing = np.zeros(V_T, bool)
    tgt_missing[[0, 1, 5, 33, 34]] = True  # 0, 1: specials; 5: shared
    src_vec[src_missing] = 0.0
    tgt_vec[tgt_missing] = 0.0
    shared_t = np.array([0, 1, 5, 9, 12, 20, 21, 22, 50])
    shared_s = np.array([0, 1, 99, 30, 7, 60, 61, 62, 149])
    how = ["special", "special"] + ["exact"] * (len(shared_t) - 2)
    order = rng.permutation(len(shared_t))  # the overlap table need not be sorted
    overlap = pd.DataFrame(
        {"target_id": shared_t[order], "source_id": shared_s[order],
         "how": np.array(how, object)[order]}
    )
    vocab = lambda n: pd.DataFrame({"id": np.arange(n, dtype=np.int64)})  # noqa: E731
    return TransferInputs(
        source_input=source_input, source_output=source_output,
        source_vocab=vocab(V_S), target_vocab=vocab(V_T), overlap=overlap, seed=seed,
        aligned=AlignedVectors(
            source=src_vec.astype(np.float32), source_missing=src_missing,
            target=tgt_vec.astype(np.float32), target_missing=tgt_missing,
        ),
    )


def naive_neighbors(inputs: TransferInputs, t: int, k: int, temperature: float):
    """Full cosine row over all source tokens with a vector, numpy top-k, softmax."""
    a = inputs.aligned
    assert a is not None
    cand = np.nonzero(~a.source_missing)[0]
    src = a.source[cand].astype(np.float64)
    sims = src @ a.target[t] / (np.linalg.norm(src, axis=1) * np.linalg.norm(a.target[t]))
    top = np.argsort(-sims, kind="stable")[:k]
    w = np.exp(sims[top] / temperature)
    return cand[top], w / w.sum()


def naive_wechsel(inputs: TransferInputs, side: str, k: int, temperature: float,
                  copy_shared: bool) -> dict[int, np.ndarray]:
    E = inputs.source_matrix(side).astype(np.float64)
    ov = inputs.overlap
    if not copy_shared:
        ov = ov[ov["how"] == "special"]
    shared = dict(zip(ov["target_id"], ov["source_id"], strict=True))
    out = {}
    for t in range(V_T):
        if t in shared:
            out[t] = E[shared[t]]
        elif not inputs.aligned.target_missing[t]:
            ids, w = naive_neighbors(inputs, t, k, temperature)
            out[t] = w @ E[ids]
    return out


def run(name: str, inputs: TransferInputs, side: str, **params):
    result = get_method(name).fn(inputs, resolve_options(name, params), side)
    assert result.rows.shape == (V_T, H) and result.rows.dtype == np.float32
    assert np.isfinite(result.rows).all()
    assert set(result.how) <= {"copied", "weighted", "missing_vector"}
    json.dumps(result.stats, allow_nan=False)
    return result


# --------------------------------------------------------------------------- WECHSEL


def test_registered_with_reference_defaults() -> None:
    spec = get_method("wechsel")
    assert spec.needs == {"aligned"}
    assert spec.defaults["k"] == 10 and spec.defaults["temperature"] == 0.1
    assert spec.defaults["copy_shared"] is False
    spec = get_method("ofa")
    assert spec.needs == {"aligned"}
    assert (spec.defaults["k"], spec.defaults["temperature"]) == (10, 0.1)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("copy_shared", [False, True])
def test_wechsel_equals_definition(side: str, copy_shared: bool) -> None:
    inputs = make_inputs()
    result = run("wechsel", inputs, side, copy_shared=copy_shared)
    want = naive_wechsel(inputs, side, 10, 0.1, copy_shared)
    for t, row in want.items():
        np.testing.assert_allclose(result.rows[t], row, rtol=1e-5, atol=1e-5, err_msg=str(t))
    copied = {0, 1} | ({5, 9, 12, 20, 21, 22, 50} if copy_shared else set())
    assert {t for t in range(V_T) if result.how[t] == "copied"} == copied
    E = inputs.source_matrix(side)
    np.testing.assert_array_equal(result.rows[[0, 1]], E[[0, 1]])  # specials: exact copies
    missing = {33, 34} | (set() if copy_shared else {5})
    assert {t for t in range(V_T) if result.how[t] == "missing_vector"} == missing
    assert result.stats["n_missing_vector"] == len(missing)
    assert result.stats["n_weighted"] == V_T - len(copied) - len(missing)
    # missing rows: drawn from N(mean, std) of the source rows, not zero, not copies
    rows = result.rows[sorted(missing)]
    assert np.abs(rows).min() > 0 and not np.isin(rows, E).any()


def test_wechsel_other_k_and_temperature() -> None:
    inputs = make_inputs(1)
    result = run("wechsel", inputs, "input", k=3, temperature=0.5)
    want = naive_wechsel(inputs, "input", 3, 0.5, False)
    for t, row in want.items():
        np.testing.assert_allclose(result.rows[t], row, rtol=1e-5, atol=1e-5)
    # k larger than the candidates: all of them
    result = run("wechsel", inputs, "input", k=1000)
    assert result.stats["k_effective"] == V_S - 4


def test_wechsel_chunking_changes_nothing() -> None:
    inputs = make_inputs(2)
    base = run("wechsel", inputs, "output")
    for rows, cols in [(1, 1), (7, 13), (4, 1000)]:
        other = run("wechsel", inputs, "output", chunk_rows=rows, chunk_cols=cols)
        np.testing.assert_allclose(other.rows, base.rows, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(other.how, base.how)


def permute_source(inputs: TransferInputs, seed: int) -> TransferInputs:
    """The same source with its token ids permuted consistently everywhere."""
    perm = np.random.default_rng(seed).permutation(V_S)  # old id i -> new id perm[i]
    inv = np.argsort(perm)
    a = inputs.aligned
    assert a is not None
    overlap = inputs.overlap.copy()
    overlap["source_id"] = perm[overlap["source_id"].to_numpy()]
    return TransferInputs(
        source_input=inputs.source_input[inv],
        source_output=None if inputs.source_output is None else inputs.source_output[inv],
        source_vocab=inputs.source_vocab, target_vocab=inputs.target_vocab, overlap=overlap,
        seed=inputs.seed,
        aligned=AlignedVectors(a.source[inv], a.source_missing[inv], a.target, a.target_missing),
    )


@pytest.mark.parametrize("name", ["wechsel", "ofa"])
def test_permuting_source_tokens_changes_nothing(name: str) -> None:
    inputs = make_inputs(3)
    permuted = permute_source(inputs, 7)
    for side in SIDES:
        a, b = run(name, inputs, side), run(name, permuted, side)
        np.testing.assert_array_equal(a.how, b.how)
        np.testing.assert_allclose(a.rows, b.rows, rtol=1e-4, atol=1e-5)


def test_methods_refuse_bad_calls() -> None:
    inputs = make_inputs(tied=True)
    for name in ("wechsel", "ofa"):
        with pytest.raises(ValueError, match="tied"):
            get_method(name).fn(inputs, resolve_options(name, {}), "output")
        with pytest.raises(OptionError, match=rf"{name}: unknown option\(s\) \['topk'\]"):
            resolve_options(name, {"topk": 5})
        no_vectors = make_inputs()
        no_vectors.aligned = None
        with pytest.raises(ValueError, match="aligned"):
            get_method(name).fn(no_vectors, resolve_options(name, {}), "input")


# --------------------------------------------------------------------------- OFA


def naive_ofa(inputs: TransferInputs, side: str, rank: int, k: int = 10,
              temperature: float = 0.1) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The reference's steps with numpy's SVD; returns rows by target id and Q."""
    E = inputs.source_matrix(side).astype(np.float64)
    u, s, vt = np.linalg.svd(E, full_matrices=False)
    P, Q = u[:, :rank], s[:rank, None] * vt[:rank]
    shared = dict(zip(inputs.overlap["target_id"], inputs.overlap["source_id"], strict=True))
    out = {}
    for t in range(V_T):
        if t in shared:
            out[t] = P[shared[t]] @ Q
        elif not inputs.aligned.target_missing[t]:
            ids, w = naive_neighbors(inputs, t, k, temperature)
            out[t] = (w @ P[ids]) @ Q
    return out, Q


@pytest.mark.parametrize("side", SIDES)
def test_ofa_full_rank_copies_shared_rows_exactly(side: str) -> None:
    inputs = make_inputs(4)
    result = run("ofa", inputs, side, rank=H)
    assert result.stats["rank"] == H and not result.stats["factorized"]
    tgt, src = inputs.shared()
    np.testing.assert_array_equal(result.rows[tgt], inputs.source_matrix(side)[src])
    assert (result.how[tgt] == "copied").all()
    # at full rank OFA is WECHSEL with shared tokens copied
    wechsel = run("wechsel", inputs, side, copy_shared=True)
    np.testing.assert_allclose(
        result.rows[result.how == "weighted"], wechsel.rows[wechsel.how == "weighted"],
        rtol=1e-5, atol=1e-5,
    )


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("rank", [5, 16])
def test_ofa_equals_naive_low_rank(side: str, rank: int) -> None:
    inputs = make_inputs(5)
    result = run("ofa", inputs, side, rank=rank)
    assert result.stats["rank"] == rank and result.stats["factorized"]
    want, Q = naive_ofa(inputs, side, rank)
    for t, row in want.items():
        np.testing.assert_allclose(result.rows[t], row, rtol=1e-4, atol=1e-5, err_msg=str(t))
    assert {t for t in range(V_T) if result.how[t] == "missing_vector"} == {33, 34}
    assert result.stats["n_copied"] == 9 and result.stats["n_missing_vector"] == 2
    # every row (copied, weighted, random) lies in the span of the primitive embeddings Q
    residual = result.rows - result.rows @ np.linalg.pinv(Q) @ Q
    assert np.abs(residual).max() < 1e-4 * np.abs(result.rows).max()
    # missing rows: coordinates from N(mean, std) of the source coordinates P = U[:, :r]
    coords = result.rows[[33, 34]] @ np.linalg.pinv(Q)
    u = np.linalg.svd(inputs.source_matrix(side).astype(np.float64), full_matrices=False)[0]
    z = (coords - u[:, :rank].mean(0)) / u[:, :rank].std(0)
    assert 0.2 < np.abs(z).mean() < 2 and np.abs(z).max() < 5
    # the span is a real restriction: full-rank source rows are not in it
    E = inputs.source_matrix(side)
    assert np.abs(E - E @ np.linalg.pinv(Q) @ Q).max() > 0.1
    # the copied rows are the rank-r approximation, not the source rows
    tgt, src = inputs.shared()
    assert not np.allclose(result.rows[tgt], E[src], atol=1e-3)
    assert 0 < result.stats["reconstruction_rel_error"] < 1


def test_ofa_default_rank_and_factorize() -> None:
    assert ofa_module.resolve_rank(None, 400 / 768, 768) == 400
    assert ofa_module.resolve_rank(None, 400 / 768, 24) == 12
    assert ofa_module.resolve_rank(7, 0.5, 24) == 7
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            ofa_module.resolve_rank(bad, 0.5, 24)
    result = run("ofa", make_inputs(6), "input")
    assert result.stats["rank"] == 12
    # the Gram-matrix SVD equals numpy's (up to the sign of each component)
    E = np.random.default_rng(0).standard_normal((300, 20)).astype(np.float32)
    factors = ofa_module.factorize(E, 6, chunk_rows=64)
    P, Q = factors.coordinates(E), factors.Q
    u, s, vt = np.linalg.svd(E.astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(P @ Q, (u[:, :6] * s[:6]) @ vt[:6], atol=1e-4)
    np.testing.assert_allclose(P.T @ P, np.eye(6), atol=1e-4)  # P = U: orthonormal columns
    # the relative error from the dropped singular values is ‖E − PQ‖_F / ‖E‖_F
    direct = np.linalg.norm(E - P.astype(np.float64) @ Q) / np.linalg.norm(E)
    assert factors.error == pytest.approx(direct, rel=1e-5) and 0.5 < factors.error < 1
    assert ofa_module.factorize(E, 20).error == 0.0  # full rank: nothing dropped
    # the coordinates' moments over some rows, from the Gram matrix, are those of P's rows
    ids = np.arange(0, 300, 3)
    mean, std = factors.moments(E, ids)
    np.testing.assert_allclose(mean, P[ids].astype(np.float64).mean(0), atol=1e-6)
    np.testing.assert_allclose(std, P[ids].astype(np.float64).std(0), rtol=1e-5)
    # ... and at full rank those of the rows themselves
    mean, std = ofa_module.factorize(E, 20).moments(E, ids)
    np.testing.assert_allclose(std, E[ids].astype(np.float64).std(0), rtol=1e-6)
    # a rank-deficient matrix keeps only its significant components
    low = E[:, :3] @ np.random.default_rng(1).standard_normal((3, 20)).astype(np.float32)
    factors = ofa_module.factorize(low, 10)
    P, Q = factors.coordinates(low), factors.Q
    assert P.shape == (300, 3) and Q.shape == (3, 20) and factors.error < 1e-6
    np.testing.assert_allclose(P @ Q, low, atol=1e-4)


# ------------------------------------------------------------------ wechsel package options


class WordModel:
    """A fastText stand-in: a fixed vocabulary; every string's vector from its characters."""

    def __init__(self, words: list[str]) -> None:
        self.words, self.seen = words, []

    def get_dimension(self) -> int:
        return 4

    def get_word_id(self, word: str) -> int:
        return self.words.index(word) if word in self.words else -1

    def get_word_vector(self, word: str) -> np.ndarray:
        self.seen.append(word)
        codes = [ord(c) for c in word] or [0]
        return np.array([len(word), sum(codes) % 7, codes[0] % 5, 1.0], np.float32) * bool(word)


def test_duplicate_variants_count_as_the_package_does() -> None:
    from embtransfer.transfer.aligned import align_from_dictionary

    src, tgt = WordModel(["haus", "Haus"]), WordModel(["house", "House"])
    _, once = align_from_dictionary(src, tgt, [("haus", "house")])
    _, twice = align_from_dictionary(src, tgt, [("haus", "house")], duplicate_variants=True)
    # variants (word, lower, title): 2 distinct each side, 3 with the repeated lower case
    assert once["correspondences"] == 4 and twice["correspondences"] == 9


def test_decode_strings_look_up_special_tokens_and_partial_pieces() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from embtransfer.transfer.aligned import token_vectors_aligned
    from embtransfer.vocab.canonical import vocab_table

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["schön über straße"] * 20, trainers.BpeTrainer(
        vocab_size=60, special_tokens=["<|endoftext|>"], show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    vocab = vocab_table(fast)
    W = np.eye(4, dtype=np.float32)
    text = token_vectors_aligned(WordModel([]), WordModel([]), W, vocab, vocab)
    src, tgt = WordModel([]), WordModel([])
    decode = token_vectors_aligned(src, tgt, W, vocab, vocab, token_strings="decode",
                                   tokenizers=(fast, fast))
    assert "<|endoftext|>" in src.seen and "\ufffd" in src.seen
    eot = fast.convert_tokens_to_ids("<|endoftext|>")
    assert text.source_missing[eot] and not decode.source_missing[eot]
    pieces = [i for i in range(len(vocab)) if fast.decode(i).strip() == "\ufffd"]
    assert pieces and text.target_missing[pieces].all() and not decode.target_missing[pieces].any()
    with pytest.raises(ValueError, match="tokenizers"):
        token_vectors_aligned(src, tgt, W, vocab, vocab, token_strings="decode")
    with pytest.raises(ValueError, match="token_strings"):
        token_vectors_aligned(src, tgt, W, vocab, vocab, token_strings="bytes")
