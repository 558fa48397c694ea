"""Bilingual lexicon induction in the aligned fastText spaces WECHSEL and OFA search
(embtransfer.transfer.fasttext_bli), its rule's inputs and its report table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from embtransfer.config.validation import validate_config
from embtransfer.core import paths
from embtransfer.core.atomic import write_json
from embtransfer.core.paired import binomial_upper_tail
from embtransfer.data.dictionary_split import split_dictionary, word_key
from embtransfer.report.comparisons import TEST_COLUMNS, decide, frame_of
from embtransfer.report.diagnostics import (
    BLI_COLUMNS,
    BLI_RECORD,
    bli_frame,
    bli_tests,
    write_fasttext_bli,
)
from embtransfer.report.inputs import report_inputs
from embtransfer.transfer.aligned import AlignedVectors, align_from_dictionary, write_aligned
from embtransfer.transfer.fasttext_bli import (
    bli_record,
    held_out_half,
    language_map,
    score_bli,
)
from embtransfer.transfer.inputs import all_fasttext_bli, fasttext_bli_inputs
from embtransfer.world.dictionary import dictionary_entries
from embtransfer.world.languages import build_world
from embtransfer.world.split import concept_split, dictionary_part

REPO = Path(__file__).resolve().parents[1]
DIM = 16


class FakeFastText:
    """The part of a fastText model the alignment and the BLI read: its words and their
    vectors (no n-grams: a word outside the vocabulary has a zero vector)."""

    def __init__(self, words: list[str], vectors: np.ndarray) -> None:
        self.words = list(words)
        self._ids = {w: i for i, w in enumerate(self.words)}
        self._vectors = np.asarray(vectors, np.float32)

    def get_dimension(self) -> int:
        return self._vectors.shape[1]

    def get_word_id(self, word: str) -> int:
        return self._ids.get(word, -1)

    def get_word_vector(self, word: str) -> np.ndarray:
        i = self._ids.get(word, -1)
        return self._vectors[i] if i >= 0 else np.zeros(self._vectors.shape[1], np.float32)


def random_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def spaces(n: int, noise: float, related: bool, seed: int = 0
           ) -> tuple[FakeFastText, FakeFastText, list[tuple[str, str]]]:
    """A source space of ``n`` words and a target space whose word i is source word i
    rotated (plus ``noise``), or an unrelated random space; the pairs (s_i, t_i)."""
    rng = np.random.default_rng(seed)
    source = rng.standard_normal((n, DIM))
    if related:
        target = source @ random_orthogonal(DIM, rng) + noise * rng.standard_normal((n, DIM))
    else:
        target = rng.standard_normal((n, DIM))
    s_words, t_words = [f"src{i}" for i in range(n)], [f"tgt{i}" for i in range(n)]
    pairs = list(zip(s_words, t_words, strict=True))
    return FakeFastText(s_words, source), FakeFastText(t_words, target), pairs


def brute_force(source_ft, target_ft, W, held) -> pd.DataFrame:
    """Per held-out target word: hits at 1 and 10 from the full similarity matrix."""
    cand = np.stack([source_ft.get_word_vector(w) for w in source_ft.words]) @ W
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    gold: dict[str, set[str]] = {}
    for s, t in held:
        gold.setdefault(t, set()).add(s)
    rows = []
    for t, sources in gold.items():
        q = target_ft.get_word_vector(t)
        order = np.argsort(-(cand @ (q / np.linalg.norm(q))), kind="stable")
        ranked = [source_ft.words[i] for i in order]
        rows.append({"target_word": t, **{f"hit_{k}": int(bool(set(ranked[:k]) & sources))
                                          for k in (1, 10)}})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- scoring


def test_a_rotated_copy_retrieves_every_held_out_translation():
    source_ft, target_ft, pairs = spaces(400, 0.0, related=True)
    W, _ = align_from_dictionary(source_ft, target_ft, pairs[:200])
    table, summary = score_bli(source_ft, target_ft, W, pairs[200:])
    assert summary["queries"] == 200 and summary["candidates"] == 400
    assert summary["p_at_1"] == 100.0 and summary["p_at_10"] == 100.0
    assert summary["chance_at_1"] == pytest.approx(100 / 400)
    assert summary["chance_at_10"] == pytest.approx(100 * 10 / 400)
    assert summary["p_value_10"] < 1e-100


def test_the_scores_equal_a_brute_force_ranking():
    # noisy enough that some translations are missed, and a few target words with two
    # translations (a hit is either of them)
    source_ft, target_ft, pairs = spaces(300, 0.9, related=True, seed=1)
    held = pairs[150:] + [(f"src{i}", f"tgt{i + 1}") for i in range(150, 170)]
    W, _ = align_from_dictionary(source_ft, target_ft, pairs[:150])
    table, summary = score_bli(source_ft, target_ft, W, held)
    expected = brute_force(source_ft, target_ft, W, held)
    merged = table.merge(expected, on="target_word", suffixes=("", "_brute"))
    assert len(merged) == len(expected) == 150
    assert (merged["hit_1"] == merged["hit_1_brute"]).all()
    assert (merged["hit_10"] == merged["hit_10_brute"]).all()
    assert 0 < summary["hits_1"] < 150  # the case is not trivial
    # chance: k / N for one translation, 1 - C(N-2, k) / C(N, k) for two
    two = table["gold"].str.contains(" ")
    assert two.sum() == 20
    assert np.allclose(table.loc[~two, "chance_10"], 10 / 300)
    assert np.allclose(table.loc[two, "chance_10"], 1 - math.comb(298, 10) / math.comb(300, 10))


def test_an_unrelated_space_scores_about_chance():
    source_ft, target_ft, pairs = spaces(2000, 0.0, related=False, seed=2)
    W, _ = align_from_dictionary(source_ft, target_ft, pairs[:1000])
    _, summary = score_bli(source_ft, target_ft, W, pairs[1000:])
    assert summary["queries"] == 1000 and summary["chance_at_10"] == pytest.approx(0.5)
    # 5 hits expected at 10 (1000 x 10 / 2000): Poisson's 1e-4 quantile is 16
    assert summary["hits_1"] <= 6 and summary["hits_10"] <= 16
    assert summary["p_value_10"] > 1e-3


def test_a_word_without_a_vector_or_a_source_word_is_left_out_and_counted():
    source_ft, target_ft, pairs = spaces(100, 0.0, related=True)
    W, _ = align_from_dictionary(source_ft, target_ft, pairs[:50])
    held = pairs[50:60] + [("src70", "unknown"), ("nosuchword", "tgt71")]
    table, summary = score_bli(source_ft, target_ft, W, held)
    assert summary["queries"] == 10 and set(table["target_word"]) == {t for _, t in pairs[50:60]}
    assert summary["left_out_no_target_vector"] == 1
    assert summary["left_out_no_source_word"] == 1


def test_the_binomial_tail_equals_the_sum_of_its_terms():
    for hits, n, p in ((0, 10, 0.1), (3, 10, 0.1), (10, 10, 0.5), (7, 40, 0.05)):
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(hits, n + 1))
        assert binomial_upper_tail(hits, n, p) == pytest.approx(exact, rel=1e-9)
    # where math.comb times a float would overflow: finite, and tiny
    assert 0.0 <= binomial_upper_tail(600, 2000, 0.005) < 1e-300


# --------------------------------------------------------------------------- held-out half


def freedict_case(tmp_path: Path, scramble: bool) -> tuple[Any, Any, Path, Any]:
    """A rotated copy split as a real dictionary is (by headword); the aligned artifact
    written as the aligned_vectors rule writes it, fitted on the dictionary half only.
    ``scramble``: every held-out pair names a wrong translation (the next word's)."""
    source_ft, target_ft, pairs = spaces(300, 0.0, related=True, seed=3)
    split = split_dictionary(pairs, seed=7, held_out=0.5)
    record = split.record
    if scramble:
        record = {**record, "held_out_pairs": [
            [f"src{(int(s[3:]) + 1) % 300}", t] for s, t in record["held_out_pairs"]]}
    W, stats = align_from_dictionary(source_ft, target_ft, split.dictionary)
    path = tmp_path / "aligned.safetensors"
    empty = AlignedVectors(np.zeros((1, DIM), np.float32), np.ones(1, bool),
                           np.zeros((1, DIM), np.float32), np.ones(1, bool))
    write_aligned(path, empty, W, stats | {"dictionary_split": record})
    return source_ft, target_ft, path, split


def test_a_real_dictionary_is_scored_on_its_held_out_half_only(tmp_path):
    source_ft, target_ft, path, split = freedict_case(tmp_path, scramble=False)
    W, stats = language_map([path])
    held, counts = held_out_half(stats, None, "en", "de")
    fitted = {word_key(t) for _, t in split.dictionary}
    assert held == split.held_out and held and not {word_key(t) for _, t in held} & fitted
    table, record = bli_record(source_ft, target_ft, [path], None, "en", "de")
    assert set(table["target_word"]) == {t for _, t in held}
    assert not set(table["target_word"]) & fitted
    assert record["queries"] == len(held) and record["p_at_1"] == 100.0


def test_scoring_reads_the_held_out_pairs_not_the_fitted_ones(tmp_path):
    # the fit is perfect on its own pairs; the held-out pairs name wrong translations, so
    # scoring them gives no hit at 1 where scoring the fitted pairs would give every one
    source_ft, target_ft, path, _ = freedict_case(tmp_path, scramble=True)
    _, record = bli_record(source_ft, target_ft, [path], None, "en", "de")
    assert record["fit_precision_at_1"] == 100.0
    assert record["queries"] > 100 and record["p_at_1"] == 0.0


def test_a_world_dictionary_holds_out_its_held_out_concepts():
    world = build_world(None, 1234)
    pairs, fitted = dictionary_part(world, "en_mini", "ar_mini", 1234, 0.5)
    held, counts = held_out_half(fitted, world, "en_mini", "ar_mini")
    split = concept_split(world, 1234, 0.5)
    by_target = {t: cid for cid, _, t in dictionary_entries(world, "en_mini", "ar_mini")}
    assert held and all(split[by_target[t]] == "held_out" for _, t in held)
    assert not {word_key(t) for _, t in held} & {word_key(t) for _, t in pairs}
    assert counts["held_out_pairs"] - counts["dropped_seen_by_fit"] == len(held)
    with pytest.raises(ValueError, match="pass the world"):
        held_out_half(fitted, None, "en_mini", "ar_mini")


def test_a_map_fitted_on_the_whole_dictionary_is_refused():
    with pytest.raises(ValueError, match="no held-out half"):
        held_out_half({"pairs": 10}, None, "en", "de")


def test_artifacts_of_one_language_with_different_maps_are_refused(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    _, _, first, _ = freedict_case(tmp_path / "a", scramble=False)
    _, _, second, _ = freedict_case(tmp_path / "b", scramble=False)
    _, _, other, _ = freedict_case(tmp_path / "c", scramble=True)  # another record
    W, _ = language_map([first, second])  # the same fit: one map
    with pytest.raises(ValueError, match="different maps"):
        language_map([first, other])


# --------------------------------------------------------------------------- the workflow


def test_the_rule_script_writes_the_record_of_the_language(tmp_path, monkeypatch):
    import runpy
    from types import SimpleNamespace

    import embtransfer.fasttext.vectors as vectors
    from embtransfer.core.atomic import read_json

    source_ft, target_ft, path, _ = freedict_case(tmp_path, scramble=False)
    models = {"en.bin": source_ft, "de.bin": target_ft}
    monkeypatch.setattr(vectors, "load_fasttext", lambda p: models[Path(p).name])
    out = tmp_path / paths.FASTTEXT_BLI.fill(lang="de")
    snakemake = SimpleNamespace(
        input=SimpleNamespace(source_fasttext="en.bin", target_fasttext="de.bin",
                              aligned=[str(path)], keys=lambda: ["source_fasttext",
                                                                 "target_fasttext", "aligned"]),
        output=[str(out)], log=[str(tmp_path / "log")], wildcards=SimpleNamespace(lang="de"),
        params=SimpleNamespace(source_language="en"),
    )
    script = REPO / "workflow" / "scripts" / "transfer" / "fasttext_bli.py"
    runpy.run_path(str(script), init_globals={"snakemake": snakemake}, run_name="__main__")
    _, expected = bli_record(source_ft, target_ft, [path], None, "en", "de")
    assert read_json(out) == expected and expected["p_at_10"] == 100.0



def load(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()))


def test_the_default_and_real_small_runs_score_every_language_wechsel_and_ofa_run_in():
    default = load("config.yaml")
    assert all_fasttext_bli(default) == [
        paths.FASTTEXT_BLI.fill(lang=lang, seed=1234) for lang in ("ar_mini", "vi_mini")]
    inputs = fasttext_bli_inputs(default, {"lang": "vi_mini", "seed": "1234"})
    assert inputs == {
        "source_fasttext": paths.FASTTEXT_WORD.fill(lang="en_mini", seed=1234),
        "target_fasttext": paths.FASTTEXT_WORD.fill(lang="vi_mini", seed=1234),
        # WECHSEL and OFA run with the GPT-2 PLM only
        "aligned": [paths.ALIGNED.fill(lang="vi_mini", source="llama_mini",
                                       target="gpt2_vi_mini", seed=1234)],
        "world": paths.WORLD,
    }
    assert report_inputs(default)["fasttext_bli"] == all_fasttext_bli(default)
    real = load("real_small.yaml")  # vi has no dictionary: no WECHSEL, no OFA
    assert all_fasttext_bli(real) == [paths.FASTTEXT_BLI.fill(lang=lang, seed=seed)
                                      for seed in real["seeds"] for lang in ("de", "ar")]
    assert "world" not in fasttext_bli_inputs(real, {"lang": "de", "seed": "1235"})
    # without WECHSEL and OFA, or without a held-out half, nothing is scored
    assert all_fasttext_bli({**real, "dictionary_held_out": 0}) == []
    only_salt = {**real, "transfer": {**real["transfer"], "select": [{"methods": ["salt"]}]}}
    assert all_fasttext_bli(only_salt) == []


# --------------------------------------------------------------------------- the report


def test_the_report_table_rows_equal_the_per_language_records(tmp_path):
    records = {
        "de": {"lang": "de", "source_language": "en", "queries": 400, "candidates": 5000,
               "p_at_1": 20.0, "chance_at_1": 0.02, "hits_1": 80, "p_value_1": 1e-150,
               "p_at_10": 45.0, "chance_at_10": 0.2, "hits_10": 180, "p_value_10": 1e-200,
               "scored_pairs": 600, "held_out_pairs": 650, "dropped_seen_by_fit": 50,
               "left_out_no_target_vector": 150, "left_out_no_source_word": 30,
               "fit_pairs_used": 700, "fit_precision_at_1": 60.0, "fit_p1_candidates": 650},
        "ar": {"lang": "ar", "source_language": "en", "queries": 90, "candidates": 5000,
               "p_at_1": 0.0, "chance_at_1": 0.02, "hits_1": 0, "p_value_1": 1.0,
               "p_at_10": 1.1, "chance_at_10": 0.2, "hits_10": 1, "p_value_10": 0.165,
               "scored_pairs": 300, "held_out_pairs": 310, "dropped_seen_by_fit": 10,
               "left_out_no_target_vector": 200, "left_out_no_source_word": 10,
               "fit_pairs_used": 250, "fit_precision_at_1": 30.0, "fit_p1_candidates": 240},
    }
    records["vi"] = {**{k: None for k in records["de"]}, "lang": "vi", "queries": 0,
                     "candidates": 5000}
    files = []
    for lang, record in records.items():
        path = tmp_path / paths.FASTTEXT_BLI.fill(lang=lang)
        write_json(path, record)
        files.append(str(path))
    frame = bli_frame(files)
    tests = bli_tests(frame)
    # one test per language with queries, its P@10 against chance by the record's p-value
    assert [(t["lang"], t["source"], t["p"]) for t in tests] == [("de", "en", 1e-200),
                                                                  ("ar", "en", 0.165)]
    assert [t["diff"] for t in tests] == pytest.approx([45.0 - 0.2, 1.1 - 0.2])
    assert {(t["family"], t["metric"], t["versus"]) for t in tests} == {
        ("fasttext_bli", "bli_p_at_10", "chance")}
    decided = decide(frame_of(tests, TEST_COLUMNS))
    write_fasttext_bli(frame, decided, tmp_path / "bli.csv", tmp_path / "bli.md")
    written = pd.read_csv(tmp_path / "bli.csv")
    assert list(written.columns) == BLI_COLUMNS and len(written) == 3
    better = set(decided.loc[decided["relation"] == "better", "lang"])
    assert better == {"de"}
    for line in written.to_dict("records"):
        record = records[line.pop("lang")]
        above = line.pop("above_chance")
        line = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in line.items()}
        assert line == {k: v for k, v in record.items() if k != "lang"}
        assert above == (record["lang"] in better)
    text = (tmp_path / "bli.md").read_text()
    assert "| de | 400 |" in text
    verdicts = {line.split("|")[1].strip(): line.split("|")[9].strip()
                for line in text.splitlines() if line.startswith("| ") and "language" not in line}
    assert verdicts == {"de": "yes", "ar": "no", "vi": "no"}


def test_above_chance_is_the_decided_tables_call(tmp_path):
    """A p-value of 6e-4 clears alone (below 0.001) but not beside a second language's
    (Holm's first step then needs 0.0005): above chance follows the decided family."""
    def record(lang: str, p: float) -> dict:
        return {"lang": lang, "source_language": "en", "queries": 100, "candidates": 5000,
                "p_at_10": 5.0, "chance_at_10": 0.2, "p_value_10": p}

    alone = pd.DataFrame([record("de", 6e-4)], columns=BLI_RECORD)
    assert write_fasttext_bli(alone, decide(frame_of(bli_tests(alone), TEST_COLUMNS)),
                              tmp_path / "a.csv", tmp_path / "a.md")["above_chance"].tolist() \
        == [True]
    both = pd.DataFrame([record("de", 6e-4), record("ar", 0.9)], columns=BLI_RECORD)
    decided = decide(frame_of(bli_tests(both), TEST_COLUMNS))
    assert write_fasttext_bli(both, decided, tmp_path / "b.csv", tmp_path / "b.md")[
        "above_chance"].tolist() == [False, False]


def test_a_record_under_another_language_is_refused(tmp_path):
    path = tmp_path / paths.FASTTEXT_BLI.fill(lang="de")
    write_json(path, {"lang": "ar"})
    with pytest.raises(ValueError, match="record of 'ar'"):
        bli_frame([str(path)])
    with pytest.raises(ValueError, match="not a fastText BLI record"):
        bli_frame([str(tmp_path / "de.json")])
