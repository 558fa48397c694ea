"""Real text and real dictionaries (tests/fixtures/real, slices of the packages that the data
stage's real-text builder, embtransfer/data/real_text.py, turns into the corpora of
config/real_text.yaml), and the builder's parsing of each source format."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from embtransfer.data import real_text
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
        forward[0][1],
        forward[0][0],
    )


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
        ("house", "Haus"),
        ("water", "Wasser"),
    ]


# --------------------------------------------------------------------------- the builder


def test_html_lines_one_block_a_line_scripts_dropped() -> None:
    page = (
        "<html><head><title>Help</title><script>var x = 1;</script></head><body>"
        "<h1>Tabellen  einfügen</h1><p>Eine <b>Tabelle</b> hat\nZeilen.</p>"
        "<ul><li>erste</li><li>zweite</li></ul></body></html>"
    )
    lines = [line for line in real_text.html_lines(page) if line]
    assert lines == ["Help", "Tabellen einfügen", "Eine Tabelle hat Zeilen.", "erste", "zweite"]


def test_roff_lines_macros_and_escapes_stripped() -> None:
    page = (
        '.\\" a comment\n.TH LS 1\n.SH BESCHREIBUNG\nListet \\fBDateien\\fR auf,\n'
        'sortiert \\- nach Namen.\n.PP\n.B "fett gesetzt"\nund weiter\n\nNeuer Absatz\n'
    )
    lines = [line for line in real_text.roff_lines(page) if line]
    assert lines == [
        "BESCHREIBUNG",
        "Listet Dateien auf, sortiert - nach Namen.",
        "fett gesetzt und weiter",
        "Neuer Absatz",
    ]


def test_hadith_lines_drop_vowel_marks(tmp_path: Path) -> None:
    data = tmp_path / "pkg" / "data" / "tirmidhi.json.gz"
    data.parent.mkdir(parents=True)
    text = "\u0642\u064e\u0627\u0644\u064e \u0631\u064e\u0633\u064f\u0648\u0644\u064f\u200f"
    data.write_bytes(gzip.compress(json.dumps({"hadiths": [{"arabic": text}]}).encode()))
    assert real_text.hadith_lines(tmp_path) == ["\u0642\u0627\u0644 \u0631\u0633\u0648\u0644"]


def test_build_corpus_keeps_running_text_in_the_language_once(monkeypatch) -> None:
    monkeypatch.setitem(real_text.SOURCES, "xx", [("help", "a"), ("man", "b")])
    mine = {"eins", "zwei", "drei", "vier", "fünf"}
    monkeypatch.setattr(
        real_text,
        "in_language",
        lambda line, lang: sum(w in mine for w in line.split()) / len(line.split()),
    )
    sources = {
        "a": ["eins zwei drei vier", "eins  zwei drei vier", "kurz zwei", "one two three four"],
        "b": ["fünf vier drei zwei eins", "eins zwei drei vier"],
    }
    lines, stats = real_text.build_corpus("xx", 10_000, read=lambda kind, pkg: sources[pkg])
    # NFC, whitespace collapsed, deduplicated across sources, short and foreign lines dropped
    assert sorted(lines) == ["eins zwei drei vier", "fünf vier drei zwei eins"]
    assert stats["a"]["chars_kept"] == len("eins zwei drei vier") and stats["b"]["chars_kept"] == 24
    assert stats["corpus"]["lines"] == 2 and stats["corpus"]["share_in_language"] == round(
        43 / 45, 3
    )  # per char, line ends too
    capped, _ = real_text.build_corpus("xx", 20, read=lambda kind, pkg: sources[pkg])
    assert len(capped) == 1  # the cap counts characters and line ends


def test_in_language_by_script_for_arabic() -> None:
    assert real_text.in_language("\u0642\u0627\u0644 word", "ar") == 0.5
    assert real_text.in_language("123 ...", "ar") == 0.0


def test_builder_names_what_it_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(real_text.RealTextError, match="no real-text sources for 'fr'"):
        real_text.build_corpus("fr", 100)
    with pytest.raises(real_text.RealTextError, match="no pinned FreeDict package for 'eng-fra'"):
        real_text.write_freedict("eng-fra", tmp_path / "i", tmp_path / "d")
    with pytest.raises(real_text.RealTextError, match="unknown source kind 'pdf'"):
        list(real_text.source_lines("pdf", tmp_path))
    (tmp_path / "x.deb").write_bytes(b"not the pinned file")
    with pytest.raises(real_text.RealTextError, match="is not the pinned"):
        real_text._checked(tmp_path / "x.deb", "0" * 64, "x")


def test_fixture_slices_reread_as_dictionaries(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "corpora").mkdir(parents=True)
    (real / "dictionaries").mkdir()
    for lang in real_text.SOURCES:
        shutil.copy(REAL / f"{lang}.txt", real / "corpora" / f"{lang}.txt")
    for pair in real_text.DICTIONARIES:
        for suffix in (".index", ".dict.dz"):
            shutil.copy(REAL / f"freedict-{pair}{suffix}", real / "dictionaries")
    real_text.write_fixture(tmp_path / "out", real, lines=5, entries=50)
    assert len((tmp_path / "out" / "de.txt").read_text(encoding="utf-8").splitlines()) == 5
    pairs = read_freedict(tmp_path / "out" / "freedict-eng-deu.index")
    assert ("house", "Haus") in pairs and set(pairs) <= set(read_freedict(ENG_DEU))


def _real_lines(lang: str) -> list[str]:
    return (REAL / f"{lang}.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("seed", [0, 1])
def test_byte_shares_of_a_real_mix_are_the_requested_ones(seed: int) -> None:
    """A mix by bytes gives each language its share of the file's UTF-8 bytes, to within one
    line; by lines, its share of the lines (Arabic lines are longer in bytes, so the two
    differ)."""
    from embtransfer.data.corpus import mix_corpora

    en = _real_lines("en")
    others = {lang: _real_lines(lang) for lang in ("de", "ar", "vi")}
    shares = {"de": 0.04, "ar": 0.03, "vi": 0.03}
    mixed = mix_corpora(en, others, shares, seed, unit="bytes")
    assert mixed == mix_corpora(en, others, shares, seed, unit="bytes")
    size = {line: len(line.encode("utf-8")) + 1 for pool in (en, *others.values()) for line in pool}
    total = sum(size[line] for line in mixed)
    assert sum(size[line] for line in mixed if line in set(en)) == sum(size[x] for x in en)
    for lang, pool in others.items():
        got = sum(size[line] for line in mixed if line in set(pool) - set(en))
        one_line = max(size[line] for line in pool)
        assert abs(got - shares[lang] * total) <= one_line, lang
    by_lines = mix_corpora(en, others, shares, seed)
    ar = set(others["ar"])
    assert sum(line in ar for line in by_lines) == round(0.03 * len(en) / 0.9)


def test_byte_mix_draws_the_prefix_nearest_the_target() -> None:
    from embtransfer.data.corpus import _lines_nearest

    pool = ["a" * k for k in (5, 0, 9, 2, 30, 1)]
    cum = [0]
    for line in pool:
        cum.append(cum[-1] + len(line) + 1)
    for want in [0, 3, 5.9, 6, 7, 16, 17, 18, 20, 40, 60, 1000]:
        best = min(range(len(pool) + 1), key=lambda n: (abs(cum[n] - want), n))
        assert _lines_nearest(pool, want) == best, want


def test_a_byte_share_larger_than_the_corpus_is_refused() -> None:
    from embtransfer.data.corpus import mix_corpora

    with pytest.raises(ValueError, match="needs .* bytes, its corpus has only"):
        mix_corpora(_real_lines("en"), {"ar": _real_lines("ar")[:5]}, {"ar": 0.5}, 0, "bytes")
    with pytest.raises(ValueError, match="mix unit"):
        mix_corpora(["x"], {}, {}, 0, "tokens")


def test_bytelevel_bpe_on_real_text_cuts_numbers_into_digits(tmp_path: Path) -> None:
    """The source LLM's tokenizer of a real run: byte-level BPE on the English, German,
    Arabic and Vietnamese fixtures with split_digits: "2026" is four tokens, one a digit,
    and text round-trips."""
    from embtransfer.models.tokenizer_training import train_tokenizer

    files = [str(REAL / f"{lang}.txt") for lang in ("en", "de", "ar", "vi")]
    tok = train_tokenizer("bytelevel_bpe", files, 2000, "llama", split_digits=True)
    assert tok.convert_ids_to_tokens(tok("2026", add_special_tokens=False)["input_ids"]) == list(
        "2026"
    )
    sample = "Am 31.12.2026 um 23:59 kostet es 1500 €, ١٢٣ và 2048 người."
    pieces = [tok.decode([i]) for i in tok(sample, add_special_tokens=False)["input_ids"]]
    assert all(sum(ch.isdigit() for ch in p) <= 1 for p in pieces), pieces
    assert tok.decode(tok(sample, add_special_tokens=False)["input_ids"]) == sample
    plain = train_tokenizer("bytelevel_bpe", files, 2000, "llama")
    assert any(sum(ch.isdigit() for ch in t) >= 2 for t in plain.get_vocab())  # it would merge
