"""The Table 7 PLMs' tokenizer formats, built here in their real file formats.

PhoBERT (fairseq BPE: ``vocab.txt`` + ``bpe.codes``, slow ``PhobertTokenizer``),
AraBERT v2 (WordPiece ``vocab.txt`` over Farasa-segmented text, ``never_split``),
AraT5 / ViT5 (SentencePiece ``spiece.model``, ``T5Tokenizer``) and German GPT-2 /
AraGPT2 (byte-level BPE ``vocab.json`` + ``merges.txt``, ``GPT2Tokenizer``).
Each goes through the vocab stage (canonical forms checked against the
tokenizer's own tokenisation), overlap and coverage, and into a transferred
checkpoint whose tokenizer must tokenize as the PLM's own does.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from embtransfer.models.loading import is_fast, load_tokenizer
from embtransfer.transfer.transferred_model import write_transferred_checkpoint
from embtransfer.vocab.canonical import vocab_table
from embtransfer.vocab.overlap import compute_overlap, count_tokens, coverage

# Word-segmented Vietnamese (VnCoreNLP style: syllables of a word joined by "_")
VI = [
    "Tôi là sinh_viên trường đại_học Bách_khoa Hà_Nội .",
    "Chúng_tôi học tiếng Việt và tiếng Anh mỗi ngày .",
    "Thành_phố Hồ_Chí_Minh là thành_phố lớn nhất Việt_Nam .",
    "Hôm_nay trời đẹp , chúng_tôi đi học ở thư_viện .",
    "Người Việt_Nam rất thân_thiện và hiếu_khách .",
]
# Farasa-segmented Arabic (AraBERT v2 pre-processing: "+" marks on segments)
AR_PREFIX = ["ال+", "و+", "ب+", "ل+", "ف+", "ك+", "س+"]
AR_SUFFIX = ["+ها", "+ه", "+هم", "+ات", "+ون", "+ين", "+ة", "+ي", "+نا"]
AR_WORDS = ["كتاب", "مدرس", "طالب", "مدين", "بيت", "قلم", "جميل", "كبير", "عرب", "لغ"]
AR = [
    "و+ ال+ كتاب +ها جميل",
    "ال+ طالب +ة في ال+ مدين +ة ال+ كبير +ة",
    "ب+ ال+ قلم كتب ال+ مدرس ال+ درس",
    "ف+ ال+ بيت +هم كبير و+ جميل",
    "ال+ لغ +ة ال+ عرب +ي +ة جميل +ة",
]
DE = ["Die Schule ist groß und schön .", "Wir lernen jeden Tag Deutsch ."]


def learn_fairseq_bpe(lines: list[str], merges: int) -> tuple[list[tuple[str, str]], Counter]:
    """subword-nmt style BPE: merges over words whose last symbol carries "</w>"."""
    words = collections.Counter(w for line in lines for w in line.split())
    vocab = {tuple(w[:-1]) + (w[-1] + "</w>",): c for w, c in words.items()}
    learned = []
    for _ in range(merges):
        pairs: Counter = collections.Counter()
        for symbols, c in vocab.items():
            for a, b in zip(symbols, symbols[1:], strict=False):
                pairs[a, b] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        learned.append(best)
        new = {}
        for symbols, c in vocab.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new[tuple(out)] = c
        vocab = new
    pieces: Counter = collections.Counter()
    for symbols, c in vocab.items():
        for j, s in enumerate(symbols):
            pieces[s.removesuffix("</w>") if j == len(symbols) - 1 else s + "@@"] += c
    return learned, pieces


Counter = collections.Counter


def write_phobert(pho: Path, lines: list[str], merges: int) -> Path:
    """A PhoBERT-format tokenizer (``vocab.txt`` + ``bpe.codes``) learned on ``lines``."""
    from transformers import PhobertTokenizer

    pho.mkdir(parents=True, exist_ok=True)
    learned, pieces = learn_fairseq_bpe(lines, merges)
    # every single character (both forms) so that any input of these letters is covered
    for ch in {ch for line in lines for ch in line if not ch.isspace()}:
        pieces.setdefault(ch, 1)
        pieces.setdefault(ch + "@@", 1)
    (pho / "vocab.txt").write_text("".join(f"{p} {c}\n" for p, c in pieces.most_common()))
    (pho / "bpe.codes").write_text("".join(f"{a} {b} 1\n" for a, b in learned))
    PhobertTokenizer(str(pho / "vocab.txt"), str(pho / "bpe.codes")).save_pretrained(pho)
    return pho


@pytest.fixture(scope="module")
def plms(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plms")
    out = {}
    # PhoBERT: vocab.txt ("piece count", fairseq dictionary) + bpe.codes ("a b count")
    out["phobert"] = write_phobert(root / "phobert", VI * 3, 120)

    # AraBERT v2: WordPiece vocab.txt with Farasa segment tokens kept whole (never_split)
    ara = root / "arabert"
    ara.mkdir()
    letters = sorted({ch for line in AR for ch in line if ch.isalpha()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "+", "."] + AR_PREFIX + AR_SUFFIX
    vocab += AR_WORDS + ["في", "كتب", "درس"] + letters + ["##" + ch for ch in letters]
    (ara / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (ara / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": False, "tokenize_chinese_chars": True,
        "never_split": AR_PREFIX + AR_SUFFIX,
    }, ensure_ascii=False))
    out["arabert"] = ara

    # AraT5 / ViT5: SentencePiece model
    spm = pytest.importorskip("sentencepiece")
    t5 = root / "vit5"
    t5.mkdir()
    text = root / "vi.txt"
    text.write_text("\n".join(s.replace("_", " ") for s in VI * 20) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(t5 / "spiece"), vocab_size=400, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, byte_fallback=True,
        minloglevel=2, hard_vocab_limit=False,
    )
    from transformers import T5Tokenizer

    (t5 / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer",
                                                         "extra_ids": 10}))
    T5Tokenizer.from_pretrained(str(t5)).save_pretrained(t5)
    out["vit5"] = t5

    # German GPT-2 / AraGPT2: byte-level BPE vocab.json + merges.txt
    gpt = root / "gpt2_de"
    gpt.mkdir()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(DE * 20 + AR * 5, trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"]))
    bpe.model.save(str(gpt))
    from transformers import GPT2Tokenizer

    (gpt / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    GPT2Tokenizer.from_pretrained(str(gpt)).save_pretrained(gpt)
    out["gpt2_de"] = gpt
    return out


SAMPLES = {"phobert": VI, "arabert": AR, "vit5": [s.replace("_", " ") for s in VI],
           "gpt2_de": DE + AR}
SCHEMES = {"phobert": "fairseq_bpe", "arabert": "wordpiece", "vit5": "sentencepiece",
           "gpt2_de": "byte_level"}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_loads_and_scheme(plms, name):
    tok = load_tokenizer(plms[name])
    # only PhoBERT has no fast tokenizer in transformers: it is used slow
    assert is_fast(tok) == (name != "phobert")
    assert vocab_table(tok).attrs["scheme"] == SCHEMES[name]


def test_phobert_canonical_form(plms):
    """``@@`` pieces of a word join into the word; ``_`` stands for the syllable space."""
    tok = load_tokenizer(plms["phobert"])
    table = vocab_table(tok)
    by_token = table.set_index("token")
    assert by_token.loc["Hà_Nội", "canonical"] == "▁Hà Nội"
    for line in VI:
        for word in line.split():
            pieces = tok.tokenize(word)
            assert all(p.endswith("@@") for p in pieces[:-1]) and not pieces[-1].endswith("@@")
            ids = tok.convert_tokens_to_ids(pieces)
            assert b"".join(bytes(table["bytes"].iat[i]) for i in ids) == (
                word.replace("_", " ").encode()
            )
            assert table["start"].iat[ids[0]]


def test_arabert_farasa_marks(plms):
    """The fast tokenizer keeps Farasa segments whole, as the slow (never_split) one does."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    tok = load_tokenizer(plms["arabert"])
    slow = BertTokenizerLegacy(str(plms["arabert"] / "vocab.txt"), do_lower_case=False,
                               never_split=AR_PREFIX + AR_SUFFIX)
    for line in AR:
        assert tok.tokenize(line) == slow.tokenize(line), line
    table = vocab_table(tok)
    by_token = table.set_index("token")
    assert (bytes(by_token.loc["ال+", "bytes"]), bool(by_token.loc["ال+", "start"])) == (
        "ال".encode(), True)
    assert (bytes(by_token.loc["+ها", "bytes"]), bool(by_token.loc["+ها", "start"])) == (
        "ها".encode(), False)
    assert bytes(by_token.loc["+", "bytes"]) == b"+"
    # segments rebuild the unsegmented words: "و+ ال+ كتاب +ها" -> "والكتابها"; a
    # suffix's start flag is False, and the segment after a prefix joins it too
    ids = tok(AR[0], add_special_tokens=False)["input_ids"]
    words: list[bytes] = []
    prev = None
    for i in ids:
        raw, start = bytes(table["bytes"].iat[i]), bool(table["start"].iat[i])
        after_prefix = prev is not None and table["token"].iat[prev].endswith("+")
        if start and not after_prefix:
            words.append(raw)
        else:
            words[-1] += raw
        prev = i
    assert words == [w.encode() for w in ["والكتابها", "جميل"]]


@pytest.mark.parametrize("name", ["vit5", "gpt2_de"])
def test_canonical_bytes_rebuild_text(plms, name):
    tok = load_tokenizer(plms[name])
    table = vocab_table(tok)
    for line in SAMPLES[name]:
        ids = tok(line, add_special_tokens=False)["input_ids"]
        text = b"".join((b" " if table["start"].iat[i] else b"") + bytes(table["bytes"].iat[i])
                        for i in ids).decode()
        assert re.sub(" +", " ", text).strip() == line, line


@pytest.mark.parametrize("name", list(SAMPLES))
def test_overlap_and_coverage_counts(plms, name, tmp_path, capsys):
    source = load_tokenizer(plms["gpt2_de"])
    target = load_tokenizer(plms[name])
    tgt = vocab_table(target)
    overlap = compute_overlap(vocab_table(source), tgt, match="fuzzy")
    corpus = tmp_path / "valid.txt"
    corpus.write_text("\n".join(SAMPLES[name]) + "\n")
    counts = count_tokens(target, corpus)
    assert counts.sum() == sum(len(target(s, add_special_tokens=False)["input_ids"])
                               for s in SAMPLES[name])
    cov = coverage(overlap, tgt, counts)
    with capsys.disabled():
        print(f"\n{name}: copied {cov['copied']} / {cov['target_vocab_size']} "
              f"({cov['coverage_pct']:.1f}%), corpus coverage {cov['corpus_coverage_pct']:.1f}%")
    assert 0 < cov["copied"] <= cov["target_vocab_size"]


@pytest.fixture(scope="module")
def source_model(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("source")
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.mark.parametrize("name", list(SAMPLES))
def test_transferred_checkpoint_tokenizes_like_the_plm(plms, name, source_model, tmp_path):
    target = load_tokenizer(plms[name])
    n = len(target)
    rows = np.random.default_rng(0).standard_normal((n, 16)).astype(np.float32)
    out = tmp_path / "ckpt"
    write_transferred_checkpoint(source_model, plms[name], rows, rows + 1, out)
    saved = AutoTokenizer.from_pretrained(str(out))
    reference = load_tokenizer(plms[name])
    for line in SAMPLES[name]:
        assert saved.tokenize(line) == reference.tokenize(line), line
        assert saved(line)["input_ids"] == reference(line)["input_ids"], line


def test_fast_wrapper_of_a_plain_backend_is_untouched():
    """A tokenizers-backed tokenizer without files on disk stays as it is."""
    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert is_fast(tok)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_fasttext_corpus_and_fertility_take_every_format(plms, name, tmp_path):
    """The FOCUS token corpus and the fertility count run on each format, slow PhoBERT too."""
    from embtransfer.evaluation.zeroshot import fertility
    from embtransfer.fasttext.vectors import tokenize_for_fasttext

    tok = load_tokenizer(plms[name])
    text = tmp_path / "text.txt"
    text.write_text("\n".join(SAMPLES[name]) + "\n")
    tokenize_for_fasttext(tok, text, tmp_path / "tokens.txt")
    lines = (tmp_path / "tokens.txt").read_text().splitlines()
    assert [line.split() for line in lines] == [tok.tokenize(s) for s in SAMPLES[name]]
    counts = fertility(plms[name], text)
    assert counts["tokens"] == sum(len(tok.tokenize(s)) for s in SAMPLES[name])


@pytest.mark.slow
def test_vietnamese_bert_column_runs_in_the_workflow(tmp_path):
    """A PhoBERT-format target PLM (slow tokenizer, RoBERTa weights) through the workflow.

    The paper grid's Vietnamese BERT column (vinai/phobert-base-v2) needs load_tokenizer
    to take slow tokenizers: refusing them stops the column at the vocab stage.
    """
    import yaml
    from test_workflow import copy_workflow, small_config, snakemake
    from transformers import PhobertTokenizer, RobertaConfig, RobertaForMaskedLM

    workdir = copy_workflow(tmp_path / "wf")
    config = small_config()
    config["sources"] = ["llama_mini"]
    config["targets"] = {"vi_mini": ["t5_vi_mini"]}
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    snakemake(workdir, "--cores", "2", "results/corpus/vi_mini/train.txt")
    lines = (workdir / "results/corpus/vi_mini/train.txt").read_text().splitlines()[:2000]
    plm = write_phobert(tmp_path / "phobert_vi", lines, 300)
    tok = PhobertTokenizer.from_pretrained(str(plm))
    RobertaForMaskedLM(RobertaConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=66, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )).save_pretrained(plm)

    config["models"]["phobert_vi"] = {"type": "local", "path": str(plm)}
    config["targets"] = {"vi_mini": ["phobert_vi"]}
    config["transfer"] = {"methods": ["salt", "focus"]}
    config["lapt"]["select"] = [{"sources": ["llama_mini"], "targets": ["phobert_vi"],
                                 "methods": ["salt"]}]
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    wanted = [f"results/seed1234/transfer/vi_mini/llama_mini/phobert_vi/{m}"
              for m in ("salt", "focus")]
    snakemake(workdir, "--cores", "2", *wanted,
              "results/overlap/llama_mini/phobert_vi.coverage.json")
    cov = json.loads((workdir / "results/overlap/llama_mini/phobert_vi.coverage.json").read_text())
    print(f"llama_mini -> phobert_vi: {cov}")
    assert cov["copied"] > 0
    for path in wanted:
        saved = AutoTokenizer.from_pretrained(str(workdir / path))
        assert type(saved).__name__ == "PhobertTokenizer"
        assert saved.tokenize(lines[0]) == tok.tokenize(lines[0])
