"""What the tokens a target vocabulary shares with a source vocabulary are.

The methods that build a row from shared tokens (SALT, FOCUS, CLP) rely on what those
tokens are: a whole word of the target language carries its meaning into the target, a
byte or a comma carries almost none. :func:`token_kind` gives every shared text token one
kind, with one rule for every script, decided in this order on the target token's bytes
and word-start flag (:func:`embtransfer.vocab.canonical.vocab_table`):

``byte``    its bytes are no whole UTF-8 characters (a lone byte of a byte-level or
            byte-fallback vocabulary, a piece that cuts a character) or the vocabulary
            has it as a byte token: it spells no character of its own.
``digits``  a digit (any script's, Unicode category N) and no letter: ``2024``, ``٣``.
``punct``   no letter and no digit: punctuation, symbols, whitespace runs.
``word``    it starts a word and, NFC case-folded with edge punctuation stripped, is a word
            of the target language's lexicon (:class:`Lexicon`): the token spells a whole
            word. The same letters continuing a word (``##der``, line-initial ``der``
            without a byte-level space) are a piece: the flag, not the letters, says
            whether the token stands alone, as the world's truth reads it
            (:mod:`embtransfer.world.truth`, ``word`` against ``stem``).
``name``    names and Latin strings: a letter of another script than the language's own
            (Latin in Arabic, wherever in a word it stands), or a word start that is a
            name of the lexicon or a word of the source's language and not of the target's
            (``▁file`` in German). Capitals are not read: Arabic has none, and a
            sentence-initial capital marks no name.
``piece``   any other letters: a word-initial or word-internal piece of a word.

The language's script is the Unicode script (the first word of a letter's Unicode name:
``LATIN``, ``ARABIC``) most of its lexicon's letters are written in, so Vietnamese ``ư``
and ``đ`` are Latin, and no script is named by hand. Special tokens (paired by role, not
by text) get no kind.

Lexicons: :func:`embtransfer.world.lexicon.world_lexicon` reads the miniature world's
(every form of every concept's word and the free grammatical words, names apart);
:func:`wordfreq_lexicon` takes a real language's from ``wordfreq``.
:func:`shared_token_figures` measures one (source, target) pair with the workflow's own
overlap and coverage code (:func:`embtransfer.vocab.overlap.coverage`): vocabulary
coverage, running-text coverage and the share of each kind.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.vocab.overlap import coverage

#: The kinds of a shared text token, in the order the figures list them.
KINDS: tuple[str, ...] = ("word", "piece", "name", "digits", "punct", "byte")
#: Columns of :func:`shared_token_figures`, in order (after the pair's own columns).
FIGURES: tuple[str, ...] = (
    "target_vocab_size", "shared", "vocab_coverage_pct", "text_coverage_pct",
    "shared_text_tokens", *(f"{kind}_pct" for kind in KINDS), "text_word_pct",
)  # fmt: skip
#: A row of a figures table (the real one, the world's): the pair, the target vocabulary's
#: scheme (:func:`embtransfer.vocab.canonical.detect_scheme`), its figures.
COLUMNS: tuple[str, ...] = ("lang", "source", "target", "scheme", *FIGURES)
#: A real language's word occurs at least once per million words (Zipf 3) in ``wordfreq``.
MIN_ZIPF = 3.0


@dataclass(frozen=True)
class Lexicon:
    """What the classifier knows of the target language; every form NFC case-folded.

    ``words``: the language's words; ``script``: the Unicode script of its letters
    (:func:`script_of`); ``names``: names as the language writes them; ``foreign``: words
    of the source's language that are not words of this one."""

    words: frozenset[str]
    script: str
    names: frozenset[str] = frozenset()
    foreign: frozenset[str] = frozenset()


def fold(text: str) -> str:
    """The form lexicons hold: NFC, case-folded."""
    return unicodedata.normalize("NFC", text).casefold()


def letter_script(char: str) -> str:
    """The Unicode script of a letter: the first word of its name (``LATIN``, ``ARABIC``)."""
    return unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]


def script_of(words: Iterable[str]) -> str:
    """The script most letters of ``words`` are written in."""
    letters = (c for word in words for c in word if unicodedata.category(c)[0] == "L")
    counts = Counter(letter_script(c) for c in letters)
    if not counts:
        raise ValueError("a lexicon without letters has no script")
    return counts.most_common(1)[0][0]


def _edge_trimmed(text: str) -> str:
    """``text`` without the punctuation and symbols at its edges (T5's ``word.``)."""
    keep = [i for i, c in enumerate(text) if unicodedata.category(c)[0] in "LNM"]
    return text[keep[0] : keep[-1] + 1] if keep else ""


def token_kind(raw: bytes, start: bool, lexicon: Lexicon, *, byte: bool = False) -> str:
    """The kind (:data:`KINDS`) of a text token's bytes and word-start flag; ``byte``: the
    vocabulary has it as a byte token. The rules and their order: the module docstring."""
    try:
        text = unicodedata.normalize("NFC", bytes(raw).decode("utf-8"))
    except UnicodeDecodeError:
        return "byte"
    if byte:
        return "byte"
    classes = {unicodedata.category(c)[0] for c in text}
    if "L" not in classes:
        return "digits" if "N" in classes else "punct"
    form = fold(_edge_trimmed(text))
    if start and form in lexicon.words:
        return "word"
    letters = (c for c in text if unicodedata.category(c)[0] == "L")
    if any(letter_script(c) != lexicon.script for c in letters):
        return "name"
    if start and (form in lexicon.names or form in lexicon.foreign):
        return "name"
    return "piece"


def shared_kinds(target_vocab: pd.DataFrame, overlap: pd.DataFrame, lexicon: Lexicon) -> pd.Series:
    """The kind of every shared text token: a Series indexed by target id (special tokens,
    paired by role, left out)."""
    rows = target_vocab.set_index("id").loc[overlap["target_id"].to_numpy()]
    rows = rows[rows["kind"] != "special"]
    return pd.Series(_row_kinds(rows, lexicon), index=rows.index, dtype=object, name="kind")


def _row_kinds(rows: pd.DataFrame, lexicon: Lexicon) -> list[str]:
    """:func:`token_kind` of every row of a vocab table."""
    return [
        token_kind(raw, bool(start), lexicon, byte=kind == "byte")
        for raw, start, kind in zip(rows["bytes"], rows["start"], rows["kind"], strict=True)
    ]


def _pct(part: float, whole: float) -> float:
    return round(100.0 * float(part) / whole, 2) if whole else 0.0


def shared_token_figures(
    target_vocab: pd.DataFrame, overlap: pd.DataFrame, counts: np.ndarray, lexicon: Lexicon
) -> dict[str, Any]:
    """One pair's figures (:data:`FIGURES`): vocabulary coverage (shared share of the target
    vocabulary, special tokens included, as :func:`coverage` counts it), running-text
    coverage (share of the target tokenization of running text, ``counts`` per target id
    from :func:`embtransfer.vocab.overlap.count_tokens`, spelled by shared tokens), the share
    of each kind among the shared text tokens, and the share of the running text that
    shared whole words spell (``text_word_pct``)."""
    stats = coverage(overlap, target_vocab, counts)
    kinds = shared_kinds(target_vocab, overlap, lexicon)
    tally = kinds.value_counts()
    words = kinds.index[kinds == "word"].to_numpy(dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    figures = {
        "target_vocab_size": stats["target_vocab_size"],
        "shared": stats["copied"],
        "vocab_coverage_pct": round(stats["coverage_pct"], 2),
        "text_coverage_pct": round(stats["corpus_coverage_pct"] or 0.0, 2),
        "shared_text_tokens": len(kinds),
    }
    figures.update({f"{kind}_pct": _pct(tally.get(kind, 0), len(kinds)) for kind in KINDS})
    figures["text_word_pct"] = _pct(
        int(counts[words[words < len(counts)]].sum()), stats["corpus_tokens"]
    )
    return figures


def text_kind_shares(
    target_vocab: pd.DataFrame, overlap: pd.DataFrame, counts: np.ndarray, lexicon: Lexicon
) -> dict[str, float]:
    """What running text is made of: the percentage of its target tokens (``counts`` per
    target id, as :func:`shared_token_figures` reads them) of each kind, shared with the
    source (``shared_word`` ...) or not (``other_word`` ...); special tokens left out. Where
    :func:`shared_token_figures` counts vocabulary entries, this counts their occurrences."""
    counts = np.asarray(counts, dtype=np.int64)
    rows = target_vocab[(target_vocab["kind"] != "special") & (target_vocab["id"] < len(counts))]
    seen = counts[rows["id"].to_numpy()]
    rows, seen = rows[seen > 0], seen[seen > 0]
    sides = np.where(rows["id"].isin(overlap["target_id"]), "shared", "other")
    labels = [f"{side}_{kind}" for side, kind in zip(sides, _row_kinds(rows, lexicon), strict=True)]
    tally = pd.Series(seen, index=labels).groupby(level=0).sum()
    return {
        f"{side}_{kind}": _pct(tally.get(f"{side}_{kind}", 0), int(seen.sum()))
        for side in ("shared", "other")
        for kind in KINDS
    }


def wordfreq_lexicon(lang: str, min_zipf: float = MIN_ZIPF, other: str = "en") -> Lexicon:
    """A real language's lexicon from ``wordfreq``: the words at least ``min_zipf`` frequent
    in ``lang`` and more frequent there than in ``other`` (English: the sources' main
    language; ``embtransfer/data/real_text.py`` keeps a corpus line by the same comparison), and
    as foreign words the ``other`` language's words at least as frequent. ``wordfreq``
    lists no names apart: a name is a word of whichever language uses it more."""
    from wordfreq import get_frequency_dict  # noqa: PLC0415 (optional: the dev extra)

    floor = 10.0 ** (min_zipf - 9.0)  # Zipf = log10 of the frequency per billion words
    own = get_frequency_dict(lang, "best")
    theirs = get_frequency_dict(other, "best")
    words = frozenset(fold(w) for w, f in own.items() if f >= floor and f > theirs.get(w, 0.0))
    foreign = frozenset(fold(w) for w, f in theirs.items() if f >= floor) - words
    return Lexicon(words, script_of(words), frozenset(), foreign)
