"""Bilingual dictionaries on disk: the word pairs WECHSEL and OFA align fastText spaces with.

Two formats (config ``languages.<lang>.dictionary``; the miniature world's own lexicons are
the third, ``world``, read by :func:`embtransfer.world.dictionary.dictionary`):

* ``file``: one "source-word target-word" pair per line, whitespace separated (MUSE's
  format). Lines with fewer than two fields are skipped; fields after the second ignored.
* ``freedict``: a FreeDict dictionary in dictd format, as Debian's ``dict-freedict-*``
  packages install it (``/usr/share/dictd/freedict-eng-deu.index`` beside
  ``freedict-eng-deu.dict.dz``). ``path`` names the ``.index``; the ``.dict.dz`` (dictzip,
  which gzip reads) or an uncompressed ``.dict`` must lie beside it. Headwords are
  source-language words, translations target-language ones; ``reverse: true`` swaps them,
  so ``freedict-deu-eng`` serves an English source and a German target.

A FreeDict entry, as FreeDict's TEI-to-dictd export writes it::

    house /hˈaʊs/ <n>              headword, then pronunciation and grammar (dropped)
    Haus <neut>, Gebäude <neut>     translations, comma separated, grammar dropped
    2. Heim                         a numbered sense: one more translation line
     [Br.] Haus                     a line opened by a label in brackets: translations too
       Synonym: {home}              indented two or more, or " see:": cross-references,
             Note: ...              notes and usage examples: skipped

Only single-word pairs are kept (fastText has no vector for an expression of several
words), each pair once, in the dictionary's order.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_B64_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64 = {c: i for i, c in enumerate(_B64_DIGITS)}
#: Pronunciation /.../, grammar <...>, labels [...], cross-references {...}, asides (...).
_MARKUP = re.compile(r"/[^/]*/|<[^>]*>|\[[^\]]*\]|\{[^}]*\}|\([^)]*\)")
_SENSE_NUMBER = re.compile(r"^\d+\.\s+")
_SKIPPED = ("see:", "Synonym:", "Synonyms:", "Antonym:", "Antonyms:", "Note:")


class DictionaryError(ValueError):
    """A dictionary file is missing or not in the format its config names."""


def dictd_number(text: str) -> int:
    """dictd's index numbers: base 64, most significant digit first."""
    value = 0
    for char in text:
        if char not in _B64:
            raise ValueError(f"{text!r} is not a dictd base-64 number")
        value = value * 64 + _B64[char]
    return value


def dictd_digits(value: int) -> str:
    """A dictd index number (for writing an index)."""
    out = ""
    while True:
        value, digit = divmod(value, 64)
        out = _B64_DIGITS[digit] + out
        if value == 0:
            return out


def _single_word(text: str) -> str | None:
    word = _MARKUP.sub(" ", text).strip(" \t,;:.!?\"'")
    return word if word and len(word.split()) == 1 else None


def _entry_pairs(entry: str) -> Iterator[tuple[str, str]]:
    lines = entry.splitlines()
    if not lines:
        return
    head = _single_word(lines[0])
    if head is None:
        return
    for line in lines[1:]:
        if not line.strip() or line.startswith("  ") or line.strip().startswith(_SKIPPED):
            continue
        line = _SENSE_NUMBER.sub("", line.strip())
        for part in _MARKUP.sub(lambda m: "," if m.group(0).startswith("{") else " ",
                                line).split(","):
            word = _single_word(part)
            if word is not None:
                yield head, word


def freedict_data(index: str | os.PathLike) -> Path:
    """The .dict.dz (or .dict) that holds the entries of the dictd ``index``: the one
    that exists, else the .dict.dz path (so a missing file is named as a missing input)."""
    index = Path(index)
    if index.suffix != ".index":
        raise DictionaryError(f"FreeDict dictionary {index}: give the path of its .index file")
    stem = index.name.removesuffix(".index")
    for name in (f"{stem}.dict.dz", f"{stem}.dict"):
        if index.with_name(name).exists():
            return index.with_name(name)
    return index.with_name(f"{stem}.dict.dz")


def read_freedict(path: str | os.PathLike, reverse: bool = False) -> list[tuple[str, str]]:
    """(source word, target word) pairs of a FreeDict dictd dictionary (``path``: its .index).

    ``reverse`` swaps headword and translation. Entries listed under several index words
    are read once; dictd's own ``00-database-*`` entries are skipped.
    """
    index = Path(path)
    if not index.exists():
        raise DictionaryError(f"FreeDict dictionary {index} does not exist")
    data_path = freedict_data(index)
    if not data_path.exists():
        raise DictionaryError(
            f"FreeDict dictionary {index}: no {data_path.name} (or .dict) beside the index "
            "(a dictd dictionary is the .index and its .dict.dz; copy both)")
    data = gzip.open(data_path).read() if data_path.suffix == ".dz" else data_path.read_bytes()
    seen_entries: set[tuple[int, int]] = set()
    pairs: dict[tuple[str, str], None] = {}
    for number, line in enumerate(index.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 3:
            raise DictionaryError(f"{index}:{number}: not a dictd index line "
                                  "(word, offset and length separated by tabs)")
        if fields[0].startswith(("00-database", "00database")):
            continue
        try:
            span = (dictd_number(fields[1]), dictd_number(fields[2]))
        except ValueError as err:
            raise DictionaryError(f"{index}:{number}: {err}") from None
        if span in seen_entries:
            continue
        seen_entries.add(span)
        if span[0] + span[1] > len(data):
            raise DictionaryError(f"{index}:{number}: entry beyond the end of the .dict data "
                                  "(index and .dict.dz of different dictionaries?)")
        entry = data[span[0] : span[0] + span[1]].decode("utf-8")
        for head, word in _entry_pairs(entry):
            pairs[(word, head) if reverse else (head, word)] = None
    return list(pairs)


def read_pairs_file(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Pairs of a ``file`` dictionary: the first two whitespace fields of each line."""
    return [
        (fields[0], fields[1])
        for fields in (line.split() for line in
                       Path(path).read_text(encoding="utf-8").splitlines())
        if len(fields) >= 2
    ]


def read_dictionary(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The pairs of a ``file`` or ``freedict`` dictionary config entry."""
    if spec["type"] == "file":
        return read_pairs_file(spec["path"])
    if spec["type"] == "freedict":
        return read_freedict(spec["path"], reverse=bool(spec.get("reverse", False)))
    raise DictionaryError(f"dictionary type {spec['type']!r} is not a file format "
                          "(file or freedict)")
