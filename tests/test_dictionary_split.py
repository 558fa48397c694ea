"""A real dictionary's held-out split and the alignment truth of its held-out half
(embtransfer.data.dictionary_split), on the FreeDict slices of tests/fixtures/real."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embtransfer.data.dictionaries import read_freedict
from embtransfer.data.dictionary_split import dictionary_truth, split_dictionary, word_key
from embtransfer.world.truth import COLUMNS

REAL = Path(__file__).parent / "fixtures" / "real"
DICTS = {"de": "freedict-eng-deu.index", "ar": "freedict-eng-ara.index"}


@pytest.fixture(scope="module", params=sorted(DICTS))
def pairs(request) -> tuple[str, list[tuple[str, str]]]:
    return request.param, read_freedict(REAL / DICTS[request.param])


def test_split_is_seeded_half_and_half_by_headword(pairs) -> None:
    _, p = pairs
    a, b = split_dictionary(p, 7, 0.5), split_dictionary(p, 7, 0.5)
    assert (a.dictionary, a.held_out, a.record) == (b.dictionary, b.held_out, b.record)
    assert split_dictionary(p, 8, 0.5).held_out != a.held_out
    heads = {word_key(s) for s, _ in p}
    n = a.record["headwords"]
    assert n["held_out"] + n["dictionary"] == len(heads)
    assert abs(n["held_out"] - len(heads) / 2) <= 0.5
    fit_heads = {word_key(s) for s, _ in a.dictionary}
    held_heads = heads - fit_heads
    assert len(held_heads) == n["held_out"]  # every pair follows its headword
    # brute force: the held-out pairs are those of held-out headwords whose target word
    # the dictionary half does not have
    fit_targets = {word_key(t) for _, t in a.dictionary}
    expected = [
        (s, t) for s, t in p if word_key(s) in held_heads and word_key(t) not in fit_targets
    ]
    assert a.held_out == expected and expected
    assert not {word_key(t) for _, t in a.held_out} & fit_targets
    assert a.dictionary == [(s, t) for s, t in p if word_key(s) in fit_heads]
    assert a.record["pairs"] == [list(x) for x in a.dictionary]
    assert a.record["held_out_pairs"] == [list(x) for x in a.held_out]
    dropped = sum(1 for s, t in p if word_key(s) in held_heads) - len(a.held_out)
    assert a.record["dropped_held_out_pairs"] == dropped
    assert split_dictionary(p, 7, 0.0).held_out == []
    assert split_dictionary(p, 7, 1.0).dictionary == []


def test_the_halves_stay_disjoint_in_the_aligned_artifact(tmp_path, pairs) -> None:
    from embtransfer.transfer.aligned import AlignedVectors, read_aligned_stats, write_aligned

    _, p = pairs
    split = split_dictionary(p, 3, 0.5)
    rng = np.random.default_rng(0)
    vectors = AlignedVectors(rng.standard_normal((4, 3)).astype(np.float32), np.ones(4, bool),
                             rng.standard_normal((5, 3)).astype(np.float32), np.ones(5, bool))
    path = tmp_path / "aligned.safetensors"
    write_aligned(path, vectors, np.eye(3), {"dictionary_split": split.record})
    record = read_aligned_stats(path)["dictionary_split"]
    fit = {word_key(t) for _, t in record["pairs"]} | {word_key(s) for s, _ in record["pairs"]}
    held_targets = {word_key(t) for _, t in record["held_out_pairs"]}
    held_heads = {word_key(s) for s, _ in record["held_out_pairs"]}
    assert record["seed"] == 3 and record["held_out"] == 0.5
    assert held_targets and not held_targets & fit and not held_heads & fit


def _tokenizers():
    from embtransfer.models.tokenizer_training import train_tokenizer

    source = train_tokenizer("bytelevel_bpe", [str(REAL / "en.txt")], 1500, "llama",
                             split_digits=True)
    return source


@pytest.mark.parametrize("lang", sorted(DICTS))
def test_truth_is_the_held_out_words_that_are_one_target_token(tmp_path, lang) -> None:
    from embtransfer.models.tokenizer_training import train_tokenizer
    from embtransfer.vocab.canonical import vocab_table

    pairs = read_freedict(REAL / DICTS[lang])
    split = split_dictionary(pairs, 0, 0.5)
    # the target tokenizer also learns the held-out words, so some are one token
    text = tmp_path / "target.txt"
    words = [t for _, t in pairs]
    body = (REAL / f"{lang}.txt").read_text(encoding="utf-8")
    text.write_text(body + ("\n" + " ".join(words)) * 3 + "\n", encoding="utf-8")
    target = train_tokenizer("bytelevel_bpe", [str(text)], 3000, "gpt2")
    source = _tokenizers()
    tv, sv = vocab_table(target), vocab_table(source)
    shared = np.array(tv["id"][:300], np.int64)
    encode = lambda texts: source(texts, add_special_tokens=False)["input_ids"]  # noqa: E731
    table, counts = dictionary_truth(split.held_out, tv, sv, encode, shared, lang)
    assert list(table.columns) == list(COLUMNS)
    assert set(table["kind"]) == {"word"} and set(table["split"]) == {"held_out"}

    # brute force, by another route: a held-out target word with one English translation
    # that the target tokenizer writes (after a space) as one token
    english: dict[str, set[str]] = {}
    for s, t in split.held_out:
        english.setdefault(word_key(t), set()).add(word_key(s))
    fit_words = {word_key(t) for _, t in split.dictionary}
    expected = {}
    for s, t in split.held_out:
        ids = target(" " + t, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and len(english[word_key(t)]) == 1:
            expected[ids[0]] = f"word:{word_key(s)}"
    got = dict(zip(table["target_id"], table["meaning"], strict=True))
    assert expected and expected.items() <= got.items()
    for tid, meaning, row_text in zip(table["target_id"], table["meaning"], table["text"],
                                      strict=True):
        assert word_key(row_text) in english and word_key(row_text) not in fit_words
        assert english[word_key(row_text)] == {meaning.removeprefix("word:")}
        assert tv.loc[tid, "start"]
    for meaning, ids, tid in zip(table["meaning"], table["source_ids"], table["target_id"],
                                 strict=True):
        assert ids == encode([" " + meaning.removeprefix("word:")])[0], tid
    assert counts["with_truth"] == len(table)
    assert counts["nonshared_with_truth"] == int((~table["shared"]).sum())
    assert set(table.loc[table["shared"], "target_id"]) <= set(shared.tolist())
