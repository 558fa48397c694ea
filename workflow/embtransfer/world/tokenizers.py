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

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

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


def _unigram(vocab_size: int, specials: list[str], unk: str) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.Unigram())
    # T5's normaliser collapses runs of spaces; its precompiled NFKC part is left
    # out because it would recompose the diacritics the target languages use.
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip(left=False, right=True)]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always", split=True
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        unk_token=unk,
        max_piece_length=16,
        show_progress=False,
    )
    return tok, trainer


def _canonical_unigram(tok: Tokenizer, specials: list[str]) -> None:
    """Make a trained Unigram model independent of hash-map order and float noise.

    ``UnigramTrainer`` gives characters it had pruned the scores ``min + k * 1e-4``
    with k in hash-set order, and its EM sums differ in the last bits between
    runs. Give those characters their k in code-point order, round every score,
    and sort ties by piece.
    """
    state = json.loads(tok.to_str())
    model = state["model"]
    vocab: list[list] = model["vocab"]
    head = [v for v in vocab if v[0] in specials]
    rest = [v for v in vocab if v[0] not in specials]
    if rest:
        low = min(score for _, score in rest)
        steps: dict[str, int] = {}
        for piece, score in rest:
            k = (score - low) / 1e-4
            if len(piece) == 1 and abs(k - round(k)) < 1e-6 and round(k) < len(rest):
                steps[piece] = round(k)
        # Hand the ladder's rungs out again in code-point order.
        ks = sorted(steps.values())
        steps = dict(zip(sorted(steps), ks, strict=True))
        rest = [
            [piece, round(low + steps[piece] * 1e-4 if piece in steps else score, 8)]
            for piece, score in rest
        ]
        rest.sort(key=lambda v: (-v[1], v[0]))
    model["vocab"] = head + rest
    new = Tokenizer.from_str(json.dumps(state))
    tok.model = new.model


def train_tokenizer(
    algorithm: str, files: list[str], vocab_size: int, family: str
) -> PreTrainedTokenizerFast:
    """Train a tokenizer on ``files`` and wrap it with the family's special tokens.

    ``vocab_size`` is the final size including special tokens, byte tokens and
    sentinels (the trainer may stop short on a small corpus).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown tokenizer algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    spec = family_specials(family)
    specials = list(_ID_ORDER[family])
    if not files:
        raise ValueError("train_tokenizer needs at least one training file")

    if algorithm == "bytelevel_bpe":
        tok, trainer = _bytelevel(vocab_size, specials)
    elif algorithm == "sentencepiece_bpe":
        tok, trainer = _metaspace_bpe(vocab_size, specials, prepend=family != "gemma")
    elif algorithm == "unigram":
        tok, trainer = _unigram(vocab_size - len(spec.extra), specials, spec.unk or "<unk>")

    if algorithm == "wordpiece":
        tok = _train_wordpiece(_iter_lines(files), vocab_size, specials, spec.unk or "[UNK]")
    else:
        tok.train_from_iterator(_iter_lines(files), trainer=trainer)
    if algorithm == "sentencepiece_bpe":
        tok = _with_byte_fallback(tok, specials, spec.unk or "<unk>", prepend=family != "gemma")
    if algorithm == "unigram":
        _canonical_unigram(tok, specials)
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
