"""The installed fastText trains the same model as fastText 0.9.3 built from source.

The set-up installs the prebuilt ``fasttext-wheel`` (0.9.2) instead of compiling
``fasttext`` 0.9.3 (over a minute per environment). The C++ training code is the same;
this test holds the wheel to it: on a fixed corpus, seed and one thread, the saved
model (both matrices, the dictionary, the arguments) is byte for byte the one that
fastText 0.9.3 built from source wrote, in both training modes.

The reference under ``tests/fixtures/fasttext/`` was written by a source build:
``pip install --no-binary fasttext fasttext==0.9.3`` in a fresh environment, then
``python tests/test_fasttext_build.py tests/fixtures/fasttext``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np

from embtransfer.fasttext.vectors import load_fasttext, train_fasttext

REFERENCE = Path(__file__).parent / "fixtures" / "fasttext"
PARAMS = {"dim": 16, "epoch": 2, "min_count": 1, "minn": 2, "maxn": 4, "neg": 3, "ws": 3,
          "lr": 0.05, "bucket": 5000}
MODES = ("cbow", "skipgram")


def write_corpus(path: Path) -> None:
    rng = random.Random(0)
    syllables = ["ha", "us", "hu", "nd", "ka", "tz", "ba", "um", "grü", "schö", "üb", "ße"]
    words = ["haus", "straße"] + [
        "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(300)
    ]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) for _ in range(1500)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def train(out: Path) -> dict[str, dict]:
    """Train both modes into ``out``: each model's sha256 and its word vectors."""
    out.mkdir(parents=True, exist_ok=True)
    write_corpus(out / "corpus.txt")
    found = {}
    for mode in MODES:
        model_bin = out / f"{mode}.bin"
        train_fasttext(out / "corpus.txt", model_bin, {"model": mode, **PARAMS}, seed=1,
                       threads=1)
        model = load_fasttext(model_bin)
        words = sorted(model.words)
        found[mode] = {
            "sha256": hashlib.sha256(model_bin.read_bytes()).hexdigest(),
            "words": words,
            "vectors": np.stack([model.get_word_vector(w) for w in words]),
        }
    return found


def test_the_installed_fasttext_trains_the_source_builds_model(tmp_path):
    expected = json.loads((REFERENCE / "reference.json").read_text())
    found = train(tmp_path)
    for mode in MODES:
        vectors = np.load(REFERENCE / f"{mode}.npy")
        assert found[mode]["words"] == expected[mode]["words"], mode
        diff = float(np.abs(found[mode]["vectors"] - vectors).max())
        assert found[mode]["sha256"] == expected[mode]["sha256"], (
            f"{mode}: the installed fastText ({expected['build']} wrote the reference) saved "
            f"another model; largest word-vector difference {diff:.3g}"
        )


if __name__ == "__main__":  # write the reference with a source build of fastText 0.9.3
    from importlib.metadata import version

    dest = Path(sys.argv[1])
    result = train(dest / "work")
    for mode in MODES:
        np.save(dest / f"{mode}.npy", result[mode]["vectors"])
    record = {"build": f"fasttext {version('fasttext')} built from source"}
    record.update({m: {"sha256": result[m]["sha256"], "words": result[m]["words"]}
                   for m in MODES})
    (dest / "reference.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
