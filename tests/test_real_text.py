"""Real text and real dictionaries (tests/fixtures/real, slices of the packages that
benchmarks/real_data.py turns into the corpora of ``make bench-real``)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from embtransfer.data.dictionaries import (
    DictionaryError,
    dictd_digits,
    dictd_number,
    freedict_data,
    read_dictionary,
    read_freedict,
)

REAL = Path(__file__).parent / "fixtures" / "real"
ENG_DEU = REAL / "freedict-eng-deu.index"
ENG_ARA = REAL / "freedict-eng-ara.index"


def test_dictd_numbers_round_trip() -> None:
    assert dictd_number("A") == 0 and dictd_number("BA") == 64 and dictd_number("/") == 63
    for n in (0, 1, 63, 64, 4095, 123_456_789):
        assert dictd_number(dictd_digits(n)) == n
    with pytest.raises(ValueError, match="base-64"):
        dictd_number("a-b")


def test_freedict_reads_translations_not_notes_or_references() -> None:
    pairs = read_freedict(ENG_DEU)
    water = {t for s, t in pairs if s == "water"}
    # "Wasser <neut>" and the verb's comma-separated translations, grammar dropped
    assert {"Wasser", "gießen", "bewässern"} <= water
    assert ("house", "Haus") in pairs and ("book", "Buch") in pairs
    # cross-references ({...}), notes and examples are not translations; nor dictd's own
    # 00-database entries (the fixture holds them)
    assert all("{" not in t and "<" not in t and "/" not in t for _, t in pairs)
    assert not any(s.startswith("00") for s, _ in pairs)
    # single words only, each pair once
    assert all(len(s.split()) == len(t.split()) == 1 for s, t in pairs)
    assert len(pairs) == len(set(pairs)) > 150


def test_freedict_arabic_and_numbered_senses(tmp_path: Path) -> None:
    pairs = read_freedict(ENG_ARA)
    assert ("Water", "الماء") in pairs and ("House", "المنزل") in pairs
    # a numbered sense line ("2. ...") is a translation line like any other
    entry = "Abode /ɐbˈəʊd/\n1. مسكن\n2. منزل\n"
    (tmp_path / "d.dict").write_text(entry, encoding="utf-8")
    (tmp_path / "d.index").write_text(f"abode\tA\t{dictd_digits(len(entry.encode()))}\n")
    assert read_freedict(tmp_path / "d.index") == [("Abode", "مسكن"), ("Abode", "منزل")]


def test_freedict_reverse_and_dictionary_spec() -> None:
    forward = read_freedict(ENG_DEU)
    assert read_freedict(ENG_DEU, reverse=True) == [(t, s) for s, t in forward]
    assert read_dictionary({"type": "freedict", "path": str(ENG_DEU)}) == forward
    assert read_dictionary({"type": "freedict", "path": str(ENG_DEU), "reverse": True})[0] == (
        forward[0][1], forward[0][0])


def test_freedict_errors_name_the_problem(tmp_path: Path) -> None:
    shutil.copy(ENG_DEU, tmp_path / "x.index")
    assert freedict_data(tmp_path / "x.index") == tmp_path / "x.dict.dz"
    with pytest.raises(DictionaryError, match=r"no x\.dict\.dz .*copy both"):
        read_freedict(tmp_path / "x.index")
    with pytest.raises(DictionaryError, match=r"\.index file"):
        read_freedict(REAL / "freedict-eng-deu.dict.dz")
    with pytest.raises(DictionaryError, match="does not exist"):
        read_freedict(tmp_path / "missing.index")
    (tmp_path / "x.dict.dz").write_bytes(gzip.compress(b"short"))
    with pytest.raises(DictionaryError, match="beyond the end"):
        read_freedict(tmp_path / "x.index")
    (tmp_path / "y.index").write_text("word only\n")
    (tmp_path / "y.dict").write_text("")
    with pytest.raises(DictionaryError, match=r"y\.index:1: not a dictd index line"):
        read_freedict(tmp_path / "y.index")


def test_file_dictionary_spec(tmp_path: Path) -> None:
    path = tmp_path / "en-de.txt"
    path.write_text("house Haus\nwater Wasser extra\nlonely\n\n", encoding="utf-8")
    assert read_dictionary({"type": "file", "path": str(path)}) == [
        ("house", "Haus"), ("water", "Wasser")]
