"""Tokenizer training, tiny-model pretraining and the model seam (embtransfer.models.loading)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from embtransfer.models.loading import (
    check_tokenizer_model_agreement,
    load_embeddings,
    load_tokenizer,
)
from embtransfer.models.pretrain import (
    _Objective,
    build_model,
    objective_loss,
    pretrain,
    save_checkpoint,
)
from embtransfer.models.tokenizer_training import (
    BYTE_TOKENS,
    DEFAULT_ALGORITHM,
    DEFAULT_SPLIT_DIGITS,
    special_token_ids,
    train_tokenizer,
)

# Arabic-block script with harakat, Vietnamese with precomposed letters, and
# Latin letters with *combining* acute accents (U+0301).
ARABIC = ["كَتَبَ", "الوَلَدُ", "مدرسة", "بيت", "جميل", "الكتاب", "قرأ"]
VIET = ["Việt", "tiếng", "người", "nước", "đẹp"]
COMBINING = ["e\u0301te\u0301", "cafe\u0301", "no\u0308el"]
LATIN = ["the", "cat", "sat", "on", "mat", "42", "Anna", "radio"]
SAMPLE = "الوَلَدُ كَتَبَ مدرسة Việt người e\u0301te\u0301 42 Anna ، cafe\u0301!"
TINY = {"steps": 60, "batch_size": 8, "seq_len": 32, "warmup_steps": 5, "log_every": 1000}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    rng = random.Random(0)
    words = ARABIC + VIET + COMBINING + LATIN
    # A little structure (fixed word pairs) so that a model has something to learn.
    pairs = [(w, words[(i * 7 + 3) % len(words)]) for i, w in enumerate(words)]
    out = tmp_path_factory.mktemp("corpus")
    paths = {}
    for name, n in (("train", 1500), ("valid", 100)):
        lines = []
        for _ in range(n):
            sent = []
            for _ in range(rng.randint(2, 6)):
                sent.extend(rng.choice(pairs))
            lines.append(" ".join(sent) + rng.choice([" .", " ،", "!"]))
        (out / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths[name] = str(out / f"{name}.txt")
    return paths


@pytest.fixture(scope="module")
def tokenizers(corpus: dict[str, str]) -> dict[str, object]:
    return {
        fam: train_tokenizer(DEFAULT_ALGORITHM[fam], [corpus["train"]], 400, fam)
        for fam in ("gpt2", "llama", "gemma", "xglm", "bert", "t5")
    }


# ---------------------------------------------------------------- tokenizers


@pytest.mark.parametrize(
    "algorithm,family",
    [
        ("bytelevel_bpe", "gpt2"),
        ("bytelevel_bpe", "llama"),
        ("sentencepiece_bpe", "llama"),
        ("sentencepiece_bpe", "gemma"),
    ],
)
def test_lossless_tokenizers_round_trip(corpus, algorithm, family):
    tok = train_tokenizer(algorithm, [corpus["train"]], 400, family)
    # Includes characters never seen in training (byte-level / byte fallback cover them).
    for text in (SAMPLE, "ﻻ unseen ẞ ǅ 😀 \u0640\u0651"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    if algorithm == "sentencepiece_bpe":
        vocab = tok.get_vocab()
        assert all(f"<0x{b:02X}>" in vocab for b in range(256))
        assert any(t.startswith("▁") for t in vocab)
    else:
        assert "Ġ" in "".join(tok.get_vocab())


@pytest.mark.parametrize("algorithm,family", [("wordpiece", "bert"), ("unigram", "t5")])
def test_lossy_tokenizers_keep_script_and_diacritics(corpus, algorithm, family):
    tok = train_tokenizer(algorithm, [corpus["train"]], 400, family)
    ids = tok(SAMPLE)["input_ids"]
    assert tok.unk_token_id not in ids  # every character was in training
    decoded = tok.decode(ids, skip_special_tokens=True)
    for word in ["الوَلَدُ", "كَتَبَ", "Việt", "e\u0301te\u0301", "cafe\u0301"]:
        assert word in decoded, (word, decoded)  # no lowercasing, accent stripping, NFC
    if algorithm == "wordpiece":
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert any(t.startswith("##") for t in tok.get_vocab())
    else:
        assert ids[-1] == tok.eos_token_id
        assert tok.convert_tokens_to_ids("<extra_id_19>") != tok.unk_token_id


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma", "bert", "t5"])
def test_special_token_roles(tokenizers, family, tmp_path):
    tok = tokenizers[family]
    expected = {
        "gpt2": {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>"},
        "llama": {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "pad": None},
        "gemma": {"bos": "<s>", "eos": "</s>", "unk": "<unk>", "pad": "<pad>"},
        "bert": {
            "pad": "[PAD]",
            "unk": "[UNK]",
            "cls": "[CLS]",
            "sep": "[SEP]",
            "mask": "[MASK]",
            "bos": None,
        },
        "t5": {"pad": "<pad>", "eos": "</s>", "unk": "<unk>", "bos": None},
    }[family]
    tok.save_pretrained(tmp_path)
    for t in (tok, load_tokenizer(tmp_path)):
        for role, value in expected.items():
            assert getattr(t, f"{role}_token") == value, (family, role)
        assert t(SAMPLE)["input_ids"] == tok(SAMPLE)["input_ids"]
    if family == "t5":
        extra = [t for t in load_tokenizer(tmp_path).all_special_tokens if "extra_id" in t]
        assert len(extra) == 20


@pytest.mark.parametrize(
    "algorithm", ["bytelevel_bpe", "sentencepiece_bpe", "wordpiece", "unigram"]
)
def test_tokenizer_training_is_deterministic(corpus, algorithm):
    family = {"wordpiece": "bert", "unigram": "t5"}.get(algorithm, "llama")
    a = train_tokenizer(algorithm, [corpus["train"]], 400, family)
    b = train_tokenizer(algorithm, [corpus["train"]], 400, family)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    assert len(a) <= 400



def _few_frequent_words_corpus(path: Path) -> tuple[list[str], Path]:
    """Six very frequent words (NFD Latin, Arabic, plain Latin) among ~800 rarer ones.

    As in the miniature worlds, there are few word types, and the frequent words
    are always followed by a space and start no other word: a suffix-array seed
    search never proposes them as pieces.
    """
    rng = random.Random(1)
    frequent = ["vo\u0323\u0302m", "la\u0302\u0309", "tha\u0302c", "friet", "بيدض", "nien"]
    letters = "ptkbdgmnlrsvfhaeiou"
    rare = sorted(
        w
        for w in {"".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
                  for _ in range(800)}
        if not any(f in w for f in frequent)
    )
    lines = []
    for _ in range(6000):
        words = [rng.choice(rare)]
        for _ in range(rng.randint(3, 9)):
            words += [rng.choice(frequent) if rng.random() < 0.6 else rng.choice(rare)]
        lines.append(" ".join(words + [rng.choice(rare)]) + ".")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return frequent, path


def test_unigram_keeps_frequent_words_whole_and_fills_the_vocab(tmp_path):
    frequent, path = _few_frequent_words_corpus(tmp_path / "train.txt")
    tok = train_tokenizer("unigram", [str(path)], 2000, "t5")
    for word in frequent:
        assert tok.tokenize(word) == ["▁" + word], word
        sentence = f"{word} {word}."
        ids = tok(sentence)["input_ids"]
        assert ids[-1] == tok.eos_token_id and tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == sentence
    assert 0.9 * 2000 <= len(tok) <= 2000


def test_unigram_fertility_is_close_to_bpe(tmp_path):
    _, path = _few_frequent_words_corpus(tmp_path / "train.txt")
    lines = path.read_text(encoding="utf-8").splitlines()[:500]
    n_words = sum(len(line.split()) for line in lines)

    def fertility(tok) -> float:
        n = sum(len(tok(line, add_special_tokens=False)["input_ids"]) for line in lines)
        return n / n_words

    unigram = train_tokenizer("unigram", [str(path)], 2000, "t5")
    bpe = train_tokenizer("bytelevel_bpe", [str(path)], 2000, "gpt2")
    assert fertility(unigram) <= 1.15 * fertility(bpe)


def test_unigram_training_is_deterministic_across_processes(corpus, tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from embtransfer.models.tokenizer_training import train_tokenizer\n"
        "t = train_tokenizer('unigram', [sys.argv[1]], 400, 't5')\n"
        "open(sys.argv[2], 'w', encoding='utf-8').write(t.backend_tokenizer.to_str())\n"
    )
    outs = [tmp_path / f"{i}.json" for i in range(2)]
    for out in outs:
        subprocess.run([sys.executable, "-c", code, corpus["train"], str(out)], check=True)
    assert outs[0].read_text(encoding="utf-8") == outs[1].read_text(encoding="utf-8")


# ---------------------------------------------------------------- models

FAMILY_TIES = [
    ("llama", False),
    ("llama", True),
    ("gemma", True),
    ("gpt2", True),
    ("xglm", True),
    ("bert", True),
    ("bert", False),
    ("t5", True),
    ("t5", False),
]


@pytest.mark.parametrize("family,tied", FAMILY_TIES)
def test_build_save_and_load_embeddings(tokenizers, family, tied, tmp_path):
    tok = tokenizers[family]
    vocab = len(tok) + 5  # padding rows, like real padded vocabularies
    model = build_model(
        family,
        vocab,
        {"hidden_size": 32, "intermediate_size": 64},
        tied,
        special_token_ids(tok),
        seed=0,
    )
    inp = model.get_input_embeddings().weight
    out = model.get_output_embeddings().weight
    assert inp.shape == (vocab, 32)
    assert (inp.data_ptr() == out.data_ptr()) == tied
    save_checkpoint(model, tok, tmp_path / "ckpt", {"note": "test"})
    assert json.loads((tmp_path / "ckpt" / "pretrain.json").read_text())["note"] == "test"
    assert not list((tmp_path / "ckpt").glob("*.bin"))

    emb = load_embeddings(tmp_path / "ckpt")
    assert emb.tied == tied
    assert emb.input_name != "instantiated"  # read from safetensors, not by building
    np.testing.assert_array_equal(emb.input, inp.detach().numpy())
    if tied:
        assert emb.output is None
    else:
        np.testing.assert_array_equal(emb.output, out.detach().numpy())
        assert not np.array_equal(emb.output, emb.input)

    info = check_tokenizer_model_agreement(tmp_path / "ckpt", tmp_path / "ckpt")
    assert info["padding_rows"] == 5 and "note" in info


def test_load_embeddings_falls_back_to_instantiating(tmp_path):
    # OPT keeps its embeddings under model.decoder.embed_tokens, a name the lookup skips.
    import transformers as tf

    config = tf.OPTConfig(
        vocab_size=50,
        hidden_size=16,
        ffn_dim=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        word_embed_proj_dim=16,
    )
    model = tf.OPTForCausalLM(config)
    model.save_pretrained(tmp_path / "opt")
    emb = load_embeddings(tmp_path / "opt")
    assert emb.input_name == "instantiated" and emb.tied
    np.testing.assert_array_equal(emb.input, model.get_input_embeddings().weight.detach().numpy())


def test_load_embeddings_refuses_random_rows(tokenizers, tmp_path):
    from safetensors.torch import load_file, save_file

    tok = tokenizers["llama"]
    model = build_model("llama", len(tok), {"hidden_size": 32}, False, special_token_ids(tok), 0)
    save_checkpoint(model, tok, tmp_path / "ckpt", {})
    # Unknown tensor names: instantiating would silently give random embeddings.
    file = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(file)
    save_file(
        {
            k.replace("embed_tokens", "tok_emb").replace("lm_head", "head"): v
            for k, v in state.items()
        },
        file,
        metadata={"format": "pt"},
    )
    with pytest.raises(ValueError, match="no tensor"):
        load_embeddings(tmp_path / "ckpt")


def test_agreement_check_names_sizes_and_paths(tokenizers, tmp_path):
    tok = tokenizers["gpt2"]
    model = build_model("gpt2", len(tok) - 10, {"hidden_size": 32}, True, special_token_ids(tok), 0)
    save_checkpoint(model, tok, tmp_path / "small", {})
    with pytest.raises(ValueError) as err:
        check_tokenizer_model_agreement(tok, tmp_path / "small")
    msg = str(err.value)
    assert str(len(tok)) in msg and str(len(tok) - 10) in msg and str(tmp_path / "small") in msg
    with pytest.raises(ValueError, match=str(len(tok) - 10)):
        check_tokenizer_model_agreement(tok, {"vocab_size": len(tok) - 10})
    assert check_tokenizer_model_agreement(tok, {"vocab_size": len(tok)})["padding_rows"] == 0


@pytest.mark.parametrize("family", ["llama", "bert", "t5"])
def test_short_pretraining_lowers_the_loss(tokenizers, corpus, family, tmp_path):
    tok = tokenizers[family]
    torch.set_num_threads(2)
    lines: list[str] = []
    model = build_model(family, len(tok), {}, family != "llama", special_token_ids(tok), 1)
    before = model.get_input_embeddings().weight.detach().clone()
    metrics = pretrain(model, tok, corpus["train"], corpus["valid"], TINY, seed=1, log=lines.append)
    assert metrics["valid_loss"] < metrics["initial_valid_loss"] - 0.5, metrics
    assert metrics["final_train_loss"] < metrics["initial_train_loss"] - 0.5, metrics
    assert metrics["steps"] == TINY["steps"] and metrics["tokens_per_second"] > 0
    assert any("step" in ln for ln in lines)
    assert not torch.equal(before, model.get_input_embeddings().weight)


def test_bert_loss_over_the_masked_positions_is_the_full_heads_loss(tokenizers, corpus):
    # The head over the masked positions only must give the loss and the gradient of the
    # model's own forward, which scores every position and ignores the unmasked ones.
    tok = tokenizers["bert"]
    model = build_model("bert", len(tok), {"hidden_size": 32}, True, special_token_ids(tok), 5)
    objective = _Objective("bert", tok, 64, mlm_probability=0.4)
    batch = objective.batch(objective.blocks(corpus["train"])[:4], torch.Generator().manual_seed(2))
    grads = []
    for loss_of in (lambda: model(**batch).loss, lambda: objective_loss(model, "bert", batch)):
        model.zero_grad()
        loss = loss_of()
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, full_grads), (masked, masked_grads) = grads
    torch.testing.assert_close(masked, full, rtol=1e-6, atol=1e-6)
    for a, b in zip(masked_grads, full_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_pretraining_is_reproducible(tokenizers, corpus):
    tok = tokenizers["t5"]
    cfg = {**TINY, "steps": 5}
    weights = []
    for _ in range(2):
        model = build_model("t5", len(tok), {"hidden_size": 32}, False, special_token_ids(tok), 3)
        pretrain(model, tok, corpus["train"], corpus["valid"], cfg, seed=3, log=lambda s: None)
        weights.append(model.get_input_embeddings().weight.detach().clone())
    assert torch.equal(weights[0], weights[1])


def test_pretraining_follows_the_one_lr_schedule(tokenizers, corpus):
    tok = tokenizers["llama"]
    cfg = {**TINY, "steps": 6, "warmup_steps": 3, "log_every": 1, "lr": 1e-3}
    lines: list[str] = []
    model = build_model("llama", len(tok), {"hidden_size": 32}, True, special_token_ids(tok), 3)
    pretrain(model, tok, corpus["train"], corpus["valid"], cfg, seed=3, log=lines.append)
    logged = [float(m) for m in re.findall(r" lr ([0-9.e+-]+) ", "\n".join(lines))]
    # after step k the scheduler holds the LR of step k (0-based): k/3 while warming up,
    # then half a cosine to 0 (transformers' schedule)
    expected = [3.33e-4, 6.67e-4, 1.0e-3, 7.5e-4, 2.5e-4, 0.0]
    assert logged == pytest.approx(expected, rel=2e-3, abs=1e-9)


def test_causal_blocks_never_cut_a_line_and_fill_counts_no_loss():
    from embtransfer.models.pretrain import FILL, _pack_lines

    rng = random.Random(0)
    docs = [[rng.randrange(3, 50) for _ in range(rng.randrange(1, 9))] for _ in range(200)]
    docs.append(list(range(3, 30)))  # longer than a block: cut into blocks of its own
    blocks = _pack_lines(docs, 2, 10)
    assert blocks.shape[1] == 10
    # Brute force: every line followed by sep is one contiguous run inside one block, in
    # order, except the long one; fill only ends blocks, and no block is fill only.
    rows = [[t for t in row if t != FILL] for row in blocks.tolist()]
    for row, full in zip(rows, blocks.tolist(), strict=True):
        assert row and full[: len(row)] == row
    stream = [t for row in rows for t in row]
    assert stream == [t for d in docs for t in [*d, 2]]
    starts = {0}
    for d in docs:
        starts.add(max(starts) + len(d) + 1)
    offset = 0
    for row in rows:
        assert offset in starts or offset >= sum(len(d) + 1 for d in docs[:-1])
        offset += len(row)

    class Tok:
        eos_token_id = 2

        def __len__(self) -> int:
            return 50

    from embtransfer.models.pretrain import _Objective

    batch = _Objective("llama", Tok(), 10).batch(blocks, torch.Generator())
    assert int((batch["input_ids"] == FILL).sum()) == 0
    assert torch.equal(batch["labels"] == -100, blocks == FILL)


def test_save_is_atomic(tokenizers, tmp_path):
    tok = tokenizers["gpt2"]
    model = build_model("gpt2", len(tok), {"hidden_size": 32}, True, special_token_ids(tok), 0)
    out = tmp_path / "ckpt"
    with pytest.raises(ValueError):  # NaN metrics are refused after the weights were written
        save_checkpoint(model, tok, out, {"loss": float("nan")})
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left behind either
    save_checkpoint(model, tok, out, {"loss": 1.0})
    with pytest.raises(ValueError):
        save_checkpoint(model, tok, out, {"loss": float("inf")})
    assert json.loads((out / "pretrain.json").read_text())["loss"] == 1.0  # old one intact


def test_model_schema_validates_entries():
    import jsonschema

    path = Path(__file__).parents[1] / "workflow" / "schemas" / "model.schema.yaml"
    schema = yaml.safe_load(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = [
        {
            "type": "mini",
            "family": "llama",
            "language": "src",
            "mix": {"ar": 0.05},
            "tie_word_embeddings": False,
            "tokenizer": {"algorithm": "bytelevel_bpe"},
            "train": {"steps": 400},
        },
        {"type": "hub", "repo_id": "google/gemma-2b", "revision": "main"},
        {"type": "local", "path": "/models/x", "trust_remote_code": False},
    ]
    bad = [
        {"type": "mini", "family": "llama", "language": "src", "train": {"stepz": 1}},
        {"type": "mini", "family": "roberta", "language": "src"},
        {"type": "mini", "family": "llama", "language": "src", "mix": {"ar": 1.5}},
        {"type": "mini", "family": "llama", "languages": {"src": 1}},
        {"type": "hub", "repo_id": "gpt2"},  # unpinned
        {"type": "local", "path": "x", "repo_id": "gpt2"},
        {"type": "other"},
    ]
    assert all(validator.is_valid(e) for e in good)
    assert not any(validator.is_valid(e) for e in bad)

    def walk(node: dict, where: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            assert "description" in sub or "$ref" in sub, f"{where}.{key} has no description"
            if isinstance(sub, dict) and "properties" in sub:  # records, not maps
                assert sub.get("additionalProperties") is False, f"{where}.{key}"
                walk(sub, f"{where}.{key}")

    for name in ("mini", "hub", "local"):
        assert schema["$defs"][name]["additionalProperties"] is False
        walk(schema["$defs"][name], name)


@pytest.mark.parametrize("family", ["llama", "gemma", "gpt2", "xglm", "bert", "t5"])
def test_null_tie_setting_takes_the_family_default(family):
    from embtransfer.models.pretrain import DEFAULT_TIED, build_model

    model = build_model(family, 300, {"hidden_size": 16, "num_layers": 1, "num_heads": 2,
                                      "intermediate_size": 32}, None,
                        {"bos": 1, "eos": 2, "pad": 0}, seed=0)
    out, inp = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert (out.data_ptr() == inp.data_ptr()) == DEFAULT_TIED[family]


def _numbers_corpus(path: Path) -> Path:
    rng = random.Random(3)
    lines = [f"In {rng.randint(1900, 2030)} the {rng.choice(['cat', 'dog'])} had "
             f"{rng.randint(10, 99)} eggs." for _ in range(3000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("algorithm", "family"),
                         [("bytelevel_bpe", "llama"), ("sentencepiece_bpe", "gemma")])
def test_split_digits_keeps_every_number_in_single_digits(algorithm, family, tmp_path):
    """As Llama 2's, Gemma's and Qwen's tokenizers: no token holds two digits, and text
    still round-trips. Without the option the same corpus gives multi-digit tokens."""
    path = _numbers_corpus(tmp_path / "train.txt")

    def multi_digit(tok) -> list[str]:
        pieces = set(tok.get_vocab()) - set(BYTE_TOKENS)  # <0xD3> names a byte, not digits
        return [t for t in pieces if sum(ch.isdigit() for ch in t) >= 2]

    assert multi_digit(train_tokenizer(algorithm, [str(path)], 400, family))
    tok = train_tokenizer(algorithm, [str(path)], 400, family, split_digits=True)
    assert multi_digit(tok) == []
    text = "In 1984 the cat had 42 eggs."
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_split_digits_is_refused_where_it_does_not_apply(tmp_path):
    path = _numbers_corpus(tmp_path / "train.txt")
    with pytest.raises(ValueError, match="tokenizer.split_digits.*wordpiece"):
        train_tokenizer("wordpiece", [str(path)], 400, "bert", split_digits=True)


def test_split_digits_default_follows_the_real_families():
    assert {f for f, split in DEFAULT_SPLIT_DIGITS.items() if split} == {"llama", "gemma"}


# ---------------------------------------------------------------- objective rates


def _rate_batches(tok, family, corpus, rate_key, rate, monkeypatch):
    """The batches a short pretraining of ``family`` trains on with ``train.rate_key=rate``
    (None: the key left null), through :func:`pretrain` itself, and its metrics."""
    from embtransfer.models import pretrain as pt

    batches: list[dict] = []
    original = pt._Objective.batch

    def recording(self, x, gen):
        batches.append(original(self, x, gen))
        return batches[-1]

    monkeypatch.setattr(pt._Objective, "batch", recording)
    steps = 3
    cfg = {
        **TINY,
        "steps": steps,
        "batch_size": 32,
        "seq_len": 64,
        "valid_batches": 1,
        rate_key: rate,
    }
    model = build_model(family, len(tok), {"hidden_size": 32}, True, special_token_ids(tok), 0)
    metrics = pretrain(
        model, tok, corpus["train"], corpus["valid"], cfg, seed=5, log=lambda s: None
    )
    # one validation batch before and one after the training steps
    assert len(batches) == steps + 2
    return batches[1:-1], metrics


@pytest.mark.parametrize("rate", [0.4, 0.6])
def test_mlm_probability_sets_the_share_of_predicted_positions(
    tokenizers, corpus, rate, monkeypatch
):
    tok = tokenizers["bert"]
    batches, metrics = _rate_batches(tok, "bert", corpus, "mlm_probability", rate, monkeypatch)
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    chosen = sum(int((b["labels"] != -100).sum()) for b in batches)
    # every position but [CLS]/[SEP] can be chosen (the packed text holds [SEP] too)
    maskable = sum(
        int((~torch.isin(b["labels"].where(b["labels"] != -100, b["input_ids"]), special)).sum())
        for b in batches
    )
    share, se = chosen / maskable, (rate * (1 - rate) / maskable) ** 0.5
    assert abs(share - rate) < 4 * se, (share, rate, maskable)
    assert metrics["mlm_probability"] == rate
    # the chosen are masked 80 %, replaced 10 %, kept 10 %, whatever the rate
    masked = sum(
        int(((b["labels"] != -100) & (b["input_ids"] == tok.mask_token_id)).sum()) for b in batches
    )
    assert abs(masked / chosen - 0.8) < 4 * (0.16 / chosen) ** 0.5


def test_null_mlm_probability_keeps_the_old_draw(tokenizers, corpus, monkeypatch):
    """Left null, the masks are BERT's 15 % drawn exactly as before the key existed: the
    positions ``torch.rand(shape) < 0.15`` of the same generator, batch after batch."""
    tok = tokenizers["bert"]
    batches, metrics = _rate_batches(tok, "bert", corpus, "mlm_probability", None, monkeypatch)
    assert metrics["mlm_probability"] == 0.15
    gen = torch.Generator().manual_seed(5 + 7)  # _train's mask generator
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    for b in batches:
        ids = b["labels"].where(b["labels"] != -100, b["input_ids"])
        expected = (torch.rand(ids.shape, generator=gen) < 0.15) & ~torch.isin(ids, special)
        torch.rand(ids.shape, generator=gen)  # the 80/10/10 roll
        torch.randint(len(tok), ids.shape, generator=gen)  # the random replacements
        assert torch.equal(b["labels"] != -100, expected)


@pytest.mark.parametrize("rate", [None, 0.3, 0.5])
def test_noise_density_sets_the_share_of_noised_positions(tokenizers, corpus, rate, monkeypatch):
    tok = tokenizers["t5"]
    batches, metrics = _rate_batches(tok, "t5", corpus, "noise_density", rate, monkeypatch)
    sentinels = torch.tensor(
        [tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens if t.startswith("<extra_id_")]
    )
    block = 64 - 1  # room for </s>
    expected = round(block * (0.15 if rate is None else rate))
    for b in batches:
        spans = torch.isin(b["input_ids"], sentinels).sum(dim=1)
        # each target: a sentinel per span, the noised tokens, </s>
        noised = (b["labels"] != -100).sum(dim=1) - spans - 1
        assert noised.tolist() == [expected] * len(noised)
        kept = (b["input_ids"] != tok.pad_token_id).sum(dim=1) - spans - 1
        assert (kept + noised).tolist() == [block] * len(noised)
    assert metrics["noise_density"] == (0.15 if rate is None else rate)


@pytest.mark.parametrize(
    ("family", "train", "needle"),
    [
        ("gpt2", {"mlm_probability": 0.4}, "train.mlm_probability is for the bert family"),
        ("bert", {"noise_density": 0.4}, "train.noise_density is for the t5 family"),
        ("bert", {"mlm_probability": 1.0}, "train.mlm_probability must lie strictly between"),
    ],
)
def test_a_rate_of_another_family_or_out_of_range_is_refused(
    tokenizers, corpus, family, train, needle
):
    tok = tokenizers[family]
    model = build_model(family, len(tok), {"hidden_size": 32}, True, special_token_ids(tok), 0)
    with pytest.raises(ValueError, match=needle):
        pretrain(
            model,
            tok,
            corpus["train"],
            corpus["valid"],
            {**TINY, **train},
            seed=0,
            log=lambda s: None,
        )


PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "embtransfer"


def test_rate_keys_are_written_once():
    """One assignment of RATE_KEYS in the package; the config check and the trainer read it."""
    from embtransfer.config import validation
    from embtransfer.models import mini_settings, pretrain

    homes = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^RATE_KEYS\b.*=", p.read_text(), re.M)
    ]
    assert homes == ["models/mini_settings.py"]
    assert validation.RATE_KEYS is mini_settings.RATE_KEYS is pretrain.RATE_KEYS


def test_mini_defaults_are_written_once(monkeypatch):
    """models/mini_settings.py holds a mini model's architecture and train defaults; the
    schema file writes none of them and the loaded schema takes them from there, so a
    changed default there changes both a validated config and build_model/pretrain."""
    from embtransfer.config.validation import load_schema, validate_config
    from embtransfer.models import mini_settings

    raw = yaml.safe_load((PACKAGE.parent / "schemas" / "model.schema.yaml").read_text())
    mini = raw["$defs"]["mini"]["properties"]
    for section, defaults in (
        ("architecture", mini_settings.DEFAULT_ARCHITECTURE),
        ("train", mini_settings.DEFAULT_TRAIN),
    ):
        props = mini[section]["properties"]
        assert set(props) == set(defaults), section
        assert not [k for k, v in props.items() if "default" in v], section
    monkeypatch.setitem(mini_settings.DEFAULT_ARCHITECTURE, "num_layers", 3)
    monkeypatch.setitem(mini_settings.DEFAULT_TRAIN, "steps", 123)
    loaded = load_schema()["$defs"]["model_mini"]["properties"]
    assert loaded["architecture"]["properties"]["num_layers"]["default"] == 3
    assert loaded["train"]["properties"]["steps"]["default"] == 123
    config = yaml.safe_load((PACKAGE.parents[1] / "config" / "config.yaml").read_text())
    config["models"]["probe"] = {"type": "mini", "family": "gpt2", "language": "en_mini"}
    spec = validate_config(config)["models"]["probe"]
    assert spec["architecture"] == {**mini_settings.DEFAULT_ARCHITECTURE}
    assert spec["train"] == {**mini_settings.DEFAULT_TRAIN}
    model = build_model("gpt2", 40, None, None, {"eos": 1}, seed=0)
    assert model.config.n_layer == 3


def test_one_builder_makes_every_hugging_face_config():
    """Only models/architectures.py constructs a *Config; it puts each size where the
    family's class reads it (a built model's shapes are the architecture's)."""
    from embtransfer.models.architectures import FAMILIES, model_class, model_config

    builders = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if re.search(r"transformers\.\w+Config\(", p.read_text())
    ]
    assert builders == [], builders  # the classes are called through FAMILIES only
    arch = {
        "hidden_size": 24,
        "num_layers": 2,
        "num_heads": 3,
        "num_kv_heads": 1,
        "intermediate_size": 40,
        "max_position_embeddings": 32,
        "dropout": 0.25,
    }
    for family in FAMILIES:
        common = {"vocab_size": 50, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
        config = model_config(family, arch, common)
        model = model_class(family)(config)
        emb = model.get_input_embeddings().weight
        assert tuple(emb.shape) == (50, 24), family
        drops = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} - {0.0}
        if family in ("llama", "gemma", "gemma3", "xglm"):  # dropout by a functional call
            assert config.attention_dropout == 0.25
        else:
            assert drops == {0.25}, family
        params = sum(p.numel() for p in model.parameters())
        wider = model_class(family)(
            model_config(family, {**arch, "intermediate_size": 80}, common)
        )
        assert sum(p.numel() for p in wider.parameters()) > params, family
        if family in ("llama", "gemma", "gemma3"):
            assert config.num_key_value_heads == 1 and config.head_dim == 8
