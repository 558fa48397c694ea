"""Train the miniature world's tokenizers with the ``tokenizers`` library.

Each algorithm mirrors the ``tokenizer.json`` pipeline of a real model family so
that later stages (canonical tokens, overlap, special-token roles) meet the same
shapes of vocabulary they meet on hub models:

- ``bytelevel_bpe``: GPT-2 (``Ġ`` marks, all 256 bytes in the alphabet)
- ``sentencepiece_bpe``: Llama/Gemma (``▁`` marks, ``<0x00>``..``<0xFF>`` byte fallback)
- ``wordpiece``: BERT (``##`` continuations), cased and accent-preserving
- ``unigram``: T5 (``▁`` marks, ``</s>`` appended, ``<extra_id_N>`` sentinels)

Special tokens are chosen by *family* (gpt2, llama, gemma, xglm, bert, t5), not by
algorithm, so a Llama-family source LLM may use a byte-level BPE like Llama 3.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field

import sentencepiece as spm
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import PreTrainedTokenizerFast

ALGORITHMS = ("bytelevel_bpe", "sentencepiece_bpe", "wordpiece", "unigram")
FAMILIES = ("gpt2", "llama", "gemma", "xglm", "bert", "t5")

# The algorithm a family's real tokenizer uses; the config may override it.
DEFAULT_ALGORITHM = {
    "gpt2": "bytelevel_bpe",
    "llama": "sentencepiece_bpe",
    "gemma": "sentencepiece_bpe",
    "xglm": "sentencepiece_bpe",
    "bert": "wordpiece",
    "t5": "unigram",
}

# Whether a family's real tokenizer cuts numbers into single digits (Llama 2's and
# Gemma's SentencePiece models do, as Qwen's do); the config may override it.
DEFAULT_SPLIT_DIGITS = {family: family in ("llama", "gemma") for family in FAMILIES}

# T5 span corruption needs one sentinel per masked span; 20 covers 15% noise of
# sequences up to ~400 tokens at mean span length 3.
N_EXTRA_IDS = 20
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


@dataclass(frozen=True)
class Specials:
    """Special-token strings of a family, by role (None: the role is unset)."""

    bos: str | None = None
    eos: str | None = None
    unk: str | None = None
    pad: str | None = None
    mask: str | None = None
    cls: str | None = None
    sep: str | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)

    def roles(self) -> dict[str, str]:
        names = ("bos", "eos", "unk", "pad", "mask", "cls", "sep")
        return {f"{n}_token": getattr(self, n) for n in names if getattr(self, n) is not None}


FAMILY_SPECIALS: dict[str, Specials] = {
    # Real GPT-2 uses one token for bos/eos/unk and has no pad.
    "gpt2": Specials(bos="<|endoftext|>", eos="<|endoftext|>", unk="<|endoftext|>"),
    "llama": Specials(bos="<s>", eos="</s>", unk="<unk>"),
    "gemma": Specials(bos="<s>", eos="</s>", unk="<unk>", pad="<pad>"),
    "xglm": Specials(bos="<s>", eos="</s>", unk="<unk>", pad="<pad>"),
    "bert": Specials(unk="[UNK]", pad="[PAD]", cls="[CLS]", sep="[SEP]", mask="[MASK]"),
    "t5": Specials(
        eos="</s>",
        unk="<unk>",
        pad="<pad>",
        extra=tuple(f"<extra_id_{i}>" for i in range(N_EXTRA_IDS)),
    ),
}

# Id order of the specials at the start of the vocab, as in the real models
# (Llama: <unk> 0, <s> 1, </s> 2; Gemma: <pad> 0, </s> 1, <s> 2, <unk> 3; T5: <pad>
# 0, </s> 1, <unk> 2; BERT: [PAD] 0 ... GPT-2 puts its one special last, but
# first is harmless and keeps byte ids aligned across families).
_ID_ORDER: dict[str, tuple[str, ...]] = {
    "gpt2": ("<|endoftext|>",),
    "llama": ("<unk>", "<s>", "</s>"),
    "gemma": ("<pad>", "</s>", "<s>", "<unk>"),
    "xglm": ("<s>", "<pad>", "</s>", "<unk>"),
    "bert": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "t5": ("<pad>", "</s>", "<unk>"),
}


def family_specials(family: str) -> Specials:
    if family not in FAMILY_SPECIALS:
        raise ValueError(f"unknown model family {family!r}; expected one of {FAMILIES}")
    return FAMILY_SPECIALS[family]


def _iter_lines(files: Iterable[str]) -> Iterable[str]:
    # Read in the given order so the trainer sees the same stream every time.
    for path in files:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.rstrip("\n")
                if line:
                    yield line


def _post_processor(family: str, spec: Specials) -> processors.PostProcessor | None:
    """The special tokens the family adds around a sequence when encoding."""
    ids = {tok: i for i, tok in enumerate(_ID_ORDER[family])}
    if family == "bert":
        return processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
        )
    if family == "t5":
        return processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", ids["</s>"])]
        )
    if family in ("llama", "gemma"):
        # Llama and Gemma prepend <bos> and add no <eos>.
        return processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", ids["<s>"])]
        )
    if family == "xglm":
        # XGLM prepends </s> as its document separator.
        return processors.TemplateProcessing(
            single="</s> $A", pair="</s> $A </s> </s> $B", special_tokens=[("</s>", ids["</s>"])]
        )
    return None  # gpt2 adds nothing


GPT2_SPLIT_WITH_MARKS = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}[\p{L}\p{M}]*| ?\p{N}+| ?[^\s\p{L}\p{M}\p{N}]+"
    r"|\s+(?!\S)|\s+"
)


def _bytelevel(vocab_size: int, specials: list[str]) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE())
    # GPT-2's split pattern, except that combining marks (\p{M}) stay inside
    # words: the stock `\p{L}+` cuts NFD text at every diacritic, and no merge
    # could then span a letter and its mark.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GPT2_SPLIT_WITH_MARKS), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tok, trainer


def _digits_first(pre: pre_tokenizers.PreTokenizer) -> pre_tokenizers.PreTokenizer:
    # Digits split off one by one before the family's own splitting, so no merge
    # ever joins two digits.
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre])


def _metaspace_bpe(
    vocab_size: int, specials: list[str], prepend: bool
) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE(unk_token=None))
    # split=True: like SentencePiece's split_by_whitespace, no piece crosses a word start.
    scheme = "first" if prepend else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
    # Room for the 256 byte tokens inserted after training.
    trainer = trainers.BpeTrainer(
        vocab_size=max(vocab_size - 256, len(specials) + 1),
        special_tokens=specials,
        show_progress=False,
    )
    return tok, trainer


def _with_byte_fallback(tok: Tokenizer, specials: list[str], unk: str, prepend: bool) -> Tokenizer:
    """Rebuild a trained BPE as Llama/Gemma have it: specials, 256 byte tokens, the rest.

    The byte tokens are ordinary vocabulary (not added tokens), so decoding with
    ``skip_special_tokens`` keeps them and ByteFallback turns them back into bytes.
    """
    state = json.loads(tok.to_str())
    trained: dict[str, int] = state["model"]["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in
              state["model"]["merges"]]
    vocab: dict[str, int] = {}
    for piece in specials + BYTE_TOKENS:
        vocab.setdefault(piece, len(vocab))
    for piece, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    out = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token=unk, byte_fallback=True, fuse_unk=True)
    )
    scheme = "first" if prepend else "never"
    out.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
    steps: list[decoders.Decoder] = [
        decoders.Replace("▁", " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
    ]
    if prepend:
        steps.append(decoders.Strip(content=" ", left=1, right=0))  # drop the added prefix space
    out.decoder = decoders.Sequence(steps)
    return out


def _bert_normalizer() -> normalizers.Normalizer:
    # Cased and accent-preserving: the target languages' diacritics and Arabic-block
    # letters must survive normalisation.
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )


def _train_wordpiece(
    lines: Iterable[str], vocab_size: int, specials: list[str], unk: str
) -> Tokenizer:
    """A BERT WordPiece vocabulary, trained deterministically.

    ``WordPieceTrainer`` numbers its ``##`` symbols in hash-map order, so its
    vocabulary changes from run to run. The same BPE counting without a prefix is
    deterministic: mark word *starts* with ``▁`` instead, then rename the pieces
    (``▁ab`` -> ``ab``, ``ab`` -> ``##ab``). Every character is kept both as a
    word start and as a continuation, as in BERT's vocabularies.
    """
    counter = Tokenizer(models.BPE())
    counter.normalizer = _bert_normalizer()
    counter.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.BertPreTokenizer(),
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False
    )
    counter.train_from_iterator(lines, trainer=trainer)
    state = json.loads(counter.to_str())["model"]
    pieces = [p for p, _ in sorted(state["vocab"].items(), key=lambda kv: kv[1])]
    n_merged = len(state["merges"])
    alphabet = [p for p in pieces[: len(pieces) - n_merged] if p not in specials and p != "▁"]
    merged = pieces[len(pieces) - n_merged :]

    vocab: dict[str, int] = {}
    for piece in specials + alphabet + [f"##{c}" for c in alphabet]:
        vocab.setdefault(piece, len(vocab))
    for piece in merged:
        if len(vocab) >= vocab_size:
            break  # the latest merges are the rarest; longest-match needs no intermediates
        name = piece[1:] if piece.startswith("▁") else f"##{piece}"
        if name:
            vocab.setdefault(name, len(vocab))

    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=unk, continuing_subword_prefix="##"))
    tok.normalizer = _bert_normalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def _t5_normalizer() -> normalizers.Normalizer:
    # T5's normaliser collapses runs of spaces; its precompiled NFKC part is left
    # out because it would recompose the diacritics the target languages use.
    return normalizers.Sequence(
        [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip(left=False, right=True)]
    )


def _train_unigram(
    lines: Iterable[str], vocab_size: int, specials: list[str], unk: str
) -> Tokenizer:
    """A T5 Unigram vocabulary, trained with SentencePiece from explicit seeds.

    Unigram training starts from a large set of seed pieces and prunes it by EM.
    Both ``tokenizers``' ``UnigramTrainer`` and SentencePiece take the seeds from
    the internal nodes of a suffix array, i.e. from substrings that occur with
    at least two different right contexts (``tokenizers``: among the *distinct*
    words, whatever their counts). In a corpus with few word types, a frequent
    word that is always followed by a space (or is no prefix of another word) is
    then never a seed, so it can only be spelt in short pieces; EM's sparse prior
    leaves few pieces alive and the vocabulary stops short. So the seeds are all
    in-word substrings (``▁`` only at the start) weighted by their true counts,
    fed to SentencePiece's trainer; the vocabulary is then topped up to the
    requested size with the best remaining seeds, scored below every trained
    piece so they never change how trained words are segmented.
    Ids 0..2 are ``<pad>``, ``</s>``, ``<unk>`` in both libraries.
    """
    norm = _t5_normalizer()
    text = [t for t in (norm.normalize_str(line) for line in lines) if t.strip()]
    ids = {t: i for i, t in enumerate(specials)}
    seeds = _unigram_seeds(text, max_piece_length=16)
    spm.set_random_generator_seed(0)
    model = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        seed_file = os.path.join(tmp, "seeds.tsv")
        with open(seed_file, "w", encoding="utf-8") as fh:
            fh.writelines(f"{piece}\t{score}\n" for piece, score in seeds)
        _spm_train(spm, text, model, vocab_size, ids, unk, seed_file)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    if [sp.id_to_piece(i) for i in range(len(specials))] != specials:
        raise RuntimeError("SentencePiece put its special pieces on unexpected ids")
    vocab: list[tuple[str, float]] = [(t, 0.0) for t in specials]
    for i in range(len(specials), sp.get_piece_size()):
        vocab.append((sp.id_to_piece(i), round(float(sp.get_score(i)), 6)))
    # Top up with the best unused seeds, each scored below the last trained piece.
    have = {piece for piece, _ in vocab}
    low = min((score for _, score in vocab[len(specials) :]), default=0.0)
    extra = (piece for piece, _ in seeds if piece not in have)
    for k, piece in zip(range(vocab_size - len(vocab)), extra, strict=False):
        vocab.append((piece, round(low - 1.0 - k * 1e-4, 6)))

    tok = Tokenizer(models.Unigram(vocab, unk_id=ids[unk], byte_fallback=False))
    tok.normalizer = _t5_normalizer()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always", split=True
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tok


def _unigram_seeds(text: list[str], max_piece_length: int) -> list[tuple[str, int]]:
    """Every in-word substring (2+ characters, ``▁`` marking a word start) that occurs
    at least twice, scored count x length as SentencePiece scores its seeds."""
    words: dict[str, int] = {}
    for line in text:
        for word in line.split(" "):
            if word:
                words["▁" + word] = words.get("▁" + word, 0) + 1
    counts: dict[str, int] = {}
    for word, n in words.items():
        for i in range(len(word)):
            for j in range(i + 2, min(len(word), i + max_piece_length) + 1):
                counts[word[i:j]] = counts.get(word[i:j], 0) + n
    seeds = [(piece, n * len(piece)) for piece, n in counts.items() if n >= 2]
    seeds.sort(key=lambda ps: (-ps[1], ps[0]))
    return seeds


def _spm_train(
    spm, text: list[str], out: io.BytesIO, vocab_size: int, ids: dict[str, int], unk: str,
    seed_file: str,
) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=out,
        seed_sentencepieces_file=seed_file,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # a small corpus may support fewer pieces
        character_coverage=1.0,  # every character of the target scripts
        normalization_rule_name="identity",  # keep NFD combining marks as they are
        remove_extra_whitespaces=False,  # done by the normaliser above
        add_dummy_prefix=True,  # Metaspace prepend_scheme="always"
        split_by_whitespace=True,
        max_sentence_length=1 << 20,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        pad_id=ids["<pad>"],
        eos_id=ids["</s>"],
        unk_id=ids[unk],
        bos_id=-1,
        pad_piece="<pad>",
        eos_piece="</s>",
        unk_piece=unk,
        minloglevel=2,
    )


def train_tokenizer(
    algorithm: str, files: list[str], vocab_size: int, family: str, *, split_digits: bool = False
) -> PreTrainedTokenizerFast:
    """Train a tokenizer on ``files`` and wrap it with the family's special tokens.

    ``vocab_size`` is the final size including special tokens, byte tokens and
    sentinels (the trainer may stop short on a small corpus). ``split_digits`` cuts
    every number into single digits before BPE, as Llama's, Gemma's and Qwen's
    tokenizers do (BPE algorithms only).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown tokenizer algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if split_digits and algorithm not in ("bytelevel_bpe", "sentencepiece_bpe"):
        raise ValueError(
            f"tokenizer.split_digits is for the BPE algorithms, not {algorithm!r}: "
            "set it to false or null for this model"
        )
    spec = family_specials(family)
    specials = list(_ID_ORDER[family])
    if not files:
        raise ValueError("train_tokenizer needs at least one training file")

    if algorithm == "bytelevel_bpe":
        tok, trainer = _bytelevel(vocab_size, specials)
    elif algorithm == "sentencepiece_bpe":
        tok, trainer = _metaspace_bpe(vocab_size, specials, prepend=family != "gemma")

    if algorithm == "wordpiece":
        tok = _train_wordpiece(_iter_lines(files), vocab_size, specials, spec.unk or "[UNK]")
    elif algorithm == "unigram":
        tok = _train_unigram(
            _iter_lines(files), vocab_size - len(spec.extra), specials, spec.unk or "<unk>"
        )
    else:
        if split_digits:
            tok.pre_tokenizer = _digits_first(tok.pre_tokenizer)
        tok.train_from_iterator(_iter_lines(files), trainer=trainer)
    if algorithm == "sentencepiece_bpe":
        tok = _with_byte_fallback(tok, specials, spec.unk or "<unk>", prepend=family != "gemma")
        if split_digits:
            tok.pre_tokenizer = _digits_first(tok.pre_tokenizer)
    # Make sure the family's specials exist and are never split, whatever the algorithm.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if spec.extra:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec.extra])
    post = _post_processor(family, spec)
    if post is not None:
        ids = {t: tok.token_to_id(t) for t in specials}
        if any(ids[t] != i for i, t in enumerate(specials)):
            raise RuntimeError(f"special tokens landed on unexpected ids: {ids}")
        tok.post_processor = post
    elif algorithm == "bytelevel_bpe":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    kwargs: dict = dict(spec.roles())
    if spec.extra:
        kwargs["extra_special_tokens"] = list(spec.extra)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
        **kwargs,
    )
    # Decoder-only models pad on the left at generation time, like the real ones.
    wrapped.padding_side = "right" if family in ("bert", "t5") else "left"
    return wrapped


def special_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """Role -> id for the roles the tokenizer sets (``bos_token_id`` ... ``sep_token_id``)."""
    out: dict[str, int] = {}
    for role in ("bos", "eos", "unk", "pad", "mask", "cls", "sep"):
        tok_id = getattr(tokenizer, f"{role}_token_id", None)
        if tok_id is not None:
            out[f"{role}_token_id"] = int(tok_id)
    return out
