"""The world's bilingual dictionaries: the words of two of its languages aligned by
concept, single words only (lemmas, and plural nouns where both languages inflect them)."""

from __future__ import annotations

from typing import Any

from embtransfer.world.running_text import _affixed


def dictionary_entries(world: dict[str, Any], src_lang: str,
                       tgt_lang: str) -> list[tuple[str, str, str]]:
    """(concept id, source word, target word) of every concept: its lemmas, plus its plural
    nouns where both languages mark plural on the word. Only single words: bound affixes and
    particles are left out."""
    src, tgt = world["languages"][src_lang], world["languages"][tgt_lang]
    entries: list[tuple[str, str, str]] = []
    for concept in world["concepts"]:
        cid = concept["id"]
        if concept["kind"] == "function_prep" and "suffix" in (
                src["morphology"]["adposition"], tgt["morphology"]["adposition"]):
            continue
        entries.append((cid, src["lexicon"][cid], tgt["lexicon"][cid]))
        if concept["kind"] == "noun":
            sp, tp = src["morphology"]["plural"], tgt["morphology"]["plural"]
            if "particle" not in sp and "particle" not in tp:
                entries.append((cid, _affixed(src["lexicon"][cid], sp, src["script"]),
                                _affixed(tgt["lexicon"][cid], tp, tgt["script"])))
    return entries


def dictionary(world: dict[str, Any], src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """Bilingual word pairs aligned by concept (:func:`dictionary_entries`), every concept's.
    WECHSEL and OFA align on the dictionary concepts' only
    (:func:`embtransfer.world.split.dictionary_part`)."""
    return [(s, t) for _, s, t in dictionary_entries(world, src_lang, tgt_lang)]
