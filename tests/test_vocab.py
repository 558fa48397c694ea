"""Canonical token forms on the four tokenizer families, built locally."""

from __future__ import annotations

import json
import random
import unicodedata

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from embtransfer.core.atomic import read_parquet_metadata
from embtransfer.vocab.canonical import COLUMNS, detect_scheme, read_vocab, vocab_table, write_vocab

ARABIC = [
    "السلام", "عليكم", "المدرسة", "الكبيرة", "كتاب", "جميل", "مدينة",
    "الشمس", "بيت", "قلم", "ذهب", "الولد", "إلى", "سوق", "ء",
]  # fmt: skip
LATIN = ["hello", "world", "tokens", "bytes", "school", "house", "sun", "42"]
# decomposed on purpose: base letter + combining mark (U+0301, U+0308, ...)
DIACRITIC = [
    unicodedata.normalize("NFD", w)
    for w in ["café", "naïve", "Việt", "tiếng", "über", "Straße", "mañana", "crème"]
]
WORDS = ARABIC + LATIN + DIACRITIC
ARABIC_LETTERS = [chr(c) for c in range(0x0621, 0x064B) if unicodedata.category(chr(c)) == "Lo"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u0323"]


def pseudo_word(rng: random.Random) -> str:
    """Extra word types so that every trainer (Unigram too) learns multi-char pieces."""
    if rng.random() < 0.5:
        return "".join(rng.choice(ARABIC_LETTERS[:12]) for _ in range(rng.randint(2, 5)))
    syl = [rng.choice("bdklmnst") + rng.choice("aeiou") for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        syl[-1] += rng.choice(COMBINING)
    return "".join(syl)


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    extra = [pseudo_word(rng) for _ in range(150)]
    return [" ".join(rng.choice(WORDS + extra) for _ in range(10)) for _ in range(n)]


SENTENCES = [
    "السلام عليكم hello world",
    f"{DIACRITIC[0]} {ARABIC[2]} {DIACRITIC[2]} {DIACRITIC[3]} sun",
    " ".join(ARABIC[:8]),
    " ".join(DIACRITIC),
    f"{ARABIC[9]} {LATIN[2]} {ARABIC[10]} {DIACRITIC[5]} {ARABIC[14]}",
]


def gpt2_style() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    eot = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=eot, eos_token=eot, unk_token=eot, name_or_path="gpt2ish"
    )


def bert_style() -> PreTrainedTokenizerFast:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=specials, show_progress=False
    )
    tok.train_from_iterator(corpus(seed=1), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip


def t5_style() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=250,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed=2), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=["<extra_id_0>", "<extra_id_1>"],
    )  # fmt: skip


def llama_style() -> PreTrainedTokenizerFast:
    """SentencePiece BPE with byte fallback, normalizer/decoder as in Llama's tokenizer.json."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer_tok.train_from_iterator(
        corpus(seed=3), trainers.BpeTrainer(vocab_size=300, show_progress=False)
    )
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in sorted(trained["vocab"], key=trained["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


FAMILIES = {
    "gpt2": (gpt2_style, "byte_level"),
    "bert": (bert_style, "wordpiece"),
    "t5": (t5_style, "sentencepiece"),
    "llama": (llama_style, "sentencepiece"),
}


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[PreTrainedTokenizerFast, object]]:
    out = {}
    for name, (make, _) in FAMILIES.items():
        tok = make()
        out[name] = (tok, vocab_table(tok))
    return out


def reconstruct(table, ids: list[int], scheme: str) -> bytes:
    """Sentence bytes from canonical forms: a space before start-of-word tokens."""
    out = b""
    for k, i in enumerate(ids):
        row = table.iloc[i]
        assert row["kind"] != "special"
        if row["start"] and k > 0:
            out += b" "
        out += row["bytes"]
    if scheme == "sentencepiece" and out.startswith(b" "):
        out = out[1:]  # a lone leading "▁" is the dummy prefix, not text
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_table_shape_and_scheme(built, family):
    tok, table = built[family]
    assert list(table.columns) == list(COLUMNS)
    assert table["id"].dtype == np.int64
    assert table["id"].tolist() == list(range(len(tok)))
    assert table["start"].dtype == bool
    assert set(table["kind"]) <= {"special", "byte", "normal"}
    assert all(isinstance(b, bytes) for b in table["bytes"])
    assert detect_scheme(tok)[0] == FAMILIES[family][1]
    assert table.attrs["scheme"] == FAMILIES[family][1]
    specials = table[table["kind"] == "special"]
    assert (specials["bytes"] == b"").all()
    assert set(specials["id"]) == set(tok.all_special_ids)
    assert table.loc[table["kind"] != "special", "role"].isna().all()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_canonical_bytes_reproduce_sentences(built, family):
    tok, table = built[family]
    scheme = FAMILIES[family][1]
    for sentence in SENTENCES:
        ids = tok.backend_tokenizer.encode(sentence, add_special_tokens=False).ids
        assert tok.unk_token_id not in ids or family == "gpt2"
        assert reconstruct(table, ids, scheme) == sentence.encode("utf-8"), (family, sentence)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_replacement_bytes_anywhere(built, family):
    _, table = built[family]
    assert not any(b"\xef\xbf\xbd" in b for b in table["bytes"])
    assert not any("\ufffd" in c for c in table["canonical"])


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_byte_level_partial_utf8_pieces_are_raw_bytes(built):
    tok, table = built["gpt2"]
    normal = table[table["kind"] == "normal"]
    partial = normal[~normal["bytes"].map(_is_utf8)]
    # merges that cut Arabic letters / combining sequences in half exist here
    assert (partial["bytes"].map(len) >= 2).sum() >= 3
    for _, row in partial.iterrows():
        # canonical shows the stray bytes as \xNN, never U+FFFD
        assert "\\x" in row["canonical"]
        # independent decoding: GPT-2's table maps printable latin-1 to itself
        assert row["bytes"] == _gpt2_bytes(row["token"])[1 if row["start"] else 0 :]
    # single bytes >= 0x80 are kind byte; printable ASCII singles are normal
    singles = table[table["bytes"].map(len) == 1]
    for _, row in singles.iterrows():
        expected = "byte" if row["bytes"][0] >= 0x80 else "normal"
        assert row["kind"] == expected, row.to_dict()
    # the 128 high bytes of the base alphabet, plus any "Ġ" + high byte merges
    assert ((table["kind"] == "byte") & ~table["start"]).sum() == 128
    words = table[table["token"].str.match(r"^Ġ[a-z]{2,}$")]
    assert len(words) > 0
    for _, row in words.iterrows():
        text = row["token"][1:]
        assert row["bytes"] == text.encode() and row["start"] and row["canonical"] == "▁" + text


def _gpt2_bytes(token: str) -> bytes:
    """Reference inverse of GPT-2's bytes_to_unicode, written out the slow way."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    inverse = {chr(b): b for b in printable}
    inverse.update({chr(256 + n): b for n, b in enumerate(others)})
    return bytes(inverse[c] for c in token)


def test_byte_level_valid_tokens_agree_with_decoder(built):
    tok, table = built["gpt2"]
    for _, row in table[table["kind"] == "normal"].iterrows():
        if _is_utf8(row["bytes"]):
            text = tok.backend_tokenizer.decode([int(row["id"])], skip_special_tokens=False)
            assert text.encode("utf-8") == (b" " if row["start"] else b"") + row["bytes"]


def test_wordpiece_prefix_and_diacritics(built):
    _, table = built["bert"]
    cont = table[table["token"].str.startswith("##") & (table["kind"] == "normal")]
    assert len(cont) > 10
    assert not cont["start"].any()
    assert all(r["bytes"] == r["token"][2:].encode() for _, r in cont.iterrows())
    whole = table[~table["token"].str.startswith("##") & (table["kind"] == "normal")]
    assert whole["start"].all()
    # no accent stripping: combining acute accent bytes survive in some token
    assert any(b"\xcc\x81" in b for b in table["bytes"])
    roles = dict(zip(table["token"], table["role"], strict=True))
    assert roles["[CLS]"] == "cls" and roles["[SEP]"] == "sep" and roles["[PAD]"] == "pad"
    assert roles["[UNK]"] == "unk" and roles["[MASK]"] == "mask"


def test_sentencepiece_metaspace_and_roles(built):
    tok, table = built["t5"]
    marked = table[table["token"].str.startswith("▁") & (table["token"].str.len() > 1)]
    assert len(marked) > 10 and marked["start"].all()
    assert all(r["bytes"] == r["token"][1:].encode() for _, r in marked.iterrows())
    roles = dict(zip(table["token"], table["role"], strict=True))
    assert roles["</s>"] == "eos" and roles["<pad>"] == "pad" and roles["<unk>"] == "unk"
    extra = table[table["token"] == "<extra_id_0>"].iloc[0]
    assert extra["kind"] == "special" and extra["role"] is None


def test_sentencepiece_byte_fallback(built):
    tok, table = built["llama"]
    fallback = table[table["token"].str.match(r"^<0x[0-9A-F]{2}>$")]
    assert len(fallback) == 256
    assert (fallback["kind"] == "byte").all() and not fallback["start"].any()
    assert fallback["bytes"].tolist() == [bytes([int(t[3:5], 16)]) for t in fallback["token"]]
    a = table[table["token"] == "<0x41>"].iloc[0]
    assert a["bytes"] == b"A" and a["canonical"] == "A"
    d8 = table[table["token"] == "<0xD8>"].iloc[0]
    assert d8["bytes"] == b"\xd8" and d8["canonical"] == "\\xd8"
    # characters never seen in training fall back to bytes, which still reproduce the text
    sentence = "hello жук € world"
    ids = tok.backend_tokenizer.encode(sentence, add_special_tokens=False).ids
    assert any(table.iloc[i]["kind"] == "byte" for i in ids)
    assert reconstruct(table, ids, "sentencepiece") == sentence.encode()
    roles = dict(zip(table["token"], table["role"], strict=True))
    assert roles["<s>"] == "bos" and roles["</s>"] == "eos" and roles["<unk>"] == "unk"


def test_gpt2_multi_role(built):
    _, table = built["gpt2"]
    eot = table[table["token"] == "<|endoftext|>"].iloc[0]
    assert eot["kind"] == "special" and eot["role"] == "bos,eos,unk" and eot["bytes"] == b""


@pytest.mark.parametrize("family", list(FAMILIES))
def test_write_read_roundtrip(built, family, tmp_path):
    tok, table = built[family]
    path = tmp_path / "vocab" / f"{family}.parquet"
    write_vocab(table, path, tokenizer_name=f"local/{family}")
    back = read_vocab(path)
    assert list(back.columns) == list(COLUMNS)
    for col in COLUMNS:
        assert back[col].tolist() == table[col].tolist(), col
    assert back["id"].dtype == np.int64 and back["start"].dtype == bool
    meta = read_parquet_metadata(path)
    assert meta == {
        "scheme": FAMILIES[family][1],
        "vocab_size": len(tok),
        "tokenizer": f"local/{family}",
    }
    assert back.attrs["scheme"] == FAMILIES[family][1]
    assert not list(tmp_path.glob("vocab/.*"))  # no temporary left behind


def test_added_plain_token_keeps_raw_text():
    tok = gpt2_style()
    tok.add_tokens(["  ", "ﷺ"])  # raw text, not byte-level encoded
    table = vocab_table(tok)
    spaces = table[table["token"] == "  "].iloc[0]
    assert spaces["bytes"] == b" " and spaces["start"] and spaces["kind"] == "normal"
    ligature = table[table["token"] == "ﷺ"].iloc[0]
    assert ligature["bytes"] == "ﷺ".encode() and not ligature["start"]
