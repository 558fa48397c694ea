"""Ground truth of the miniature world: which source tokens a target token means.

Every lexicon word of every language belongs to a concept, every name is the same entity in
every language, and every bound affix or grammatical particle marks a grammatical category.
So for a target token the world knows its translation in the source language, and
:func:`token_truth` writes it down, per (source tokenizer, target tokenizer):

``word``      a whole word form at a word start: a lemma or one of its inflected forms
              (plural, definite, verb forms, case forms) -> the concept's source lemma
``stem``      a lemma inside a word (after a glued prefix, or line-initial without the
              word-start mark) -> the concept's source lemma
``name``      a name as the target writes it (transliterated in Arabic script) -> the Latin
              name
``affix``     a bound affix of one grammatical category (plural, definite, a verb form) ->
              the source's marker of that category (an affix, or a word where the source
              marks it with a word); left out where the source leaves it unmarked or the
              affix marks categories the source marks differently
``particle``  a free grammatical word (an article, a plural or tense particle) -> likewise

Each row carries its concept's ``split`` (:mod:`embtransfer.world.split`): ``held_out`` or
``dictionary`` (the concepts WECHSEL and OFA align on), ``none`` for a name, affix or
particle. A text that could mean two different things is left out. Everything else (pieces of words,
digits, punctuation, bytes, special tokens) has no truth. The translation is the source
tokenizer's ids of the source form, written as the source writes a word (after a space);
a bound source affix is tokenised on its own. Matching is on NFC, case-folded text, so a
sentence-initial capital or a tokenizer's normalisation does not hide a word.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core.atomic import read_parquet_metadata, write_parquet
from embtransfer.vocab.canonical import token_text
from embtransfer.world.languages import _affix_cells
from embtransfer.world.running_text import _affixed
from embtransfer.world.split import SPLITS, meaning_split

#: Interpretation kinds, in the order the counts list them.
KINDS = ("word", "stem", "name", "affix", "particle")
#: Grammatical categories a morphology marks, with the cell that marks each.
CATEGORIES = ("plural", "definite", "indefinite", "present_sg", "present_pl", "past_sg", "past_pl")
COLUMNS = ("target_id", "text", "kind", "meaning", "source_ids", "shared", "split")


def _key(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def _cells(morph: dict[str, Any]) -> dict[str, dict[str, str]]:
    verb = morph["verb"]
    return {
        "plural": morph["plural"],
        "definite": morph["definite"],
        "indefinite": morph["indefinite"],
        **{k: verb[k] for k in CATEGORIES[3:]},
    }


def _word_forms(lang: dict[str, Any]) -> dict[str, set[str]]:
    """Every surface form of every concept's word (lemma, inflections, case forms) -> the
    concepts it can be."""
    morph = lang["morphology"]
    cells = _affix_cells(morph)
    case_suffixes = [
        {"suffix": lang["lexicon"][c]}
        for c in lang["lexicon"]
        if c.startswith("fn_")
        and morph["adposition"] == "suffix"
        and c in ("fn_in", "fn_to", "fn_at", "fn_with")
    ]
    forms: dict[str, set[str]] = {}
    for concept, lemma in lang["lexicon"].items():
        if morph["adposition"] == "suffix" and concept in ("fn_in", "fn_to", "fn_at", "fn_with"):
            continue  # a case suffix, not a word
        surfaces = {lemma} | {_affixed(lemma, c, lang["script"]) for c in cells}
        surfaces |= {_affixed(s, c, lang["script"]) for s in list(surfaces) for c in case_suffixes}
        for surface in surfaces:
            forms.setdefault(_key(surface), set()).add(f"concept:{concept}")
    return forms


def _grammar(
    lang: dict[str, Any], source: dict[str, Any]
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Target bound affixes and free grammatical words -> the source forms of the categories
    they mark (``affix:<form>`` for a bound source affix, ``word:<form>`` for a source word)."""
    bound: dict[str, set[str]] = {}
    free: dict[str, set[str]] = {}
    source_cells = _cells(source["morphology"])
    for category, cell in _cells(lang["morphology"]).items():
        src = source_cells[category]
        meaning = {f"affix:{src[k]}" for k in ("prefix", "suffix") if src.get(k)} | {
            f"word:{src[k]}" for k in ("word", "particle") if src.get(k)
        }
        # Unmarked in the source (an empty cell): no translation; several markers: unclear.
        marker = meaning if len(meaning) == 1 else {"unclear"}
        for k in ("prefix", "suffix"):
            if cell.get(k):
                bound.setdefault(_key(cell[k]), set()).update(marker)
        for k in ("word", "particle"):
            if cell.get(k):
                free.setdefault(_key(cell[k]), set()).update(marker)
    return bound, free


def _one(meanings: set[str] | None) -> str | None:
    if not meanings or len(meanings) != 1:
        return None
    (meaning,) = meanings
    return None if meaning == "unclear" else meaning


class _Interpreter:
    """(kind, meaning) of a target token of ``lang`` from its text and word-start flag, or
    None. Meanings: ``concept:<id>``, ``name:<id>``, ``affix:<source form>``,
    ``word:<source form>``."""

    def __init__(self, world: dict[str, Any], lang: str) -> None:
        target = world["languages"][lang]
        source = world["languages"][world["source_language"]]
        self.words = _word_forms(target)
        self.lemmas: dict[str, set[str]] = {}
        for concept, lemma in target["lexicon"].items():
            self.lemmas.setdefault(_key(lemma), set()).add(f"concept:{concept}")
        self.names: dict[str, set[str]] = {}
        for name_id, form in target["names"].items():
            self.names.setdefault(_key(form), set()).add(f"name:{name_id}")
        self.bound, self.free = _grammar(target, source)

    def __call__(self, text: str, start: bool) -> tuple[str, str] | None:
        key = _key(text)
        if not key or key != key.strip():
            return None
        if start:
            # One reading across every kind of free form, or none.
            readings = (
                self.words.get(key, set()) | self.names.get(key, set()) | self.free.get(key, set())
            )
            meaning = _one(readings)
            if meaning is None:
                return None
            kind = (
                "name"
                if meaning.startswith("name:")
                else "word"
                if key in self.words
                else "particle"
            )
            return kind, meaning
        readings = self.lemmas.get(key, set()) | self.names.get(key, set())
        bound = self.bound.get(key, set())
        if readings and bound:
            return None  # a stem that is also an affix: ambiguous
        if bound:
            meaning = _one(bound)
            return None if meaning is None else ("affix", meaning)
        meaning = _one(readings)
        if meaning is None:
            return None
        return ("name" if meaning.startswith("name:") else "stem"), meaning


def source_form(world: dict[str, Any], meaning: str) -> tuple[str, bool]:
    """The source-language text of a meaning and whether it is written as a word (after a
    space) rather than a bound affix."""
    source = world["languages"][world["source_language"]]
    kind, _, value = meaning.partition(":")
    if kind == "concept":
        return source["lexicon"][value], True
    if kind == "name":
        return source["names"][value], True
    if kind == "word":
        return value, True
    return value, False  # a bound affix


def _readings(
    read: _Interpreter, target_vocab: pd.DataFrame, shared: set[int], split: Mapping[str, str]
) -> list[dict[str, Any]]:
    """A row (all columns but ``source_ids``) per target token with one reading."""
    rows: list[dict[str, Any]] = []
    vocab = zip(target_vocab["id"], target_vocab["bytes"], target_vocab["start"],
                target_vocab["kind"], strict=True)  # fmt: skip
    for tid, raw, start, kind in vocab:
        if kind != "normal" or raw is None:
            continue
        text = token_text(bytes(raw))
        if not text or text.encode("utf-8") != bytes(raw):
            continue  # a piece holding part of a character
        reading = read(text, bool(start))
        if reading is None:
            continue
        rows.append({"target_id": int(tid), "text": text, "kind": reading[0],
                     "meaning": reading[1], "shared": int(tid) in shared,
                     "split": meaning_split(reading[1], split)})  # fmt: skip
    return rows


def _tally(values: pd.Series, order: tuple[str, ...]) -> dict[str, int]:
    """Counts of ``values`` in the order of ``order``."""
    return {
        k: int(n) for k, n in sorted(Counter(values).items(), key=lambda kv: order.index(kv[0]))
    }


def _counts(lang: str, table: pd.DataFrame, n_target: int, n_shared: int) -> dict[str, Any]:
    nonshared = n_target - n_shared
    unshared_rows = table.loc[~table["shared"]] if len(table) else table
    return {
        "lang": lang,
        "target_tokens": n_target,
        "shared": n_shared,
        "nonshared": nonshared,
        "nonshared_with_truth": int(len(unshared_rows)),
        "nonshared_without_truth": nonshared - int(len(unshared_rows)),
        "with_truth": int(len(table)),
        "by_kind": _tally(unshared_rows["kind"], KINDS),
        "by_split": _tally(unshared_rows["split"], SPLITS),
        "source_tokens_per_translation": (
            float(table["source_ids"].map(len).mean()) if len(table) else None
        ),
    }


def token_truth(
    world: dict[str, Any],
    lang: str,
    target_vocab: pd.DataFrame,
    source_vocab: pd.DataFrame,
    encode: Any,
    shared_target_ids: np.ndarray,
    *,
    split: Mapping[str, str],
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The truth table of a target vocabulary (columns :data:`COLUMNS`, one row per target
    token with a truth) and its counts.

    ``encode`` maps a list of texts to the source tokenizer's ids (no special tokens);
    ids of special source tokens are dropped. ``shared_target_ids``: the target ids the
    overlap stage matched to a source token. ``split``: concept id -> its split
    (:func:`embtransfer.world.split.concept_split`).
    """
    if lang not in world["languages"] or lang == world["source_language"]:
        raise ValueError(
            f"{lang!r} is not a target language of the miniature world "
            f"(targets: {', '.join(world['target_languages'])})"
        )
    special = set(source_vocab.loc[source_vocab["kind"] == "special", "id"].astype(int))
    shared = set(np.asarray(shared_target_ids, np.int64).tolist())
    rows = _readings(_Interpreter(world, lang), target_vocab, shared, split)
    forms = [source_form(world, r["meaning"]) for r in rows]
    encoded = encode([(" " + f) if as_word else f for f, as_word in forms])
    for row, ids in zip(rows, encoded, strict=True):
        row["source_ids"] = [int(i) for i in ids if int(i) not in special]
    rows = [r for r in rows if r["source_ids"]]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table = table.astype({"target_id": "int64", "shared": bool})
    return table, _counts(lang, table, int(len(target_vocab)), len(shared))


def write_truth(path: Any, table: pd.DataFrame, counts: dict[str, Any]) -> None:
    write_parquet(path, table, metadata=counts)


def read_truth(path: Any) -> pd.DataFrame:
    """A truth table as written by :func:`write_truth` (``source_ids`` as int64 arrays);
    its counts are in ``.attrs``."""
    table = pd.read_parquet(path)
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: not a ground-truth table (no column(s) {missing})")
    table["source_ids"] = [np.asarray(ids, np.int64) for ids in table["source_ids"]]
    table.attrs.update(read_parquet_metadata(path))
    return table
