"""The shared-token classifier (embtransfer.vocab.kinds) on hand-made tokens of Latin,
Arabic and Vietnamese script, its figures on a hand-checked pair, and the world's lexicon."""

from __future__ import annotations

import importlib.util
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.vocab.calibration import WORLD_LANGUAGES, compare, write_calibration
from embtransfer.vocab.kinds import (
    COLUMNS,
    FIGURES,
    KINDS,
    Lexicon,
    script_of,
    shared_kinds,
    shared_token_figures,
    text_kind_shares,
    token_kind,
)
from embtransfer.world.languages import build_world
from embtransfer.world.lexicon import world_lexicon

REPO = Path(__file__).resolve().parents[1]

GERMAN = Lexicon(
    frozenset({"der", "haus", "datei", "berlin"}), "LATIN", foreign=frozenset({"file", "the"})
)
ARABIC = Lexicon(
    frozenset({"كتاب", "الكتاب", "في"}),
    "ARABIC",
    names=frozenset({"محمد"}),
    foreign=frozenset({"book"}),
)
VIETNAMESE = Lexicon(
    frozenset({"của", "người", "việt", "con"}),
    "LATIN",
    names=frozenset({"hanoi"}),
    foreign=frozenset({"the", "do"}),
)


def kind(text: str | bytes, start: bool, lexicon: Lexicon, **kw) -> str:
    raw = text if isinstance(text, bytes) else text.encode("utf-8")
    return token_kind(raw, start, lexicon, **kw)


@pytest.mark.parametrize(("text", "start", "expected"), [
    ("Haus", True, "word"),        # a capital hides no word
    ("haus.", True, "word"),       # edge punctuation (T5's Unigram keeps it on the word)
    ("haus", False, "piece"),      # the same letters continuing a word
    ("ung", False, "piece"),
    ("Verw", True, "piece"),       # a word-initial piece
    ("file", True, "name"),        # a word of the source's language, not of German
    ("file", False, "piece"),      # ... only where it stands as a word
    ("Müller", True, "piece"),     # a capital makes no name either
    ("москва", False, "name"),     # another script, wherever it stands
    ("2024", True, "digits"),
    ("3,5", False, "digits"),
    (".", False, "punct"),
    ("  ", False, "punct"),
    ("→", True, "punct"),
    (b"\xc3", False, "byte"),      # half of "ä"
    ("A", False, "byte"),          # a byte token of the vocabulary (<0x41>)
])  # fmt: skip
def test_latin_tokens(text, start, expected):
    byte = expected == "byte" and text == "A"
    assert kind(text, start, GERMAN, byte=byte) == expected


@pytest.mark.parametrize(("text", "start", "expected"), [
    ("الكتاب", True, "word"),
    ("كتاب", False, "piece"),      # after a glued prefix: a piece of the word
    ("ال", True, "piece"),         # the article, a prefix
    ("محمد", True, "name"),        # a name, known from the lexicon: Arabic has no capitals
    ("محمد", False, "piece"),
    ("book", True, "name"),        # Latin letters in Arabic
    ("ing", False, "name"),        # ... even inside a word
    ("٢٠٢٤", True, "digits"),      # Arabic-Indic digits
    ("،", False, "punct"),         # the Arabic comma
    ("كتاب".encode()[:3], False, "byte"),  # a letter and a half
])  # fmt: skip
def test_arabic_tokens(text, start, expected):
    assert kind(text, start, ARABIC) == expected


@pytest.mark.parametrize(("text", "start", "expected"), [
    ("của", True, "word"),
    (unicodedata.normalize("NFD", "người"), True, "word"),  # decomposed marks: NFC first
    ("Việt", True, "word"),
    ("ngư", False, "piece"),       # ư is a Latin letter: no foreign script
    ("Hanoi", True, "name"),       # a name of the lexicon
    ("the", True, "name"),         # an English word
    ("con", True, "word"),         # a word of both: the language's own first
    ("đ", False, "piece"),
    ("12", False, "digits"),
    ("ệ".encode()[:2], False, "byte"),
])  # fmt: skip
def test_vietnamese_tokens(text, start, expected):
    assert kind(text, start, VIETNAMESE) == expected


def test_script_of_counts_letters_only():
    assert script_of(["của", "người", "đi", "٣"]) == "LATIN"
    assert script_of(["كتاب", "في", "x"]) == "ARABIC"
    with pytest.raises(ValueError, match="no script"):
        script_of(["12", "."])


def vocab(rows: list[tuple[bytes, bool, str]]) -> pd.DataFrame:
    return pd.DataFrame({
        "id": np.arange(len(rows), dtype=np.int64),
        "bytes": [r[0] for r in rows], "start": [r[1] for r in rows],
        "kind": [r[2] for r in rows],
    })  # fmt: skip


def test_figures_on_a_hand_checked_pair():
    target = vocab([
        (b"", False, "special"),           # 0: paired by role, no kind
        (b"haus", True, "normal"),  # 1: word
        (b"ung", False, "normal"),  # 2: piece
        (b"7", False, "normal"),           # 3: digits
        (b".", False, "normal"),           # 4: punct
        (b"\xc3", False, "byte"),          # 5: byte
        (b"der", True, "normal"),  # 6: not shared
        (b"file", True, "normal"),  # 7: name
    ])  # fmt: skip
    overlap = pd.DataFrame(
        {
            "target_id": [0, 1, 2, 3, 4, 5, 7],
            "source_id": [0, 1, 2, 3, 4, 5, 6],
            "how": ["special"] + ["exact"] * 6,
        }
    )
    counts = np.array([0, 10, 5, 0, 5, 0, 20, 0])
    kinds = shared_kinds(target, overlap, GERMAN)
    assert kinds.to_dict() == {1: "word", 2: "piece", 3: "digits", 4: "punct", 5: "byte", 7: "name"}
    fig = shared_token_figures(target, overlap, counts, GERMAN)
    assert list(fig) == list(FIGURES)
    assert fig["shared"] == 7 and fig["target_vocab_size"] == 8
    assert fig["vocab_coverage_pct"] == 87.5
    assert fig["text_coverage_pct"] == 50.0  # 20 of 40 tokens; "der" spells the rest
    assert fig["text_word_pct"] == 25.0
    assert fig["shared_text_tokens"] == 6
    assert [fig[f"{k}_pct"] for k in KINDS] == [16.67] * 6


def test_text_kind_shares_count_occurrences_on_the_hand_checked_pair():
    """The running text of the pair above, token by token: haus x10 (shared word), ung x5
    (shared piece), . x5 (shared punct), der x20 (a word the source lacks)."""
    target = vocab([
        (b"", False, "special"), (b"haus", True, "normal"), (b"ung", False, "normal"),
        (b".", False, "normal"), (b"der", True, "normal"),
    ])  # fmt: skip
    overlap = pd.DataFrame(
        {"target_id": [0, 1, 2, 3], "source_id": [0, 1, 2, 3], "how": ["special"] + ["exact"] * 3}
    )
    shares = text_kind_shares(target, overlap, np.array([7, 10, 5, 5, 20]), GERMAN)
    assert set(shares) == {f"{side}_{k}" for side in ("shared", "other") for k in KINDS}
    expected = {"shared_word": 25.0, "shared_piece": 12.5, "shared_punct": 12.5, "other_word": 50.0}
    assert shares == {key: expected.get(key, 0.0) for key in shares}


@pytest.fixture(scope="module")
def world():
    return build_world(None, 1234)


def test_world_lexicon_knows_words_inflections_names_and_the_source(world):
    for lang, script in (("ar_mini", "ARABIC"), ("vi_mini", "LATIN")):
        lex = world_lexicon(world, lang)
        target = world["languages"][lang]
        assert lex.script == script
        native = [w for c, w in target["lexicon"].items() if c not in target["loanwords"]]
        assert token_kind(native[0].encode(), True, lex) == "word"
        name = next(iter(target["names"].values()))
        assert token_kind(name.encode(), True, lex) == "name"
        source_word = next(iter(world["languages"]["en_mini"]["lexicon"].values()))
        assert token_kind(source_word.encode(), True, lex) == "name"
        assert not lex.words & lex.foreign
    # an inflected form and a free grammatical word (vi_mini's plural particle) are words; a
    # loanword kept in the source's spelling is the source's
    ar = world["languages"]["ar_mini"]
    lemma = next(w for c, w in ar["lexicon"].items() if c not in ar["loanwords"])
    plural = lemma + ar["morphology"]["plural"]["suffix"]
    assert token_kind(plural.encode(), True, world_lexicon(world, "ar_mini")) == "word"
    particle = world["languages"]["vi_mini"]["morphology"]["plural"]["particle"]
    assert token_kind(particle.encode(), True, world_lexicon(world, "vi_mini")) == "word"
    kept = next(c for c, how in ar["loanwords"].items() if how == "kept")
    assert token_kind(ar["lexicon"][kept].encode(), True, world_lexicon(world, "ar_mini")) == "name"


def _real_script():
    """``analysis/real_shared_tokens.py`` loaded as a module."""
    path = REPO / "analysis" / "real_shared_tokens.py"
    spec = importlib.util.spec_from_file_location("real_shared_tokens", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_real_table_has_every_pair_and_the_code_s_columns():
    # made by analysis/real_shared_tokens.py; regenerate it when FIGURES change
    script = _real_script()
    table = pd.read_csv(script.TABLE)
    assert tuple(table.columns) == COLUMNS
    assert len(table) == len(script.SOURCES) * 9
    assert set(table["source"]) == set(script.SOURCES)
    assert set(table["lang"]) == set(WORLD_LANGUAGES.values()) | {"de"}
    shares = table[[f"{k}_pct" for k in KINDS]].sum(axis=1)
    assert np.allclose(shares, 100.0, atol=0.05)
    assert (table["text_word_pct"] <= table["text_coverage_pct"]).all()


def test_compare_marks_world_figures_outside_the_multilingual_range():
    real = pd.DataFrame(
        [
            {
                "lang": "ar",
                "source": s,
                "target": "ar_x",
                "scheme": "wordpiece",
                **dict.fromkeys(FIGURES, v),
            }
            for s, v in (("gemma3", 10.0), ("qwen3", 20.0), ("llama2", 1.0))
        ]
    )
    world = pd.DataFrame(
        [
            {
                "lang": "ar_mini",
                "source": "src",
                "target": t,
                "scheme": "wordpiece",
                **dict.fromkeys(FIGURES, v),
            }
            for t, v in (("in", 15.0), ("out", 1.0))
        ]
    )
    text = compare(real, world)
    assert "| word_pct | 10.0-20.0 | 1.0 | 15.0 | 1.0 † |" in text
    assert "vi_mini" not in text  # no world rows, no section


def test_calibration_table_flags_each_world_figure_outside_its_family_s_range(tmp_path):
    real = pd.read_csv(_real_script().TABLE)
    world = real[(real["lang"] == "ar") & (real["source"] == "gemma3")].assign(
        lang="ar_mini", source="src"
    )
    world.loc[world.index[0], "word_pct"] = 99.0  # outside Gemma 3 and Qwen 3's Arabic range
    (tmp_path / "world.csv").write_text(world.to_csv(index=False))
    frame = write_calibration(
        [_real_script().TABLE], [str(tmp_path / "world.csv")], tmp_path / "c.csv", tmp_path / "c.md"
    )
    multi = real[(real["lang"] == "ar") & real["source"].isin(["gemma3", "qwen3"])]
    expected = [
        bool(multi[f].min() <= v <= multi[f].max())
        for _, row in world.iterrows()
        for f in frame["figure"].unique()
        for v in [row[f]]
    ]
    assert list(frame["in_range"]) == expected
    assert not expected[2] and sum(not e for e in expected) == 1  # Gemma 3's own figures fit
    text = (tmp_path / "c.md").read_text()
    assert "| word_pct | 34.9-42.6 | 3.5-7.2 | 99.0 † |" in text  # docs/calibration.md's range
    assert "| vi Gemma 3, Qwen 3 |" not in text and "| vi gemma3, qwen3 |" in text
    assert pd.read_csv(tmp_path / "c.csv")["in_range"].dtype == bool
    write_calibration([], [], tmp_path / "c.csv", tmp_path / "c.md")
    assert "(no world pairs in this run)" in (tmp_path / "c.md").read_text()


def test_a_real_text_runs_pairs_stand_beside_their_own_languages_committed_range(tmp_path):
    """A real-text run's shared_kinds table (languages de, vi; the run's own source and
    PLMs) is held to the committed range of the same language; a language the committed
    table does not measure has no line."""
    real = pd.read_csv(_real_script().TABLE)
    run = real[real["source"] == "gemma3"].assign(source="llama_en")
    run["target"] = run["target"].str.replace("_bytelevel_bpe", "_gpt2")
    run = pd.concat([run[run["lang"].isin(["de", "vi"])],
                     run[run["lang"] == "de"].head(1).assign(lang="xx", target="gpt2_xx")])
    run.loc[run.index[0], "word_pct"] = 99.0
    (tmp_path / "run.csv").write_text(run.to_csv(index=False))
    frame = write_calibration(
        [_real_script().TABLE], [str(tmp_path / "run.csv")], tmp_path / "c.csv", tmp_path / "c.md"
    )
    assert set(frame["lang"]) == {"de", "vi"} and (frame["lang"] == frame["real_lang"]).all()
    de = real[(real["lang"] == "de") & real["source"].isin(["gemma3", "qwen3"])]
    line = frame[(frame["target"] == run["target"].iloc[0]) & (frame["figure"] == "word_pct")]
    assert line["value"].iloc[0] == 99.0 and not line["in_range"].iloc[0]
    assert (line["real_low"].iloc[0], line["real_high"].iloc[0]) == (
        de["word_pct"].min(), de["word_pct"].max())
    assert int((~frame["in_range"]).sum()) == 1  # Gemma 3's own figures lie in the range
    text = (tmp_path / "c.md").read_text()
    assert text.startswith("# This run's shared tokens beside the committed real ones")
    assert "de, this run's pairs beside the committed de figures: 1 of 27 figures" in text
    assert "gpt2_xx" not in text


def _docs_world_tables() -> tuple[pd.DataFrame, dict[str, set[tuple[str, str]]]]:
    """The default world's figures as docs/calibration.md's "Where the default world stands"
    prints them, and per language the (target, figure) cells it marks †."""
    text = (REPO / "docs" / "calibration.md").read_text()
    section = text.split("### Where the default world stands", 1)[1]
    rows, marked = {}, {}
    for world_lang in WORLD_LANGUAGES:
        block = section.split(f"`{world_lang}` beside", 1)[1].split("\n\n", 2)[1]
        lines = [line.strip("|").split("|") for line in block.splitlines()]
        targets = [c.strip() for c in lines[0][3:]]
        marked[world_lang] = set()
        for cells in lines[2:]:
            figure = cells[0].strip()
            for target, cell in zip(targets, cells[3:], strict=True):
                rows.setdefault((world_lang, target), {})[figure] = float(cell.strip(" †"))
                if "†" in cell:
                    marked[world_lang].add((target, figure))
    world = pd.DataFrame([{"lang": lang, "source": "llama_mini", "target": target, **figures}
                          for (lang, target), figures in rows.items()])
    return world, marked


def test_the_calibration_headline_counts_every_figure_of_its_table():
    """The headline counts each world language's † over every figure its table shows, and
    docs/calibration.md quotes the count of the default world's table it prints."""
    from embtransfer.vocab.calibration import SHOWN, calibration_frame, outside_counts

    real = pd.read_csv(_real_script().TABLE)
    world, marked = _docs_world_tables()
    frame = calibration_frame(real, world)
    for world_lang, cells in marked.items():  # the docs' † are the code's
        lines = frame[frame["lang"] == world_lang]
        outside = {(t, f) for t, f, ok in zip(lines["target"], lines["figure"],
                                              lines["in_range"], strict=True) if not ok}
        assert outside == cells, world_lang
    counts = outside_counts(frame)
    assert counts == {"ar_mini": (14, 27), "vi_mini": (7, 27)}
    assert counts["ar_mini"][1] == 3 * len(SHOWN)  # vocabulary coverage counted too
    sentence = "14 of 27 Arabic and 7 of 27 Vietnamese figures"
    assert sentence in " ".join((REPO / "docs" / "calibration.md").read_text().split())
    text = compare(real, world)
    for world_lang, (out, total) in counts.items():
        section = text.split(f"{world_lang} beside", 1)[1].split(" beside ", 1)[0]
        assert section.count("†") == out
        assert f"{out} of {total} figures outside" in section
