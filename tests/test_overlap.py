"""Vocabulary overlap against a brute-force reference, special roles, coverage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from embtransfer.vocab.canonical import COLUMNS, ROLES, canonical_form, vocab_table
from embtransfer.vocab.overlap import (
    compute_overlap,
    count_tokens,
    coverage,
    read_overlap,
    write_overlap,
)

# pieces include partial UTF-8: halves of Arabic letters (ا = D8 A7, ل = D9 84)
PIECES = [b"a", b"b", b"\xd8", b"\xa7", b"\xd9", b"\x84", b"\xd8\xa7"]


def make_table(rows: list[tuple[bytes, bool, str, str | None]]) -> pd.DataFrame:
    """Vocab table from (bytes, start, kind, role) rows; ids are row positions."""
    return pd.DataFrame(
        {
            "id": np.arange(len(rows), dtype=np.int64),
            "token": [
                canonical_form(b, s) if k != "special" else f"<s{i}>"
                for i, (b, s, k, _) in enumerate(rows)
            ],  # fmt: skip
            "bytes": pd.Series([r[0] for r in rows], dtype=object),
            "canonical": [canonical_form(r[0], r[1]) for r in rows],
            "start": np.array([r[1] for r in rows], dtype=bool),
            "kind": pd.Series([r[2] for r in rows], dtype=object),
            "role": pd.Series([r[3] for r in rows], dtype=object),
        }
    )[list(COLUMNS)]


def random_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    rows = []
    for _ in range(n):
        u = rng.random()
        if u < 0.1:
            roles = [r for r in ROLES if rng.random() < 0.25]
            rows.append((b"", False, "special", ",".join(roles) or None))
        elif u < 0.2:
            rows.append((PIECES[rng.integers(len(PIECES) - 1)], False, "byte", None))
        else:
            k = int(rng.integers(0, 3))  # 0 pieces: an empty normal token, never matched
            raw = b"".join(PIECES[i] for i in rng.integers(len(PIECES), size=k))
            rows.append((raw, bool(rng.random() < 0.5), "normal", None))
    return make_table(rows)


def brute_force(source: pd.DataFrame, target: pd.DataFrame, match: str) -> pd.DataFrame:
    """The documented rules, one target token at a time, over every source token."""
    src = list(source.itertuples(index=False))
    out = []
    for t in target.itertuples(index=False):
        if t.kind == "special":
            roles = [r for r in ROLES if isinstance(t.role, str) and r in t.role.split(",")]
            wanted = roles + [{"cls": "bos", "sep": "eos"}[r] for r in roles if r in ("cls", "sep")]
            for r in wanted:
                holders = [
                    s.id
                    for s in src
                    if s.kind == "special" and isinstance(s.role, str) and r in s.role.split(",")
                ]
                if holders:
                    out.append((t.id, min(holders), "special"))
                    break
            continue
        if not t.bytes:
            continue
        cands = [
            s
            for s in src
            if s.kind in ("normal", "byte")
            and s.bytes == t.bytes
            and (match == "fuzzy" or s.start == t.start)
        ]
        if cands:
            best = min(cands, key=lambda s: (s.start != t.start, s.kind != t.kind, s.id))
            out.append((t.id, best.id, "exact" if best.start == t.start else "fuzzy"))
    frame = pd.DataFrame(out, columns=["target_id", "source_id", "how"])
    return frame.sort_values("target_id").reset_index(drop=True)


def as_tuples(frame: pd.DataFrame) -> list[tuple[int, int, str]]:
    return [(int(a), int(b), str(c)) for a, b, c in frame[["target_id", "source_id", "how"]].values]


@pytest.mark.parametrize("match", ["exact", "fuzzy"])
@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed, match):
    rng = np.random.default_rng(seed)
    source = random_table(rng, int(rng.integers(20, 120)))
    target = random_table(rng, int(rng.integers(20, 120)))
    expected = brute_force(source, target, match)
    if not (expected["how"] != "special").any():
        with pytest.raises(ValueError):
            compute_overlap(source, target, match)
        return
    got = compute_overlap(source, target, match)
    assert list(got.columns) == ["target_id", "source_id", "how"]
    assert got["target_id"].dtype == np.int64 and got["source_id"].dtype == np.int64
    assert got["target_id"].is_unique
    assert as_tuples(got) == as_tuples(expected)


@pytest.mark.parametrize("seed", range(10))
def test_invariant_under_source_row_permutation(seed):
    rng = np.random.default_rng(100 + seed)
    source = random_table(rng, 150)
    target = random_table(rng, 150)
    for match in ("exact", "fuzzy"):
        base = compute_overlap(source, target, match)
        shuffled = source.iloc[rng.permutation(len(source))].reset_index(drop=True)
        assert as_tuples(compute_overlap(shuffled, target, match)) == as_tuples(base)
        t_shuffled = target.iloc[rng.permutation(len(target))].reset_index(drop=True)
        assert as_tuples(compute_overlap(source, t_shuffled, match)) == as_tuples(base)


def test_tie_break_rules():
    source = make_table(
        [
            (b"A", False, "byte", None),  # 0: <0x41>
            (b"A", True, "normal", None),  # 1: ▁A
            (b"A", False, "normal", None),  # 2: A
            (b"xy", True, "normal", None),  # 3
            (b"xy", True, "normal", None),  # 4: duplicate form, higher id
            (b"q", True, "normal", None),  # 5
        ]
    )
    target = make_table(
        [
            (b"A", False, "normal", None),  # 0 -> 2 (same start, same kind)
            (b"A", True, "normal", None),  # 1 -> 1
            (b"A", False, "byte", None),  # 2 -> 0 (byte with byte)
            (b"xy", False, "normal", None),  # 3 -> 3 fuzzy (lowest id)
            (b"q", False, "normal", None),  # 4 -> 5 fuzzy
            (b"", False, "normal", None),  # 5: empty, never shared
        ]
    )
    assert as_tuples(compute_overlap(source, target, "fuzzy")) == [
        (0, 2, "exact"),
        (1, 1, "exact"),
        (2, 0, "exact"),
        (3, 3, "fuzzy"),
        (4, 5, "fuzzy"),
    ]
    assert as_tuples(compute_overlap(source, target, "exact")) == [
        (0, 2, "exact"),
        (1, 1, "exact"),
        (2, 0, "exact"),
    ]


def test_partial_utf8_matches_only_byte_identical():
    # all of these decode to U+FFFD-laden strings; only identical bytes may pair
    source = make_table(
        [
            (b"\xd8", False, "byte", None),
            (b"\xd8\xa7\xd9", False, "normal", None),
            (b"\xa7\xd9\x84", True, "normal", None),
            (b"ok", False, "normal", None),
        ]
    )
    target = make_table(
        [
            (b"\xd9", False, "byte", None),  # no: different byte, same U+FFFD string
            (b"\xd8\xa7\xd9", False, "normal", None),  # yes -> 1
            (b"\xd8\xa7", False, "normal", None),  # no: prefix only
            (b"\xa7\xd9\x84", False, "normal", None),  # fuzzy -> 2
            (b"\xd8", True, "byte", None),  # fuzzy -> 0
            (b"\xef\xbf\xbd", False, "normal", None),  # replacement char bytes: no
        ]
    )
    assert as_tuples(compute_overlap(source, target, "fuzzy")) == [
        (1, 1, "exact"),
        (3, 2, "fuzzy"),
        (4, 0, "fuzzy"),
    ]


def _special_tokenizer(kind: str) -> PreTrainedTokenizerFast:
    """Tiny real tokenizers with the special tokens of GPT-2, BERT, T5, Llama."""
    words = ["a", "b", "hello"]
    if kind == "gpt2":
        vocab = {"<|endoftext|>": 0, "a": 1, "b": 2, "Ġhello": 3, "Ġb": 4}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens(["<|endoftext|>"])
        eot = "<|endoftext|>"
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token=eot, eos_token=eot, unk_token=eot
        )
    if kind == "bert":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        vocab = {t: i for i, t in enumerate(specials + words)}
        tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.add_special_tokens(specials)
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
            sep_token="[SEP]", mask_token="[MASK]",
        )  # fmt: skip
    if kind == "t5":
        pieces = ["<pad>", "</s>", "<unk>", "▁a", "b", "▁hello", "<extra_id_0>"]
        tok = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=2))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
            additional_special_tokens=["<extra_id_0>"],
        )  # fmt: skip
    assert kind == "llama"
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "▁a": 3, "b": 4}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return {k: vocab_table(_special_tokenizer(k)) for k in ("gpt2", "bert", "t5", "llama")}


def _special_rows(overlap: pd.DataFrame, source: pd.DataFrame, target: pd.DataFrame) -> dict:
    sp = overlap[overlap["how"] == "special"]
    return {
        target["token"].iloc[t]: source["token"].iloc[s]
        for t, s in zip(sp["target_id"], sp["source_id"], strict=True)
    }


def test_special_tokens_by_role(tables):
    gpt2, bert, t5, llama = tables["gpt2"], tables["bert"], tables["t5"], tables["llama"]
    # BERT target, GPT-2 source: cls -> bos and sep -> eos fall back to <|endoftext|>
    got = _special_rows(compute_overlap(gpt2, bert), gpt2, bert)
    assert got == {"[UNK]": "<|endoftext|>", "[CLS]": "<|endoftext|>", "[SEP]": "<|endoftext|>"}
    # T5 target, GPT-2 source: </s> is eos, <unk> is unk; <pad> and <extra_id_0> unshared
    got = _special_rows(compute_overlap(gpt2, t5), gpt2, t5)
    assert got == {"</s>": "<|endoftext|>", "<unk>": "<|endoftext|>"}
    # BERT target, Llama source
    got = _special_rows(compute_overlap(llama, bert), llama, bert)
    assert got == {"[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>"}
    # GPT-2 target (bos,eos,unk) to Llama: the first role in ROLES order, bos
    got = _special_rows(compute_overlap(llama, gpt2), llama, gpt2)
    assert got == {"<|endoftext|>": "<s>"}
    # T5 target, BERT source: unk and pad pair by role, </s> (eos) has no counterpart
    # (fallbacks only go from cls/sep to bos/eos, not back)
    got = _special_rows(compute_overlap(bert, t5), bert, t5)
    assert got == {"<pad>": "[PAD]", "<unk>": "[UNK]"}
    # special tokens never pair by string, not even with a normal token of the same text
    source = make_table(
        [(b"<|endoftext|>", False, "normal", None), (b"", False, "special", "pad"),
         (b"a", False, "normal", None)]
    )  # fmt: skip
    assert as_tuples(compute_overlap(source, gpt2)) == [(1, 2, "exact")]


def test_cross_family_normal_tokens(tables):
    # "Ġhello" (GPT-2) and "▁hello" (T5) are the same (bytes, start)
    ov = compute_overlap(tables["gpt2"], tables["t5"], "exact")
    pairs = {
        tables["t5"]["token"].iloc[t]: tables["gpt2"]["token"].iloc[s]
        for t, s, h in ov.values
        if h != "special"
    }
    assert pairs == {"▁hello": "Ġhello", "b": "b"}
    # fuzzy additionally pairs T5 "▁a" with GPT-2 "a"
    ov = compute_overlap(tables["gpt2"], tables["t5"], "fuzzy")
    row = ov[ov["target_id"] == int(tables["t5"].query("token == '▁a'")["id"].iloc[0])]
    assert row["how"].tolist() == ["fuzzy"]


def test_no_shared_tokens_raises():
    source = make_table([(b"", False, "special", "eos"), (b"abc", True, "normal", None)])
    source.attrs["name"] = "src-tok"
    target = make_table([(b"", False, "special", "eos"), (b"xyz", True, "normal", None)])
    target.attrs["name"] = "tgt-tok"
    with pytest.raises(ValueError, match=r"'tgt-tok' \(2 tokens\).*'src-tok' \(2 tokens\)"):
        compute_overlap(source, target)
    with pytest.raises(ValueError, match="match mode"):
        compute_overlap(source, target, "exact")
    # start flag differs: only fuzzy shares it
    target2 = make_table([(b"abc", False, "normal", None)])
    with pytest.raises(ValueError):
        compute_overlap(source, target2, "exact")
    assert len(compute_overlap(source, target2, "fuzzy")) == 1
    with pytest.raises(ValueError, match="match must be"):
        compute_overlap(source, target2, "loose")


def test_coverage_hand_checked():
    target = make_table(
        [
            (b"", False, "special", "eos"),  # 0 shared (special)
            (b"a", True, "normal", None),  # 1 shared exact
            (b"b", False, "normal", None),  # 2 shared exact
            (b"c", True, "normal", None),  # 3 shared fuzzy
            (b"d", True, "normal", None),  # 4
            (b"e", True, "normal", None),  # 5
            (b"f", True, "normal", None),  # 6
            (b"g", True, "normal", None),  # 7
        ]
    )
    source = make_table(
        [
            (b"", False, "special", "eos"),
            (b"a", True, "normal", None),
            (b"b", False, "normal", None),
            (b"c", False, "normal", None),
        ]
    )
    ov = compute_overlap(source, target)
    counts = np.array([0, 10, 5, 5, 20, 0, 0, 60])
    cov = coverage(ov, target, counts)
    assert cov == {
        "copied": 4,
        "initialized": 4,
        "target_vocab_size": 8,
        "coverage_pct": 50.0,
        "by_how": {"special": 1, "exact": 2, "fuzzy": 1},
        "corpus_tokens": 100,
        "corpus_shared_tokens": 20,  # 0 + 10 + 5 + 5
        "corpus_coverage_pct": 20.0,
    }
    assert "corpus_coverage_pct" not in coverage(ov, target)
    assert coverage(ov, target, np.zeros(8))["corpus_coverage_pct"] is None


def test_count_tokens(tmp_path):
    tok = _special_tokenizer("gpt2")
    text = tmp_path / "corpus.txt"
    text.write_text("a hello\nb\n\nab hello\nb b b\n", encoding="utf-8")
    counts = count_tokens(tok, text)
    assert counts.dtype == np.int64 and counts.shape == (len(tok),)
    # ids: <|endoftext|>=0 (also unk: "ab"), a=1, b=2, Ġhello=3, Ġb=4; none added
    assert counts.tolist() == [1, 1, 2, 2, 2]
    assert count_tokens(tok, text, max_lines=2).tolist() == [0, 1, 1, 1, 0]
    assert count_tokens(tok, text, batch_size=1).tolist() == counts.tolist()


def test_write_read_overlap(tmp_path, tables):
    ov = compute_overlap(tables["gpt2"], tables["t5"])
    path = tmp_path / "overlap" / "gpt2" / "t5.parquet"
    write_overlap(ov, path, metadata={"match": "fuzzy"})
    back = read_overlap(path)
    assert as_tuples(back) == as_tuples(ov)
    assert back.attrs["match"] == "fuzzy"
