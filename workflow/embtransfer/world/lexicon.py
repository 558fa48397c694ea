"""The miniature world's lexicon of a language, as the shared-token classifier reads it
(:class:`embtransfer.vocab.kinds.Lexicon`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from embtransfer.vocab.kinds import Lexicon, fold, script_of, wordfreq_lexicon
from embtransfer.world.truth import _grammar, _word_forms


def world_lexicon(world: dict[str, Any], lang: str) -> Lexicon:
    """The miniature world's lexicon of ``lang``: every form of every concept's word
    (lemma, inflections, case forms) and the free grammatical words (articles, particles),
    less the forms the source language writes alike (a loanword kept as the source spells
    it: the real lexicon gives such a word to the language that uses it more, and the
    world's text is mostly the source's); the names both languages write; the source
    language's words as foreign words."""
    target = world["languages"][lang]
    source = world["languages"][world["source_language"]]
    _, free = _grammar(target, source)
    foreign = frozenset(_word_forms(source))
    words = (frozenset(_word_forms(target)) | frozenset(free)) - foreign
    names = frozenset(fold(n) for lang_ in (target, source) for n in lang_["names"].values())
    return Lexicon(words, script_of(words), names, foreign)


@cache
def _wordfreq(lang: str, other: str) -> Lexicon:
    # a wordfreq lexicon loads in seconds: once per (language, other language)
    return wordfreq_lexicon(lang, other=other)


def pair_lexicon(spec: dict[str, str], lang: str, world: dict[str, Any] | None) -> Lexicon:
    """The lexicon a pair's shared tokens are classified with
    (:func:`embtransfer.vocab.inputs.lexicon_spec`): the miniature world's, or a real
    language's wordfreq lexicon against the source's language."""
    if spec["lexicon"] == "world":
        if world is None:
            raise ValueError(f"{lang}: the world's lexicon needs the world (results/world)")
        return world_lexicon(world, lang)
    return _wordfreq(lang, spec["other"])
