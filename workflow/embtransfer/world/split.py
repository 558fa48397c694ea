"""The miniature world's concepts split into an alignment dictionary and a held-out part.

WECHSEL and OFA fit their Procrustes map on a bilingual dictionary; scoring their rows on
the same concepts would measure how well the map fits its training pairs. So the world's
concepts are split once, by a seeded rule (config ``seed`` and ``dictionary_held_out``):
within each semantic class, a seeded shuffle of its concepts puts the first
``round(n * held_out)`` in ``held_out``, the rest in ``dictionary``. A concept's inflected
forms (plural nouns) follow its lemma: the split is of concepts, not of words.

* :func:`dictionary_part`: the pairs a world dictionary hands to the alignment (dictionary
  concepts only), with the record the aligned artifact keeps in its statistics.
* :func:`meaning_split`: the split of a truth row's meaning (:mod:`embtransfer.world.truth`);
  a meaning that is no concept (a name, an affix, a particle) is ``none``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from embtransfer.world.dictionary import dictionary_entries

#: The splits a truth row can be in, the headline first.
SPLITS = ("held_out", "dictionary", "none")


def concept_split(world: dict[str, Any], seed: int, held_out: float) -> dict[str, str]:
    """Concept id -> ``held_out`` or ``dictionary``, deterministic in (concepts, seed,
    held_out); per semantic class, so every class is held out in the same share."""
    if not 0 <= held_out <= 1:
        raise ValueError(f"dictionary_held_out must lie in [0, 1], got {held_out}")
    by_class: dict[str, list[str]] = {}
    for concept in world["concepts"]:
        by_class.setdefault(concept["class"], []).append(concept["id"])
    split: dict[str, str] = {}
    for cls, ids in by_class.items():
        # A string seed is hashed with SHA-512 by random.Random: stable across processes.
        order = list(ids)
        random.Random(f"{seed}:dictionary_held_out:{cls}").shuffle(order)
        n_held = int(len(order) * held_out + 0.5)
        split |= {cid: "held_out" if i < n_held else "dictionary" for i, cid in enumerate(order)}
    return split


def meaning_split(meaning: str, split: Mapping[str, str]) -> str:
    """The split of a truth meaning: its concept's, or ``none`` for a name, affix, particle."""
    kind, _, value = meaning.partition(":")
    return split[value] if kind == "concept" else "none"


def dictionary_part(
    world: dict[str, Any], src_lang: str, tgt_lang: str, seed: int, held_out: float
) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The world dictionary's pairs of the ``dictionary`` concepts, and the record of them
    for the aligned artifact's statistics (``dictionary_split``: the seed, the held-out
    share, the concepts and the pairs handed to the fit)."""
    split = concept_split(world, seed, held_out)
    entries = [
        e for e in dictionary_entries(world, src_lang, tgt_lang) if split[e[0]] == "dictionary"
    ]
    pairs = [(s, t) for _, s, t in entries]
    record = {
        "seed": seed,
        "held_out": held_out,
        "concepts": sorted({cid for cid, _, _ in entries}),
        "pairs": [list(p) for p in pairs],
    }
    return pairs, {"dictionary_split": record}
