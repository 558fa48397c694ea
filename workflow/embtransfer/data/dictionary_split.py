"""A real bilingual dictionary split into an alignment half and a held-out half, and the
alignment truth the held-out half gives a target vocabulary.

WECHSEL and OFA fit their map on dictionary pairs; scoring their rows on the same words
would measure how well the map fits its training pairs. So a real dictionary (a FreeDict
one, ``held_out: true`` in its config entry) is split once, by a seeded rule on the English
headword, as the miniature world splits its concepts (:mod:`embtransfer.world.split`):

* :func:`split_dictionary`: a seeded shuffle (config ``seed``) of the distinct headwords
  (NFC, case-folded) puts the first ``round(n * held_out)`` (``dictionary_held_out``) in the
  held-out half, the rest in the dictionary half; every pair follows its headword. A
  held-out pair whose target word also occurs in the dictionary half is dropped, so no
  target word of the held-out half was seen by the fit.
* :func:`dictionary_truth`: what :func:`embtransfer.world.truth.token_truth` gives the
  world, from the held-out pairs: a target token that is a whole word (at a word start) of
  one held-out pair's target word, with one English translation, means that word; its
  ``source_ids`` are the source tokenizer's ids of the English word written as a word
  (after a space). Same columns, so :mod:`embtransfer.evaluation.alignment` scores it.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.vocab.canonical import token_text
from embtransfer.world.truth import COLUMNS

Pair = tuple[str, str]


def word_key(text: str) -> str:
    """The form words are matched on: NFC, case-folded (a capital does not hide a word)."""
    return unicodedata.normalize("NFC", text).casefold()


@dataclass(frozen=True)
class DictionarySplit:
    """The two halves of a dictionary and the record the aligned artifact keeps."""

    dictionary: list[Pair]
    held_out: list[Pair]
    record: dict[str, Any]


def split_dictionary(pairs: Sequence[Pair], seed: int, held_out: float) -> DictionarySplit:
    """Split ``pairs`` (English headword, target word) by headword; see the module docstring."""
    if not 0 <= held_out <= 1:
        raise ValueError(f"dictionary_held_out must lie in [0, 1], got {held_out}")
    heads = sorted({word_key(s) for s, _ in pairs})
    # A string seed is hashed with SHA-512 by random.Random: stable across processes.
    random.Random(f"{seed}:dictionary_held_out:headwords").shuffle(heads)
    n_held = int(len(heads) * held_out + 0.5)
    held_heads = set(heads[:n_held])
    dictionary = [(s, t) for s, t in pairs if word_key(s) not in held_heads]
    fitted_targets = {word_key(t) for _, t in dictionary}
    candidates = [(s, t) for s, t in pairs if word_key(s) in held_heads]
    kept = [(s, t) for s, t in candidates if word_key(t) not in fitted_targets]
    record = {
        "seed": seed,
        "held_out": held_out,
        "headwords": {"held_out": n_held, "dictionary": len(heads) - n_held},
        "dropped_held_out_pairs": len(candidates) - len(kept),
        "pairs": [list(p) for p in dictionary],
        "held_out_pairs": [list(p) for p in kept],
    }
    return DictionarySplit(dictionary, kept, record)


def _translations(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for s, t in pairs:
        out.setdefault(word_key(t), set()).add(word_key(s))
    return out


def dictionary_truth(
    held_out: Sequence[Pair],
    target_vocab: pd.DataFrame,
    source_vocab: pd.DataFrame,
    encode: Callable[[list[str]], list[list[int]]],
    shared_target_ids: np.ndarray,
    lang: str,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The truth table (columns :data:`embtransfer.world.truth.COLUMNS`, kind ``word``,
    split ``held_out``) of a target vocabulary from held-out dictionary pairs, and its counts.

    ``encode`` maps texts to the source tokenizer's ids (no special tokens); special source
    ids (unk among them) are dropped, and a translation left with none has no truth.
    """
    translations = _translations(held_out)
    single = {t: next(iter(s)) for t, s in translations.items() if len(s) == 1}
    special = set(source_vocab.loc[source_vocab["kind"] == "special", "id"].astype(int))
    shared = set(np.asarray(shared_target_ids, np.int64).tolist())
    rows: list[dict[str, Any]] = []
    vocab = zip(target_vocab["id"], target_vocab["bytes"], target_vocab["start"],
                target_vocab["kind"], strict=True)  # fmt: skip
    for tid, raw, start, kind in vocab:
        if kind != "normal" or raw is None or not start:
            continue
        text = token_text(bytes(raw))
        if not text or text.encode("utf-8") != bytes(raw) or word_key(text) not in single:
            continue  # part of a character, or no held-out word with one translation
        rows.append({"target_id": int(tid), "text": text, "kind": "word",
                     "meaning": f"word:{single[word_key(text)]}",
                     "shared": int(tid) in shared, "split": "held_out"})  # fmt: skip
    encoded = encode([" " + r["meaning"].removeprefix("word:") for r in rows])
    for row, ids in zip(rows, encoded, strict=True):
        row["source_ids"] = [int(i) for i in ids if int(i) not in special]
    rows = [r for r in rows if r["source_ids"]]
    table = pd.DataFrame(rows, columns=list(COLUMNS)).astype({"target_id": "int64", "shared": bool})
    unshared = table.loc[~table["shared"]]
    counts = {
        "lang": lang,
        "target_tokens": int(len(target_vocab)),
        "shared": len(shared),
        "nonshared": int(len(target_vocab)) - len(shared),
        "nonshared_with_truth": int(len(unshared)),
        "with_truth": int(len(table)),
        "held_out_pairs": len(held_out),
        "held_out_target_words": len(translations),
        "ambiguous_target_words": len(translations) - len(single),
        "by_kind": {"word": int(len(unshared))} if len(unshared) else {},
        "by_split": {"held_out": int(len(unshared))} if len(unshared) else {},
        "source_tokens_per_translation": (
            float(table["source_ids"].map(len).mean()) if len(table) else None
        ),
    }
    return table, counts
