"""Baseline initialisation methods against naive definitions and their sampling statistics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from embtransfer.neighbors.search import Neighbors, compute_neighbors
from embtransfer.transfer.methods import clp, focus, heuristics, mean, multivariate, random_init
from embtransfer.transfer.methods.base import SIDES, TransferInputs, get_method
from embtransfer.vocab.canonical import text_without_cut_edges, token_text, vocab_table

entmax = pytest.importorskip("entmax")

VT, VS, H, HT, DIM = 160, 220, 6, 5, 8
SHARED = 90


def vocab(texts: list[str], starts: list[bool] | None = None, kinds: list[str] | None = None):
    n = len(texts)
    starts = starts if starts is not None else [True] * n
    kinds = kinds if kinds is not None else ["normal"] * n
    return pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64),
            "token": texts,
            "bytes": [
                t.encode() if k != "special" else b"" for t, k in zip(texts, kinds, strict=True)
            ],
            "canonical": texts,
            "start": starts,
            "kind": kinds,
            "role": [None] * n,
        }
    )


def make_inputs(seed: int = 0, tied: bool = False) -> tuple[TransferInputs, np.ndarray]:
    """Random small inputs; returns them and target fastText vectors (zero rows are missing)."""
    rng = np.random.default_rng(seed)
    shared_t = rng.choice(VT, SHARED, replace=False)
    shared_s = rng.choice(VS, SHARED, replace=False)
    centers = rng.standard_normal((12, HT))
    # a common offset keeps CLP's cosine sums away from 0 (PLM spaces are anisotropic)
    plm = centers[rng.integers(0, 12, VT)] + 0.4 * rng.standard_normal((VT, HT)) + 1.5
    fast = rng.standard_normal((12, DIM))[rng.integers(0, 12, VT)]
    fast = (fast + 0.5 * rng.standard_normal((VT, DIM))).astype(np.float32)
    nonshared = np.setdiff1d(np.arange(VT), shared_t)
    fast[nonshared[:3]] = 0.0  # no fastText vector
    inputs = TransferInputs(
        source_input=rng.standard_normal((VS, H)).astype(np.float32),
        source_output=None if tied else rng.standard_normal((VS, H)).astype(np.float32) + 2,
        source_vocab=vocab([f"s{i}" for i in range(VS)]),
        target_vocab=vocab([f"t{i}" for i in range(VT)]),
        overlap=pd.DataFrame(
            {"target_id": shared_t, "source_id": shared_s, "how": ["exact"] * SHARED}
        ),
        seed=seed,
        plm_input=plm.astype(np.float32),
    )
    table, _ = compute_neighbors(fast, ~fast.any(axis=1), shared_t, shared_s)
    inputs.neighbors["token"] = Neighbors.from_table(table)
    return inputs, fast


def run(name: str, inputs: TransferInputs, side: str = "input", **params):
    spec = get_method(name)
    return spec.fn(inputs, spec.defaults | params, side)


def shared_maps(inputs: TransferInputs) -> tuple[np.ndarray, np.ndarray, set[int]]:
    t, s = inputs.overlap["target_id"].to_numpy(), inputs.overlap["source_id"].to_numpy()
    return t, s, set(t.tolist())


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def check_shared(inputs: TransferInputs, result, side: str) -> None:
    t, s, _ = shared_maps(inputs)
    assert np.array_equal(result.rows[t], inputs.source_matrix(side)[s])
    assert (result.how[t] == "copied").all()
    assert result.rows.shape == (VT, H) and result.rows.dtype == np.float32


# -- FOCUS, CLP, CLP+ against loops ---------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_focus_matches_naive(side):
    inputs, fast = make_inputs()
    result = run("focus", inputs, side)
    check_shared(inputs, result, side)
    t_ids, s_ids, shared = shared_maps(inputs)
    src = inputs.source_matrix(side)
    n_missing = 0
    for t in range(VT):
        if t in shared:
            continue
        if not fast[t].any():
            assert result.how[t] == "missing_vector"
            n_missing += 1
            continue
        sims = (unit(fast[t_ids]) @ unit(fast[t])).astype(np.float32)
        w = entmax.sparsemax(torch.from_numpy(sims), dim=-1).numpy().astype(np.float64)
        expected = w @ src[s_ids].astype(np.float64)
        np.testing.assert_allclose(result.rows[t], expected, rtol=1e-4, atol=1e-5)
        assert result.how[t] == "weighted"
    assert n_missing == 3 and result.stats["counts"]["missing_vector"] == 3
    assert result.stats["counts"]["copied"] == SHARED


def naive_clp(inputs: TransferInputs, side: str, kind: str, k: int | None = None) -> dict:
    t_ids, s_ids, shared = shared_maps(inputs)
    order = np.argsort(t_ids)
    t_ids, s_ids = t_ids[order], s_ids[order]
    plm = inputs.plm_input.astype(np.float64)
    src = inputs.source_matrix(side).astype(np.float64)
    out = {}
    for t in range(VT):
        if t in shared:
            continue
        sims = unit(plm[t_ids]) @ unit(plm[t])
        if kind == "clp":
            idx = np.arange(sims.size) if k is None else np.argsort(-sims, kind="stable")[:k]
            w = sims[idx] / sims[idx].sum()
            out[t] = np.average(src[s_ids[idx]], axis=0, weights=w)
        else:
            w = entmax.sparsemax(torch.from_numpy(sims), dim=-1).numpy()
            out[t] = w @ src[s_ids]
    return out


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("name,k", [("clp", None), ("clp", 7), ("clp_plus", None)])
def test_clp_matches_naive(side, name, k):
    inputs, _ = make_inputs(1)
    params = {"chunk_rows": 13} | ({"k": k} if name == "clp" else {"prefilter_k": 3})
    result = run(name, inputs, side, **params)
    check_shared(inputs, result, side)
    expected = naive_clp(inputs, side, name, k)
    for t, row in expected.items():
        np.testing.assert_allclose(result.rows[t], row, rtol=1e-4, atol=1e-5)
        assert result.how[t] == "weighted"
    assert result.stats["counts"] == {"copied": SHARED, "weighted": VT - SHARED}


def test_clp_plus_really_sparse_and_fallback():
    inputs, _ = make_inputs(2)
    result = run("clp_plus", inputs, prefilter_k=1)
    assert result.stats["fallback_rows"] > 0  # the top-1 prefix cannot hold most supports
    assert 1 <= result.stats["support"]["mean"] < SHARED


def test_clp_zero_cosine_sum_and_zero_plm_rows_are_random():
    inputs, _ = make_inputs(3)
    t_ids, _, shared = shared_maps(inputs)
    nonshared = [t for t in range(VT) if t not in shared]
    plm = inputs.plm_input
    # two shared tokens only, with opposite PLM vectors: an orthogonal query sums to 0
    inputs.overlap = inputs.overlap.iloc[:2].copy()
    a, b = inputs.overlap["target_id"].to_numpy()
    plm[a] = np.eye(HT)[0]
    plm[b] = -np.eye(HT)[0]
    plm[nonshared[0]] = np.eye(HT)[1]
    plm[nonshared[1]] = 0.0
    result = run("clp", inputs)
    assert result.how[nonshared[0]] == "degenerate"
    assert result.how[nonshared[1]] == "missing_vector"
    assert np.isfinite(result.rows).all()


# -- permutation invariance -----------------------------------------------------------------


ALL = ["focus", "clp", "clp_plus", "random", "random_copy", "multivariate", "mean", "heuristics"]


@pytest.mark.parametrize("name", ALL)
def test_shared_order_does_not_matter(name):
    inputs, _ = make_inputs(4)
    a = run(name, inputs, "output")
    perm = np.random.default_rng(9).permutation(SHARED)
    inputs.overlap = inputs.overlap.iloc[perm].reset_index(drop=True)
    b = run(name, inputs, "output")
    assert np.array_equal(a.rows, b.rows)
    assert np.array_equal(a.how, b.how)


# -- random draws ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["random", "random_copy", "multivariate", "heuristics"])
def test_random_methods_reproducible(name):
    inputs, _ = make_inputs(5)
    a, b = run(name, inputs), run(name, inputs)
    assert np.array_equal(a.rows, b.rows)
    out = run(name, inputs, "output")
    drawn = a.how != "copied"
    assert drawn.sum() >= VT - SHARED
    inputs.seed = 6
    c = run(name, inputs)
    assert not np.allclose(a.rows[drawn], c.rows[drawn])
    # independent streams per side: the output draws are not the input draws shifted
    diff = out.rows[drawn] - a.rows[drawn]
    assert diff.std(axis=0).min() > 0.1
    if name != "random":
        check_shared(inputs, a, "input")


def big_inputs(seed: int = 0) -> TransferInputs:
    """Few shared tokens, many drawn ones; a correlated, shifted source distribution."""
    rng = np.random.default_rng(seed)
    vs, vt, h = 3000, 6000, 4
    mix = rng.standard_normal((h, h))
    source = (rng.standard_normal((vs, h)) @ mix + np.arange(h)).astype(np.float32)
    return TransferInputs(
        source_input=source,
        source_output=None,
        source_vocab=vocab([f"s{i}" for i in range(vs)]),
        target_vocab=vocab([f"t{i}" for i in range(vt)]),
        overlap=pd.DataFrame({"target_id": [0, 1], "source_id": [5, 6], "how": ["exact"] * 2}),
        seed=seed,
    )


@pytest.mark.parametrize("name", ["random", "random_copy", "multivariate", "heuristics"])
def test_draws_follow_source_statistics(name):
    inputs = big_inputs()
    src = inputs.source_input.astype(np.float64)
    result = run(name, inputs)
    drawn = result.rows[result.how != "copied"].astype(np.float64)
    scale = src.std(axis=0)
    np.testing.assert_allclose(drawn.mean(axis=0), src.mean(axis=0), atol=0.08 * scale.max())
    np.testing.assert_allclose(drawn.std(axis=0), scale, rtol=0.06)
    cov_src, cov_drawn = np.cov(src.T), np.cov(drawn.T)
    off = ~np.eye(src.shape[1], dtype=bool)
    if name == "multivariate":
        np.testing.assert_allclose(cov_drawn, cov_src, atol=0.08 * np.abs(cov_src).max())
    else:  # diagonal Gaussians: the source correlations are gone
        assert np.abs(cov_drawn[off]).max() < 0.08 * np.abs(cov_src).max()
        assert np.abs(cov_src[off]).max() > 0.3 * np.abs(cov_src).max()


def test_multivariate_rank_deficient_uses_jitter():
    inputs = big_inputs()
    inputs.source_input[:, 3] = 1.0  # a constant dimension: singular covariance
    result = run("multivariate", inputs)
    assert result.stats["jitter"] > 0 and np.isfinite(result.rows).all()


# -- heuristics -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,script",
    [
        ("hello", "LATIN"), ("café", "LATIN"), ("مرحبا", "ARABIC"), ("привет", "CYRILLIC"),
        ("中文", "CJK"), ("123", "NUMBER"), ("!?", "PUNCT"), ("ab١٢٣", "NUMBER"),
        ("e\u0301", "LATIN"), ("", "NONE"), ("ＡＢ", "LATIN"), ("a1", "LATIN"),
    ],
)
def test_text_script(text, script):
    assert heuristics.text_script(text) == script


def _text_script_by_count(text: str) -> str:
    """The definition: a vote of every classified character, ties to the first seen."""
    votes = Counter(s for s in map(heuristics.char_script, text) if s is not None)
    return max(votes, key=votes.__getitem__) if votes else "NONE"


def test_text_script_is_the_vote_of_its_characters():
    rng = np.random.default_rng(0)
    letters = list("aé1!\u0301 ٣بж中ＡＢ\t") + ["\U0001f600"]
    texts = ["".join(rng.choice(letters, size=n)) for n in rng.integers(0, 7, 3000)]
    assert [heuristics.text_script(t) for t in texts] == [_text_script_by_count(t) for t in texts]


def test_heuristics_groups_by_script_and_position():
    rng = np.random.default_rng(0)
    groups = {  # (script word, start): (n source rows, mean, std)
        ("lat", True): (300, 0.0, 1.0),
        ("lat", False): (300, 3.0, 1.0),
        ("عرب", True): (300, -3.0, 1.0),
        ("عرب", False): (300, 8.0, 0.2),
        ("рус", True): (40, -8.0, 0.5),
        ("рус", False): (3, 20.0, 0.1),  # too few: backs off to Cyrillic at any position
    }
    texts, starts, rows, means = [], [], [], {}
    for (word, start), (n, mu, sd) in groups.items():
        for i in range(n):
            texts.append(f"{word}{'ab'[i % 2]}{i}" if word == "lat" else word * (1 + i % 3))
            starts.append(start)
        rows.append(mu + sd * rng.standard_normal((n, H)))
        means[word, start] = mu
    source = np.concatenate(rows).astype(np.float32)
    tgt_texts = ["lat", "عرب", "عرب", "рус", "lat", "中文"] + ["عربي"] * 400 + ["рус"] * 50
    tgt_starts = [True, True, False, True, False, True] + [False] * 400 + [False] * 50
    inputs = TransferInputs(
        source_input=source,
        source_output=None,
        source_vocab=vocab(texts, starts),
        target_vocab=vocab(tgt_texts, tgt_starts),
        overlap=pd.DataFrame({"target_id": [0], "source_id": [0], "how": ["exact"]}),
        seed=1,
    )
    result = run("heuristics", inputs)
    arabic_cont = result.rows[6:406].astype(np.float64)
    assert (result.how[6:406] == "script_position").all()
    np.testing.assert_allclose(arabic_cont.mean(axis=0), 8.0, atol=0.05)
    np.testing.assert_allclose(arabic_cont.std(axis=0), 0.2, rtol=0.15)
    # Cyrillic continuation: 3 source rows < min_rows -> all Cyrillic rows
    cyr = result.rows[406:].astype(np.float64)
    assert (result.how[406:] == "script").all()
    cyr_src = source[texts.index("рус") :].astype(np.float64)
    tol = 4 * cyr_src.std(axis=0) / np.sqrt(len(cyr))  # the pooled group is bimodal: wide
    assert (np.abs(cyr.mean(axis=0) - cyr_src.mean(axis=0)) < tol).all()
    assert (np.abs(cyr.mean(axis=0) - 20.0) > 10).all()  # not from the 3-row group
    assert result.how[5] == "all"  # CJK: no source rows at all
    assert result.stats["groups"]["ARABIC/cont"]["source_rows"] == 300
    assert result.how[0] == "copied"


# -- mean and subword mean ------------------------------------------------------------------


def test_mean():
    inputs, _ = make_inputs(7)
    result = run("mean", inputs, "output")
    check_shared(inputs, result, "output")
    other = result.how != "copied"
    np.testing.assert_allclose(
        result.rows[other], np.broadcast_to(inputs.source_output.mean(0), (other.sum(), H)),
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "raw,text",
    [
        (b"abc", "abc"), ("ا".encode() + b"\xd8", "ا"), (b"\xa7" + "اب".encode(), "اب"),
        (b"\xd8", ""), (b"\x84\xd8\xa7\xd8", "ا"), ("é".encode()[1:] + b"x", "x"),
    ],
)
def test_token_text(raw, text):
    assert token_text(raw) == text


def test_token_text_of_valid_utf8_is_the_edge_definition_on_every_short_byte_string():
    """Decoding valid UTF-8 whole (the shortcut) drops nothing the edge rule would."""
    rng = np.random.default_rng(0)
    short = [bytes(pair) for pair in np.ndindex(256, 256)] + [bytes([a]) for a in range(256)]
    pieces = [c.encode() for c in "aé٣ب中😀"] + [bytes([b]) for b in (0x80, 0xBF, 0xC3, 0xE4, 0xF0)]
    longer = [
        b"".join(pieces[i] for i in rng.integers(0, len(pieces), n))
        for n in rng.integers(1, 8, 20000)
    ]
    for raw in short + longer:
        assert token_text(raw) == text_without_cut_edges(raw), raw


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    words = ["hello", "world", "help", "wonder", "سلام", "كتاب", "mañana"]
    rng = np.random.default_rng(0)
    tok.train_from_iterator(
        [" ".join(rng.choice(words, 8)) for _ in range(300)], trainer
    )
    eot = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eot, bos_token=eot)


def test_subword_mean_matches_source_tokenization():
    tokenizer = tiny_tokenizer()
    source_vocab = vocab_table(tokenizer)
    vs = len(source_vocab)
    rng = np.random.default_rng(0)
    eot = "<|endoftext|>"
    texts = ["hello", "orld", "helloworld", "كتابي", "mañ", "<s>", "wond", "x", eot, "won" + eot]
    starts = [True, False, True, True, False, False, True, False, False, False]
    kinds = ["normal"] * 5 + ["special"] + ["normal"] * 4
    target_vocab = vocab(texts, starts, kinds)
    raw = list(target_vocab["bytes"])
    raw[7] = "ا".encode()[:1]  # a lone lead byte: no text
    target_vocab["bytes"] = raw
    inputs = TransferInputs(
        source_input=rng.standard_normal((vs, H)).astype(np.float32),
        source_output=rng.standard_normal((vs, H)).astype(np.float32),
        source_vocab=source_vocab,
        target_vocab=target_vocab,
        overlap=pd.DataFrame({"target_id": [6], "source_id": [3], "how": ["exact"]}),
        seed=0,
        source_tokenizer=tokenizer,
    )
    for side in SIDES:
        result = run("subword_mean", inputs, side)
        src = inputs.source_matrix(side)
        for t in [0, 1, 2, 3, 4, 9]:
            text = (" " if starts[t] else "") + texts[t]
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            ids = [i for i in ids if i != tokenizer.eos_token_id]  # special pieces are dropped
            assert len(ids) >= 1
            np.testing.assert_allclose(result.rows[t], src[ids].mean(0), rtol=1e-5, atol=1e-6)
            assert result.how[t] == "subword_mean"
        # a special target token, a lone byte, a text that is only a special token
        assert result.how[5] == result.how[7] == result.how[8] == "random"
        assert result.stats["no_subwords"] == 3
        assert np.array_equal(result.rows[6], src[3])
    # the word-start space matters: " hello" and "hello" tokenise differently here
    assert tokenizer(" hello")["input_ids"] != tokenizer("hello")["input_ids"]


def test_modules_register_expected_names():
    assert {focus.focus, clp.clp, clp.clp_plus, random_init.random_all, random_init.random_copy,
            multivariate.multivariate, mean.mean, mean.subword_mean, heuristics.heuristics}
    for name in ALL + ["subword_mean"]:
        assert get_method(name).name == name
    assert "plm" in get_method("clp").needs and "neighbors_token" in get_method("focus").needs
