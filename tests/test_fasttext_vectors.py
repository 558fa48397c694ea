"""fastText training, loading (with clear errors) and per-token vectors."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.fasttext.vectors import (
    FASTTEXT_MAGIC,
    load_fasttext,
    load_token_vectors,
    save_token_vectors,
    token_text,
    token_vectors,
    tokenize_for_fasttext,
    train_fasttext,
)

PARAMS = {
    "model": "cbow",
    "dim": 16,
    "epoch": 2,
    "min_count": 1,
    "minn": 2,
    "maxn": 4,
    "neg": 3,
    "ws": 3,
    "lr": 0.05,
    "bucket": 5000,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # enough distinct words that fastText's subsampling leaves cbow some context
    # (9 very frequent words make whole lines vanish, and cbow then averages nothing: NaN)
    rng = random.Random(0)
    syllables = ["ha", "us", "hu", "nd", "ka", "tz", "ba", "um", "grü", "schö", "üb", "ße"]
    words = ["haus", "straße"] + [
        "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(300)
    ]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) for _ in range(1500)]
    path = tmp_path_factory.mktemp("ft") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_bin(corpus: Path) -> Path:
    out = corpus.parent / "model.bin"
    stats = train_fasttext(corpus, out, PARAMS, seed=1, threads=1)
    assert stats["words"] > 100 and stats["deterministic"]
    return out


def test_train_save_load(model_bin: Path) -> None:
    model = load_fasttext(model_bin)
    assert model.get_dimension() == 16
    assert set(model.words) >= {"haus", "straße"}
    assert np.linalg.norm(model.get_word_vector("haus")) > 0
    assert not list(model_bin.parent.glob(".model.bin.tmp-*"))  # atomic write cleaned up


def test_single_thread_training_is_reproducible(corpus: Path, model_bin: Path, tmp_path: Path):
    again = tmp_path / "again.bin"
    train_fasttext(corpus, again, PARAMS, seed=1, threads=1)
    assert again.read_bytes() == model_bin.read_bytes()
    other = tmp_path / "other.bin"
    train_fasttext(corpus, other, PARAMS, seed=2, threads=1)
    a, b = load_fasttext(model_bin), load_fasttext(other)
    assert not np.array_equal(a.get_word_vector("haus"), b.get_word_vector("haus"))


def test_train_rejects_bad_params(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown fastText parameters"):
        train_fasttext(corpus, tmp_path / "m.bin", PARAMS | {"mincount": 3}, seed=0, threads=1)
    with pytest.raises(ValueError, match="missing"):
        train_fasttext(corpus, tmp_path / "m.bin", {"model": "cbow"}, seed=0, threads=1)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="missing or empty"):
        train_fasttext(empty, tmp_path / "m.bin", PARAMS, seed=0, threads=1)
    assert not (tmp_path / "m.bin").exists()


@pytest.mark.parametrize(
    "content",
    [
        None,  # missing
        b"",  # empty
        b"haus 0.1 0.2\nhund 0.3 0.4\n",  # text (.vec) file
        struct.pack("<ii", FASTTEXT_MAGIC, 99) + b"\0" * 100,  # future version
        "truncated-half",
        "truncated-header",
        "truncated-last-byte",
        "trailing",
    ],
)
def test_load_fasttext_clear_errors(model_bin: Path, tmp_path: Path, content) -> None:
    path = tmp_path / "bad.bin"
    good = model_bin.read_bytes()
    if content == "truncated-half":
        path.write_bytes(good[: len(good) // 2])
    elif content == "truncated-header":
        path.write_bytes(good[:40])
    elif content == "truncated-last-byte":
        path.write_bytes(good[:-1])
    elif content == "trailing":
        path.write_bytes(good + b"\0")
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.bin"):
        load_fasttext(path)


def test_token_text_drops_partial_utf8() -> None:
    full = "schön über".encode()
    assert token_text(full) == "schön über"
    assert token_text("ö".encode()[:1]) == ""
    assert token_text(b"sch" + "ö".encode()[:1]) == "sch"
    assert token_text("ö".encode()[1:] + b"n") == "n"
    han = "漢字".encode()
    for i in range(len(han) + 1):
        for j in range(i, len(han) + 1):
            text = token_text(han[i:j])
            assert "\ufffd" not in text
            assert text in "漢字"
    assert token_text(b"a\xffb") == "ab"  # invalid inside: dropped, never U+FFFD


class FakeModel:
    """get_word_vector returns zeros for strings starting with 'zero'."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def get_dimension(self) -> int:
        return 4

    def get_word_vector(self, text: str) -> np.ndarray:
        self.seen.append(text)
        if text.startswith("zero"):
            return np.zeros(4, np.float32)
        return np.full(4, float(len(text)), np.float32)

    def get_word_id(self, text: str) -> int:
        return 0  # every string is a word of this model


def _vocab() -> pd.DataFrame:
    rows = [
        (0, "<s>", b"", "special"),
        (1, "Ġhaus", b"haus", "normal"),
        (2, "", b"", "normal"),
        (3, "<0xC3>", b"\xc3", "byte"),
        (4, "Ġsch\u00c3", b"sch\xc3", "normal"),  # partial UTF-8 at the end
        (5, "\u00b6n", "ö".encode()[1:] + b"n", "normal"),  # partial at the start
        (6, "zeroes", b"zeroes", "normal"),
        (7, "Ġ", b"", "normal"),
        (9, "Ġhaus", b"haus", "normal"),  # id 8 absent from the table
    ]
    return pd.DataFrame(
        {
            "id": np.array([r[0] for r in rows], np.int64),
            "token": [r[1] for r in rows],
            "bytes": [r[2] for r in rows],
            "canonical": [r[1] for r in rows],
            "start": [r[1].startswith("Ġ") for r in rows],
            "kind": [r[3] for r in rows],
            "role": [None] * len(rows),
        }
    )


def test_token_vectors_word_mode_flags() -> None:
    model = FakeModel()
    vectors, missing = token_vectors(model, _vocab(), mode="word")
    assert vectors.shape == (10, 4) and vectors.dtype == np.float32
    assert missing.tolist() == [True, False, True, True, False, False, True, True, True, False]
    assert (vectors[missing] == 0).all()
    assert vectors[4, 0] == 3  # "sch"
    assert vectors[5, 0] == 1  # "n"
    assert all("\ufffd" not in s for s in model.seen)
    assert "<s>" not in model.seen and "" not in model.seen


def test_token_vectors_token_mode_uses_raw_strings() -> None:
    model = FakeModel()
    vectors, missing = token_vectors(model, _vocab(), mode="token")
    assert missing.tolist() == [True, False, True, False, False, False, True, False, True, False]
    assert vectors[1, 0] == len("Ġhaus")
    assert "<s>" not in model.seen and "Ġhaus" in model.seen
    with pytest.raises(ValueError, match="mode"):
        token_vectors(model, _vocab(), mode="sentence")


def test_token_vectors_with_real_model(model_bin: Path, tmp_path: Path) -> None:
    model = load_fasttext(model_bin)
    vectors, missing = token_vectors(model, _vocab(), mode="word")
    assert np.allclose(vectors[1], model.get_word_vector("haus"))
    assert missing[0] and missing[2] and not missing[1]
    save_token_vectors(tmp_path / "v.npy", tmp_path / "m.npy", vectors, missing)
    v2, m2 = load_token_vectors(tmp_path / "v.npy", tmp_path / "m.npy")
    assert np.array_equal(v2, vectors) and np.array_equal(m2, missing) and m2.dtype == bool
    with pytest.raises(ValueError, match="shapes"):
        save_token_vectors(tmp_path / "x.npy", tmp_path / "y.npy", vectors, missing[:-1])


def test_token_mode_needs_an_in_vocabulary_token(model_bin: Path) -> None:
    # deepfocus's "very rare" rule: in token mode a token below minCount (not a word of
    # the model) has no vector, although fastText builds one from its n-grams
    model = load_fasttext(model_bin)
    assert model.get_word_id("haus") != -1 and model.get_word_id("hausstraße") == -1
    assert np.linalg.norm(model.get_word_vector("hausstraße")) > 0  # n-grams give one
    vocab = pd.DataFrame(
        {
            "id": np.arange(3, dtype=np.int64),
            "token": ["haus", "hausstraße", "straße"],
            "bytes": [b"haus", "hausstraße".encode(), "straße".encode()],
            "canonical": ["haus", "hausstraße", "straße"],
            "start": [False] * 3,
            "kind": ["normal"] * 3,
            "role": [None] * 3,
        }
    )
    vectors, missing = token_vectors(model, vocab, mode="token")
    assert missing.tolist() == [False, True, False]
    assert (vectors[1] == 0).all()
    assert np.allclose(vectors[0], model.get_word_vector("haus"))
    # word mode (SALT's step 1) keeps the n-gram vector
    _, word_missing = token_vectors(model, vocab, mode="word")
    assert word_missing.tolist() == [False, False, False]


def test_tokenize_for_fasttext(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    lines = ["das haus ist grün", "", "über die straße", "der hund"] * 20
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"], show_progress=False)
    tok.train_from_iterator(lines, trainer)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    stats = tokenize_for_fasttext(tok, src, out, batch_lines=7)
    got = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(got) == len(lines) == stats["lines"]
    for line, written in zip(lines, got, strict=True):
        assert written == " ".join(tok.encode(line, add_special_tokens=False).tokens)
    assert got[1] == "" and "Ġ" in got[0]


def test_tokenize_for_fasttext_drops_whitespace_tokens(tmp_path: Path) -> None:
    class Slow:
        def tokenize(self, line: str) -> list[str]:
            return [*line.split(" "), "\n"]

    src = tmp_path / "in.txt"
    src.write_text("a b\nc\n", encoding="utf-8")
    stats = tokenize_for_fasttext(Slow(), src, tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "a b\nc\n"
    assert stats["dropped_tokens"] == 2 and stats["tokens"] == 3
