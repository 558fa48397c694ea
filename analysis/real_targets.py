"""The real target tokenizers the calibration table measures (analysis/real_shared_tokens.py):
three families trained with `tokenizers` on the `make real-data` corpora, less their
held-out lines, at each family's usual vocabulary size."""

from __future__ import annotations

from pathlib import Path

from embtransfer.core import paths

REPO = Path(__file__).resolve().parents[1]
LANGS = ("de", "ar", "vi")
FAMILIES = ("bytelevel_bpe", "wordpiece", "unigram")
VOCAB_SIZE = {"bytelevel_bpe": 50_000, "wordpiece": 30_000, "unigram": 32_000}


def split_corpus(lang: str) -> tuple[list[str], list[str]]:
    """(training lines, held-out lines) of the real-data corpus of ``lang``: its first 2 %,
    at least 200 lines, are held out."""
    path = REPO / paths.REAL_CORPUS.fill(name=lang)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make real-data` first")
    lines = path.read_text(encoding="utf-8").splitlines()
    held_out = max(200, len(lines) // 50)
    return lines[held_out:], lines[:held_out]


def train(family: str, text: list[str], size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if family == "bytelevel_bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, show_progress=False, special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        roles = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    elif family == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=size, show_progress=False,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        roles = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "pad_token": "[PAD]", "mask_token": "[MASK]"}
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=size, unk_token="<unk>", show_progress=False,
                                          special_tokens=["<pad>", "</s>", "<unk>"])
        roles = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}
    tok.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
