"""The calibration table: the run's shared-token figures beside the real ones.

Reads the real table the repository commits (``resources/calibration/real_shared_tokens.csv``,
made by ``analysis/real_shared_tokens.py``) and the run's (rule shared_kinds,
``results/overlap/shared_kinds.csv``: the miniature world's pairs, or every pair of a
real-text run), both with the columns of :data:`embtransfer.vocab.kinds.COLUMNS`, and
compares each figure of the run with the range of its real language (:func:`real_language`:
``ar_mini`` with Arabic, ``vi_mini`` with Vietnamese, a real language with itself) over the
multilingual sources (Gemma 3 and Qwen 3, like the paper's Gemma and XGLM) and every target
family; the English-centric Llama 2's range is shown beside it, not held to.
docs/calibration.md explains the figures and the ranges.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from embtransfer.core.atomic import write_table

#: The multilingual sources, like the paper's: the range the world is held to.
MULTILINGUAL = ("gemma3", "qwen3")
ENGLISH_CENTRIC = ("llama2",)
#: The world's target languages and the real language of their script family.
WORLD_LANGUAGES = {"ar_mini": "ar", "vi_mini": "vi"}


def real_language(lang: str) -> str:
    """The real language whose committed range a run's language is held to: a world
    language's script family (:data:`WORLD_LANGUAGES`), a real language itself."""
    return WORLD_LANGUAGES.get(lang, lang)
#: The figures compared (docs/calibration.md says what each is).
SHOWN = (
    "vocab_coverage_pct",
    "text_coverage_pct",
    "word_pct",
    "piece_pct",
    "name_pct",
    "digits_pct",
    "punct_pct",
    "byte_pct",
    "text_word_pct",
)
CALIBRATION_COLUMNS = [
    "lang",
    "real_lang",
    "source",
    "target",
    "figure",
    "value",
    "real_low",
    "real_high",
    "llama2_low",
    "llama2_high",
    "in_range",
]


def _span(frame: pd.DataFrame, figure: str) -> tuple[float, float]:
    return float(frame[figure].min()), float(frame[figure].max())


def _range(low: float, high: float) -> str:
    return f"{low:.1f}" if low == high else f"{low:.1f}-{high:.1f}"


def calibration_frame(real: pd.DataFrame, world: pd.DataFrame) -> pd.DataFrame:
    """One line per measured pair of the run (``world``: the shared_kinds table) and shown
    figure: its value, the real ranges of its real language (:func:`real_language`;
    multilingual sources; Llama 2) and whether it lies inside the multilingual one. A
    language the real table does not measure has no lines."""
    lines: list[dict[str, Any]] = []
    for lang in dict.fromkeys(world["lang"]):
        measured = real_language(lang)
        multi = real[(real["lang"] == measured) & real["source"].isin(MULTILINGUAL)]
        english = real[(real["lang"] == measured) & real["source"].isin(ENGLISH_CENTRIC)]
        if multi.empty:
            continue
        for pair in world[world["lang"] == lang].itertuples(index=False):
            for figure in SHOWN:
                low, high = _span(multi, figure)
                value = float(getattr(pair, figure))
                lines.append(
                    {
                        "lang": lang,
                        "real_lang": measured,
                        "source": pair.source,
                        "target": pair.target,
                        "figure": figure,
                        "value": value,
                        "real_low": low,
                        "real_high": high,
                        "llama2_low": _span(english, figure)[0],
                        "llama2_high": _span(english, figure)[1],
                        "in_range": bool(low <= value <= high),
                    }
                )
    return pd.DataFrame(lines, columns=CALIBRATION_COLUMNS)


def real_ranges(real: pd.DataFrame) -> str:
    """Markdown: each shown figure's range per language over the three target families, for
    the multilingual sources and for each English-centric one."""
    langs = list(dict.fromkeys(real["lang"]))
    groups = [(lang, MULTILINGUAL) for lang in langs]
    groups += [(lang, (name,)) for lang in langs for name in ENGLISH_CENTRIC]
    frames = [real[(real["lang"] == lang) & real["source"].isin(names)] for lang, names in groups]
    heads = [f"{lang} {', '.join(names)}" for lang, names in groups]
    lines = ["| figure | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for figure in SHOWN:
        cells = [_range(*_span(frame, figure)) for frame in frames]
        lines.append(f"| {figure} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def outside_counts(frame: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Per world language of a :func:`calibration_frame`: how many of its lines lie outside
    the multilingual range, and how many lines it has (every shown figure of every pair)."""
    return {lang: (int((~lines["in_range"]).sum()), len(lines))
            for lang, lines in frame.groupby("lang", sort=False)}


def compare(real: pd.DataFrame, world: pd.DataFrame) -> str:
    """Markdown: per world language, how many of its figures lie outside the multilingual
    range, then each shown figure's real range for the multilingual sources and for Llama 2
    (every family), and the world's value per target (its source in brackets), marked †
    outside the multilingual range."""
    frame = calibration_frame(real, world)
    counts = outside_counts(frame)
    parts = []
    for world_lang, lines in frame.groupby("lang", sort=False):
        pairs = list(dict.fromkeys(zip(lines["source"], lines["target"], strict=True)))
        names = [f"{target} ({source})" for source, target in pairs]
        outside, total = counts[world_lang]
        measured = real_language(world_lang)
        beside = f"{world_lang} beside {measured}" if measured != world_lang else (
            f"{world_lang}, this run's pairs beside the committed {measured} figures")
        parts += [
            f"{beside}: {outside} of {total} figures outside the multilingual range",
            "",
            "| figure | Gemma 3, Qwen 3 | Llama 2 | " + " | ".join(names) + " |",
            "|---|---|---|" + "---|" * len(names),
        ]
        for figure, rows in lines.groupby("figure", sort=False):
            first = rows.iloc[0]
            cells = [
                f"{v:.1f}" + ("" if ok else " †")
                for v, ok in zip(rows["value"], rows["in_range"], strict=True)
            ]
            parts.append(
                f"| {figure} | {_range(first['real_low'], first['real_high'])} | "
                f"{_range(first['llama2_low'], first['llama2_high'])} | " + " | ".join(cells) + " |"
            )
        parts.append("")
    return "\n".join(parts)


INTRO = (
    "What the target vocabularies share with the source, measured on the run's pairs "
    "(`results/overlap/shared_kinds.csv`) as on real ones "
    "(`resources/calibration/real_shared_tokens.csv`: the real Gemma 3, Llama 2, Llama 3 and "
    "Qwen 3 tokenizers against a byte-level BPE, a WordPiece and a Unigram target tokenizer "
    "per language, trained on real text). Each figure of the run stands beside the range of "
    "its real language (the miniature world's script family: ar_mini Arabic, vi_mini "
    "Vietnamese; a real-text run's language: itself, its words from `wordfreq` as the real "
    "table's) over the multilingual sources Gemma 3 and Qwen 3, like the paper's; the "
    "English-centric Llama 2's range is shown beside it. † marks a figure outside the "
    "multilingual range (`in_range` in calibration.csv). docs/calibration.md says what each "
    "figure is."
)
#: The title of calibration.md: the miniature world's, a real-text run's.
TITLES = {True: "# The world's shared tokens beside real ones",
          False: "# This run's shared tokens beside the committed real ones"}


def _world_run(world: pd.DataFrame) -> bool:
    return bool(world["lang"].isin(list(WORLD_LANGUAGES)).any()) or world.empty


def calibration_markdown(real: pd.DataFrame, world: pd.DataFrame) -> str:
    beside = compare(real, world)
    mini = _world_run(world)
    parts = [
        TITLES[mini],
        "",
        INTRO,
        "",
        "## Real ranges over the three target families",
        "",
        real_ranges(real),
        "## The world beside them" if mini else "## The run's pairs beside them",
        "",
        beside or "(no pair of a language the real table measures in this run)\n",
    ]
    return "\n".join(parts)


def write_calibration(
    real_paths: list[str],
    world_paths: list[str],
    csv_path: str | os.PathLike,
    md_path: str | os.PathLike,
) -> pd.DataFrame:
    """Write calibration.{csv,md} from the real table (``real_paths``: its one path) and the
    run's (``world_paths``: the shared_kinds table of the world's or a real-text run's
    pairs); a run with neither writes an empty table."""
    if not world_paths:
        frame = pd.DataFrame(columns=CALIBRATION_COLUMNS)
        text = f"{TITLES[True]}\n\n(no world pairs in this run)\n"
    else:
        real = pd.concat([pd.read_csv(p) for p in real_paths])
        world = pd.concat([pd.read_csv(p) for p in world_paths])
        frame = calibration_frame(real, world)
        text = calibration_markdown(real, world)
    write_table(frame, text, csv_path, md_path)
    return frame
