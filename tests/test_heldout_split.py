"""The world's concepts split into an alignment dictionary and a held-out part: the split
itself, the dictionary WECHSEL and OFA read, and the aligned artifact's record of the pairs
its Procrustes map was fitted on (the aligned_vectors script, run as the workflow runs it)."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from embtransfer.core.atomic import write_json
from embtransfer.fasttext.vectors import train_fasttext
from embtransfer.transfer.aligned import read_aligned_stats
from embtransfer.vocab.canonical import write_vocab
from embtransfer.world.dictionary import dictionary_entries
from embtransfer.world.languages import build_world
from embtransfer.world.running_text import generate_sentences
from embtransfer.world.split import concept_split, dictionary_part, meaning_split

SEED = 1234
SRC, AR = "en_mini", "ar_mini"
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "transfer" / "aligned_vectors.py"
FASTTEXT = {
    "model": "cbow",
    "dim": 16,
    "epoch": 3,
    "min_count": 1,
    "minn": 3,
    "maxn": 5,
    "neg": 5,
    "ws": 3,
    "lr": 0.05,
    "bucket": 20000,
}


@pytest.fixture(scope="module")
def world() -> dict:
    return build_world(None, SEED)


def held_out_words(world: dict, tgt: str, split: dict[str, str]) -> set[str]:
    """Every target word form (lemma, plural) of a held-out concept, from the whole lexicon."""
    return {t for cid, _, t in dictionary_entries(world, SRC, tgt) if split[cid] == "held_out"}


def test_the_split_is_seeded_and_holds_out_about_half_of_every_class(world):
    split = concept_split(world, SEED, 0.5)
    assert split == concept_split(world, SEED, 0.5)  # deterministic
    assert split != concept_split(world, SEED + 1, 0.5)  # and the seed's
    assert set(split) == {c["id"] for c in world["concepts"]}
    classes: dict[str, list[str]] = {}
    for concept in world["concepts"]:
        classes.setdefault(concept["class"], []).append(split[concept["id"]])
    for cls, splits in classes.items():
        assert abs(splits.count("held_out") - len(splits) / 2) <= 0.5, cls
    assert set(concept_split(world, SEED, 0.0).values()) == {"dictionary"}
    with pytest.raises(ValueError, match="dictionary_held_out"):
        concept_split(world, SEED, 1.5)


def test_a_meaning_without_a_concept_is_in_no_split(world):
    split = concept_split(world, SEED, 0.5)
    assert meaning_split("concept:animal_003", split) == split["animal_003"]
    assert {meaning_split(m, split) for m in ("name:p1", "affix:s", "word:the")} == {"none"}


def test_the_dictionary_holds_no_held_out_concept_and_plurals_follow_their_lemma(world):
    split = concept_split(world, SEED, 0.5)
    pairs, record = dictionary_part(world, SRC, AR, SEED, 0.5)
    fitted = record["dictionary_split"]
    assert fitted["concepts"] and all(split[c] == "dictionary" for c in fitted["concepts"])
    assert not {t for _, t in pairs} & held_out_words(world, AR, split)
    assert [list(p) for p in pairs] == fitted["pairs"]
    # a concept's lemma and plural are on the same side
    by_concept: dict[str, set[str]] = {}
    for cid, _, t in dictionary_entries(world, SRC, AR):
        by_concept.setdefault(cid, set()).add(t)
    kept = {t for _, t in pairs}
    for cid, forms in by_concept.items():
        assert forms <= kept if split[cid] == "dictionary" else not forms & kept
    # the whole dictionary is about twice the part
    assert 0.35 < len(pairs) / len(dictionary_entries(world, SRC, AR)) < 0.65


def fake_vocab(path: Path, words: list[str]) -> None:
    table = pd.DataFrame(
        {
            "id": np.arange(len(words), dtype=np.int64),
            "token": words,
            "bytes": [w.encode() for w in words],
            "canonical": words,
            "start": [True] * len(words),
            "kind": ["normal"] * len(words),
            "role": [None] * len(words),
        }
    )
    write_vocab(table, path)


def run_aligned_script(tmp_path: Path, world: dict, dictionary: dict) -> dict:
    """Run workflow/scripts/transfer/aligned_vectors.py as the aligned_vectors rule does, on
    fastText models of the world's own text; the written artifact's statistics."""
    world_path = tmp_path / "world.json"
    write_json(world_path, world)
    inputs = {
        "dictionary": str(world_path) if dictionary["type"] == "world" else dictionary["path"],
        "tokenizers": [],
    }
    for lang in (SRC, AR):
        text = tmp_path / f"{lang}.txt"
        text.write_text(
            "\n".join(generate_sentences(world, lang, 1500, SEED)) + "\n", encoding="utf-8"
        )
        train_fasttext(text, tmp_path / f"{lang}.bin", FASTTEXT, seed=SEED, threads=1)
        fake_vocab(
            tmp_path / f"{lang}.parquet", sorted(world["languages"][lang]["lexicon"].values())[:50]
        )
    inputs |= {
        "source_fasttext": str(tmp_path / f"{SRC}.bin"),
        "target_fasttext": str(tmp_path / f"{AR}.bin"),
        "source_vocab": str(tmp_path / f"{SRC}.parquet"),
        "target_vocab": str(tmp_path / f"{AR}.parquet"),
    }
    out = tmp_path / "aligned.safetensors"
    snakemake = SimpleNamespace(
        input=SimpleNamespace(**inputs),
        output=[str(out)],
        log=[str(tmp_path / "log")],
        wildcards=SimpleNamespace(lang=AR),
        params=SimpleNamespace(
            dictionary=dictionary,
            held_out=0.5,
            seed=SEED,
            source_language=SRC,
            trust_remote_code=False,
            aligned={"token_strings": "text", "duplicate_variants": False},
        ),
    )
    runpy.run_path(str(SCRIPT), init_globals={"snakemake": snakemake}, run_name="__main__")
    return read_aligned_stats(out)


def test_the_aligned_artifact_records_a_fit_on_no_held_out_concept(world, tmp_path):
    stats = run_aligned_script(tmp_path, world, {"type": "world"})
    fitted = stats["dictionary_split"]
    split = concept_split(world, fitted["seed"], fitted["held_out"])
    assert fitted["held_out"] == 0.5 and fitted["seed"] == SEED
    assert fitted["concepts"] and not [c for c in fitted["concepts"] if split[c] != "dictionary"]
    assert not {t for _, t in fitted["pairs"]} & held_out_words(world, AR, split)
    # the record is of the pairs the map saw: as many as it was handed
    assert stats["pairs"] == len(fitted["pairs"]) and stats["pairs_used"] > 0


def test_a_file_dictionary_is_aligned_whole_and_records_no_split(world, tmp_path):
    pairs = dictionary_entries(world, SRC, AR)
    path = tmp_path / "pairs.txt"
    path.write_text("".join(f"{s} {t}\n" for _, s, t in pairs), encoding="utf-8")
    stats = run_aligned_script(tmp_path, world, {"type": "file", "path": str(path)})
    assert "dictionary_split" not in stats and stats["pairs"] == len(pairs)
