"""The miniature world's ground truth, the oracle method, the alignment metric, the alignment
table's lines for the report's spine and the paired tests, on hand-built cases and against
slow, obviously correct references."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from embtransfer.config.validation import ConfigError, validate_config
from embtransfer.core import paths
from embtransfer.core.paired import (
    BOOTSTRAP_SAMPLES,
    binomial_two_sided,
    mcnemar,
    normal_p,
    paired_bootstrap,
)
from embtransfer.evaluation.alignment import (
    chance_hits,
    score_checkpoints,
    summary,
    token_scores,
)
from embtransfer.evaluation.world_tasks import fact_docs, native_words, word_answer
from embtransfer.models.loading import Embeddings
from embtransfer.report.comparisons import (
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    decide,
    detectable_discordant,
    frame_of,
    power,
)
from embtransfer.report.setting_tables import alignment_lines, read_alignment
from embtransfer.transfer.method_catalog import DEFAULT_METHODS, METHODS
from embtransfer.transfer.methods.base import TransferInputs, get_method
from embtransfer.world.languages import build_world, value_pool
from embtransfer.world.split import concept_split
from embtransfer.world.truth import source_form, token_truth

SEED = 1234
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world():
    return build_world(None, SEED)


def vocab(texts, starts=None, kinds=None):
    n = len(texts)
    return pd.DataFrame({
        "id": np.arange(n, dtype=np.int64), "token": texts,
        "bytes": [t.encode() for t in texts], "canonical": texts,
        "start": starts if starts is not None else [True] * n,
        "kind": kinds if kinds is not None else ["normal"] * n, "role": [None] * n,
    })


class FakeSource:
    """A source 'tokenizer' that gives every distinct text a fresh id (recorded)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, texts):
        return [[self.ids.setdefault(t, len(self.ids) + 1)] for t in texts]


# --- ground truth ----------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["ar_mini", "vi_mini"])
def test_every_lexicon_word_maps_to_its_concepts_source_word(world, lang):
    target = world["languages"][lang]
    source = world["languages"][world["source_language"]]
    concepts = [c for c in target["lexicon"]]
    texts = [target["lexicon"][c] for c in concepts] + ["qqzq", "\u0628"]
    encode = FakeSource()
    split = concept_split(world, SEED, 0.5)
    table, counts = token_truth(world, lang, vocab(texts), vocab(["<s>"], kinds=["special"]),
                                encode, np.array([], np.int64), split=split)
    by_id = table.set_index("target_id")
    # brute force: a lemma maps to its concept unless another reading of the text exists
    forms = {}
    for c, w in target["lexicon"].items():
        forms.setdefault(w, set()).add(c)
    checked = 0
    for i, c in enumerate(concepts):
        if i not in by_id.index:
            continue
        row = by_id.loc[i]
        kind, _, value = row["meaning"].partition(":")
        if kind == "concept":
            assert value == c
            expected = " " + source["lexicon"][c]
            assert [encode.ids[expected]] == list(row["source_ids"])
            assert row["split"] == split[c]  # a concept's row carries its concept's split
            checked += 1
    assert checked >= 0.8 * len(concepts)
    assert len(texts) - 2 not in by_id.index and len(texts) - 1 not in by_id.index
    assert counts["nonshared"] == len(texts) and counts["with_truth"] == len(table)
    assert counts["nonshared_with_truth"] + counts["nonshared_without_truth"] == len(texts)
    assert sum(counts["by_split"].values()) == counts["nonshared_with_truth"]
    assert 0.3 < counts["by_split"]["held_out"] / counts["nonshared_with_truth"] < 0.7


def test_names_stems_and_affixes_have_their_source_forms(world):
    lang = "ar_mini"
    target = world["languages"][lang]
    source = world["languages"][world["source_language"]]
    name_id = next(n for n, form in target["names"].items() if not form.isascii())
    stem_concept = "animal_003"
    definite = target["morphology"]["definite"]["prefix"]  # ar_mini glues its article
    texts = [target["names"][name_id], target["lexicon"][stem_concept], definite]
    starts = [True, False, False]
    encode = FakeSource()
    split = concept_split(world, SEED, 0.5)
    table, _ = token_truth(world, lang, vocab(texts, starts), vocab(["x"]), encode,
                           np.array([1], np.int64), split=split)
    rows = table.set_index("target_id")
    assert rows.loc[0, "kind"] == "name" and rows.loc[0, "meaning"] == f"name:{name_id}"
    assert list(rows.loc[0, "source_ids"]) == [encode.ids[" " + source["names"][name_id]]]
    assert rows.loc[1, "kind"] == "stem" and rows.loc[1, "meaning"] == f"concept:{stem_concept}"
    # a name and an affix are no concept: split none; the stem follows its concept
    assert rows.loc[0, "split"] == "none" and rows.loc[2, "split"] == "none"
    assert rows.loc[1, "split"] == split[stem_concept]
    assert bool(rows.loc[1, "shared"]) and not bool(rows.loc[0, "shared"])
    # the source (suffixing) marks definiteness with a word: the prefix translates to it
    assert rows.loc[2, "kind"] == "affix"
    assert source_form(world, rows.loc[2, "meaning"]) == (
        source["morphology"]["definite"]["word"], True)


def test_truth_refuses_the_source_language(world):
    with pytest.raises(ValueError, match="not a target language"):
        token_truth(world, "en_mini", vocab(["a"]), vocab(["a"]), FakeSource(), np.array([]),
                    split={})


# --- the oracle method -----------------------------------------------------------------------


def oracle_inputs():
    rng = np.random.default_rng(0)
    vs, vt, h = 12, 6, 4
    truth = pd.DataFrame({"target_id": [1, 2, 3], "text": ["a", "b", "c"],
                          "kind": ["word"] * 3, "meaning": ["concept:x"] * 3,
                          "source_ids": [np.array([4]), np.array([5, 6]), np.array([7])],
                          "shared": [False, False, True]})
    return TransferInputs(
        source_input=rng.standard_normal((vs, h)).astype(np.float32),
        source_output=rng.standard_normal((vs, h)).astype(np.float32),
        source_vocab=vocab([f"s{i}" for i in range(vs)]),
        target_vocab=vocab([f"t{i}" for i in range(vt)]),
        overlap=pd.DataFrame({"target_id": [0, 3], "source_id": [9, 10], "how": ["exact"] * 2}),
        seed=0, truth=truth)


@pytest.mark.parametrize("side", ["input", "output"])
def test_world_oracle_rows(side):
    inputs = oracle_inputs()
    spec = get_method("world_oracle")
    result = spec.fn(inputs, spec.defaults, side)
    src = inputs.source_matrix(side)
    np.testing.assert_array_equal(result.rows[0], src[9])  # shared: copied
    np.testing.assert_array_equal(result.rows[3], src[10])  # shared wins over its truth
    np.testing.assert_allclose(result.rows[1], src[4], rtol=1e-6)
    np.testing.assert_allclose(result.rows[2], src[[5, 6]].mean(0), rtol=1e-6)
    np.testing.assert_allclose(result.rows[4], src.mean(0), rtol=1e-5)  # no truth: Mean
    assert list(result.how) == ["copied", "oracle", "oracle", "copied", "mean", "mean"]


def test_world_oracle_joins_the_worlds_default_methods_and_is_refused_outside_it():
    assert "world_oracle" in METHODS and "world_oracle" not in DEFAULT_METHODS
    world_run = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    assert world_run["transfer"]["methods"] == [*DEFAULT_METHODS, "world_oracle"]
    paper = validate_config(yaml.safe_load((ROOT / "config" / "paper_cva.yaml").read_text()))
    assert "world_oracle" not in paper["transfer"]["methods"]
    config = yaml.safe_load((ROOT / "config" / "paper_salt.yaml").read_text())
    config["transfer"]["methods"].append("world_oracle")
    with pytest.raises(ConfigError, match=r"transfer\.methods: 'world_oracle'.*not the world"):
        validate_config(config)


# --- the alignment metric --------------------------------------------------------------------


def slow_cosine(a, b):
    return float(sum(x * y for x, y in zip(a, b, strict=True))) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def slow_scores(rows, source, text_ids, target_ids, translations):
    out = []
    # the source's mean text row, summed one row at a time
    centre = [sum(source[s][j] for s in text_ids) / len(text_ids) for j in range(source.shape[1])]
    for t, ids in zip(target_ids, translations, strict=True):
        sims = []
        for s in text_ids:
            a, b = rows[t], source[s]
            sims.append(float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b)))
        order = [text_ids[i] for i in sorted(range(len(sims)), key=lambda i: -sims[i])]
        oracle = source[ids].mean(0)
        centred = slow_cosine([x - c for x, c in zip(rows[t], centre, strict=True)],
                              [x - c for x, c in zip(oracle, centre, strict=True)])
        out.append((int(order[0] in ids), int(any(o in ids for o in order[:10])),
                    float(oracle @ rows[t]) / (np.linalg.norm(oracle) * np.linalg.norm(rows[t])),
                    centred))
    return out


def test_token_scores_equal_a_brute_force_on_random_inputs():
    rng = np.random.default_rng(3)
    source = rng.standard_normal((60, 5))
    rows = rng.standard_normal((30, 5))
    text_ids = np.sort(rng.choice(60, 50, replace=False))
    target_ids = np.arange(5, 25)
    translations = [rng.choice(text_ids, rng.integers(1, 4), replace=False) for _ in target_ids]
    rows[target_ids[:8]] = source[[t[0] for t in translations[:8]]] + 0.01  # some hits
    got = token_scores(rows, source, text_ids, target_ids, translations)
    want = slow_scores(rows, source, text_ids, target_ids, translations)
    assert got["hit_1"].tolist() == [w[0] for w in want]
    assert got["hit_10"].tolist() == [w[1] for w in want]
    np.testing.assert_allclose(got["cos_oracle"], [w[2] for w in want], rtol=1e-9)
    np.testing.assert_allclose(got["cos_centred"], [w[3] for w in want], rtol=1e-9)
    assert got["hit_1"].sum() >= 8
    assert not np.allclose(got["cos_centred"], got["cos_oracle"])  # the centring did something


def test_centred_cosine_gives_the_mean_row_nothing_and_the_oracle_row_one():
    # Source rows with a common direction, as trained embeddings have: the raw cosine pays
    # the mean row for it, the centred cosine does not.
    rng = np.random.default_rng(7)
    n, h = 300, 16
    source = (rng.standard_normal((n, h)) + 3.0).astype(np.float32)
    text_ids = np.arange(n)
    target_ids = np.arange(3 * 100)
    translations = [np.array([i % 100]) for i in target_ids]  # block k, token j -> source j
    mean_row = source.astype(np.float64).mean(0).astype(np.float32)  # as Mean writes it
    rows = np.concatenate([np.tile(mean_row, (100, 1)), source[:100],
                           rng.standard_normal((100, h)).astype(np.float32) + 3.0])
    scores = token_scores(rows, source, text_ids, target_ids, translations)
    at_mean, oracle, noise = (scores.iloc[i * 100:(i + 1) * 100] for i in range(3))
    assert at_mean["cos_oracle"].mean() > 0.8  # the raw cosine's reward for the centroid
    assert (at_mean["cos_centred"] == 0.0).all()  # float32 rounding of the mean is the mean
    np.testing.assert_allclose(oracle["cos_centred"], 1.0, rtol=1e-6)
    assert abs(noise["cos_centred"].mean()) < 0.05 < noise["cos_oracle"].mean()


def test_identity_map_scores_one_and_a_shuffled_map_scores_chance():
    rng = np.random.default_rng(5)
    n, h = 400, 32
    source = rng.standard_normal((n, h)).astype(np.float32)
    text_ids = np.arange(n)
    target_ids = np.arange(n)
    translations = [np.array([i]) for i in range(n)]
    identity = token_scores(source, source, text_ids, target_ids, translations)
    assert summary(identity)["p_at_1"] == 100.0 and summary(identity)["p_at_10"] == 100.0
    assert summary(identity)["cos_oracle"] == pytest.approx(1.0)
    shuffled = token_scores(source[rng.permutation(n)], source, text_ids, target_ids,
                            translations)
    stats = summary(shuffled)
    # chance is 1/400 for P@1 and 10/400 for P@10
    assert stats["p_at_1"] <= 2.0 and stats["p_at_10"] <= 6.0
    assert abs(stats["cos_oracle"]) < 0.05


def test_score_checkpoints_uses_each_side_and_only_nonshared_tokens():
    rng = np.random.default_rng(1)
    src_in = rng.standard_normal((20, 4))
    src_out = rng.standard_normal((20, 4))
    source = Embeddings(input=src_in, output=src_out, tied=False, model_type="llama")
    truth = pd.DataFrame({"target_id": [0, 1, 2], "source_ids": [np.array([3]), np.array([4]),
                                                                  np.array([5])],
                          "shared": [False, False, True], "kind": "word", "text": "",
                          "meaning": "", "split": ["held_out", "none", "dictionary"]})
    ckpt_rows_in = np.zeros((3, 4))
    ckpt_rows_in[[0, 1]] = src_in[[3, 4]]
    ckpt_rows_out = np.zeros((3, 4))
    ckpt_rows_out[[0, 1]] = src_out[[4, 3]]  # swapped: both wrong
    ckpt = Embeddings(input=ckpt_rows_in, output=ckpt_rows_out, tied=False, model_type="llama")
    scores = score_checkpoints(source, vocab([f"s{i}" for i in range(20)]), truth, {"m": ckpt})
    assert set(scores["target_id"]) == {0, 1}
    assert dict(zip(scores["target_id"], scores["split"], strict=True)) == {0: "held_out",
                                                                            1: "none"}
    by_side = scores.groupby("side")["hit_1"].sum().to_dict()
    assert by_side == {"input": 2, "output": 0}


def write_alignment(root: Path, scores: pd.DataFrame, stage: str = "transfer",
                    lang: str = "x", source: str = "s") -> list[str]:
    """Per-token scores written as the alignment rule writes them, one file per target PLM
    (the stage, language, source and target PLM in the path, not in the file)."""
    files = []
    for target, part in scores.groupby("target"):
        path = root / paths.ALIGNMENT.fill(stage=stage, lang=lang, source=source,
                                           target=target)
        path.parent.mkdir(parents=True, exist_ok=True)
        part.drop(columns="target").to_parquet(path)
        files.append(str(path))
    return files


def lines_of(files: list[str], seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summaries, decided comparisons) of alignment files."""
    summaries, tests = alignment_lines(files, seed)
    return frame_of(summaries, SUMMARY_COLUMNS), decide(frame_of(tests, TEST_COLUMNS))


def test_alignment_lines_rank_only_competitors_and_test_them_on_the_same_tokens(tmp_path):
    n = 200
    rng = np.random.default_rng(2)
    good = (rng.random(n) < 0.6).astype(int)
    bad = (rng.random(n) < 0.1).astype(int)
    close = good.copy()
    close[:3] = 1 - close[:3]
    rows = []
    for method, hits in (("world_oracle", np.ones(n, int)), ("focus", good), ("omp", bad),
                         ("clp", close), ("random", np.zeros(n, int))):
        rows.append(pd.DataFrame({"target": "t", "side": "input", "method": method,
                                  "target_id": np.arange(n), "hit_1": hits, "hit_10": hits,
                                  "split": "held_out",
                                  "cos_oracle": hits * 0.5 + rng.random(n) * 0.1,
                                  "cos_centred": hits * 0.3 + rng.random(n) * 0.1,
                                  "contrast": hits * 0.2 + rng.random(n) * 0.1}))
    solo = rows[1].assign(target="t2")
    # the same methods on the dictionary concepts, where omp is best: ranked apart
    fitted = [r.assign(split="dictionary", hit_1=1 - r["hit_1"], hit_10=1 - r["hit_10"])
              for r in rows[1:4]]
    scores = pd.concat([*fitted, *rows, solo]).sample(frac=1.0, random_state=0)  # any order
    summaries, decided = lines_of(write_alignment(tmp_path, scores))
    assert set(summaries["family"]) == {"alignment"} and set(summaries["stage"]) == {"transfer"}
    # the cosines to the oracle row are kept in the files, not tested: the contrast is
    assert list(dict.fromkeys(summaries["metric"])) == ["p_at_10", "p_at_1", "contrast"]
    rank = summaries.set_index(["target", "split", "metric", "method"])["rank"]
    assert rank[("t", "dictionary", "p_at_1", "omp")] == 1
    assert math.isnan(rank[("t", "held_out", "p_at_1", "world_oracle")])
    assert rank[("t", "held_out", "p_at_1", "focus")] == 1
    assert rank[("t", "held_out", "p_at_1", "omp")] == 3
    assert math.isnan(rank[("t2", "held_out", "p_at_10", "focus")])  # alone: not ranked
    assert not (decided["target"] == "t2").any()  # nor tested
    test = decided[(decided["target"] == "t") & (decided["split"] == "held_out")].set_index(
        ["metric", "method", "versus"])
    assert test.loc[("p_at_1", "omp", "best"), "clears"]
    assert not test.loc[("p_at_1", "clp", "best"), "clears"]  # 3 tokens differ: does not clear
    assert test.loc[("contrast", "omp", "best"), "p"] < 1e-3
    # P@10 with its standard error, and McNemar's tests against the best and against Random,
    # equal to the tests run directly on the hits in token order
    value = summaries.set_index(["target", "split", "metric", "method"])
    a = value.loc[("t", "held_out", "p_at_10", "focus")]
    assert a["value"] == pytest.approx(100 * good.mean())
    assert a["se"] == pytest.approx(100 * good.std(ddof=1) / math.sqrt(n))
    assert a["n"] == n
    assert test.loc[("p_at_10", "omp", "best"), "p"] == mcnemar(bad, good).p
    assert test.loc[("p_at_10", "omp", "best"), "diff"] == pytest.approx(
        100 * (bad.mean() - good.mean()))
    assert test.loc[("p_at_10", "focus", "random"), "p"] == mcnemar(good, np.zeros(n)).p
    assert test.loc[("p_at_1", "focus", "random"), "diff"] == pytest.approx(100 * good.mean())
    assert ("p_at_10", "random", "random") not in test.index  # not with itself
    assert ("p_at_10", "focus", "best") not in test.index  # the best: not with itself
    # the same seed, the same lines
    again = lines_of(write_alignment(tmp_path, scores))
    pd.testing.assert_frame_equal(again[1], decided)


def test_each_embedding_side_is_a_setting_of_its_own(tmp_path):
    """The files hold both embedding sides per token: each side is compared alone, a row
    never against another side's."""
    n = 40
    frames = []
    for method, shift in (("salt", 0.0), ("omp", 0.05)):
        for side, cos in (("output", 0.9), ("input", 0.1)):
            frames.append(pd.DataFrame({
                "target": "t", "method": method, "side": side,
                "target_id": np.arange(n)[::-1], "split": "held_out", "hit_1": 0,
                "hit_10": 0, "cos_oracle": 0.0, "cos_centred": 0.0,
                "contrast": np.full(n, cos + shift)}))
    summaries, decided = lines_of(write_alignment(tmp_path, pd.concat(frames)))
    cos = summaries[summaries["metric"] == "contrast"].set_index(["side", "method"])
    assert cos.loc[("input", "salt"), "value"] == pytest.approx(0.1)
    assert cos.loc[("output", "omp"), "value"] == pytest.approx(0.95)
    assert (cos["n"] == n).all()
    tests = decided[decided["metric"] == "contrast"].set_index(["side", "method"])
    assert tests.loc[("input", "salt"), "diff"] == pytest.approx(-0.05)
    assert tests.loc[("output", "salt"), "diff"] == pytest.approx(-0.05)


def test_methods_scored_on_other_tokens_and_other_files_are_refused(tmp_path):
    scores = pd.DataFrame({"target": "t", "method": ["salt", "salt", "omp", "omp"],
                           "side": "input",
                           "target_id": [1, 2, 1, 3], "split": "held_out", "hit_1": 0,
                           "hit_10": 0, "cos_oracle": 0.0, "cos_centred": 0.0,
                           "contrast": 0.0})
    with pytest.raises(ValueError, match="different tokens"):
        alignment_lines(write_alignment(tmp_path, scores))
    with pytest.raises(ValueError, match="not an alignment file"):
        read_alignment([str(tmp_path / "scores.parquet")])


# --- what the retrieval tests could detect --------------------------------------------------


def test_chance_hits_are_the_share_of_random_first_k_sets_that_hold_a_translation():
    n = 9
    for k in (1, 3, 10):
        for size in (1, 2, 4):
            firsts = itertools.combinations(range(n), min(k, n))  # a random ranking's first k
            hit = [bool(set(first) & set(range(size))) for first in firsts]
            assert chance_hits(n, np.array([size]), k)[0] == pytest.approx(np.mean(hit))
    exact = [1 - math.comb(8000 - size, 10) / math.comb(8000, 10) for size in (1, 3)]
    assert chance_hits(8000, np.array([1, 3]), 10) == pytest.approx(exact, rel=1e-9)
    assert exact[0] == pytest.approx(10 / 8000)  # k / N for a one-piece translation


def test_rows_that_ignore_the_source_retrieve_at_the_chance_the_scores_carry(tmp_path):
    rng = np.random.default_rng(8)
    source = rng.standard_normal((40, 16))
    text_ids = np.arange(1, 40)
    target_ids = np.arange(3000)
    translations = [rng.choice(text_ids, rng.integers(1, 4), replace=False) for _ in target_ids]
    scores = token_scores(rng.standard_normal((3000, 16)), source, text_ids, target_ids,
                          translations)
    for k in (1, 10):
        sizes = np.array([t.size for t in translations])
        expected = chance_hits(text_ids.size, sizes, k)
        np.testing.assert_allclose(scores[f"chance_{k}"], expected)
        # the hits of random rows: their chance, within 4 binomial standard errors
        se = math.sqrt(expected.mean() * (1 - expected.mean()) / target_ids.size)
        assert abs(scores[f"hit_{k}"].mean() - expected.mean()) < 4 * se
    # the summary of each retrieval metric carries the chance level in percent
    files = write_alignment(tmp_path, scores.assign(target="t", side="input",
                                                    split="held_out", method="m"))
    summaries, _ = alignment_lines(files)
    chance = {s["metric"]: s["chance"] for s in summaries}
    for k in (1, 10):
        sizes = np.array([t.size for t in translations])
        assert chance[f"p_at_{k}"] == pytest.approx(
            100 * chance_hits(text_ids.size, sizes, k).mean())
    assert math.isnan(chance["contrast"]) and "cos_oracle" not in chance


def test_a_setting_whose_methods_differ_by_too_few_tokens_has_no_power(tmp_path):
    from embtransfer.report.findings import anomaly_lines

    rng = np.random.default_rng(12)
    lines = []
    # "t": 200 tokens, focus retrieves 60 %, omp 10 %; "t2": 40 tokens, focus retrieves 10,
    # omp 7 of them
    for target, n in (("t", 200), ("t2", 40)):
        good = (rng.random(n) < 0.6).astype(int)
        bad = (rng.random(n) < 0.1).astype(int)
        if target == "t2":
            good, bad = (np.arange(n) < 10).astype(int), (np.arange(n) < 7).astype(int)
        for method, hits in (("world_oracle", np.ones(n, int)), ("focus", good),
                             ("omp", bad), ("random", np.zeros(n, int))):
            lines.append(pd.DataFrame({
                "target": target, "side": "input", "split": "held_out", "method": method,
                "target_id": np.arange(n), "hit_1": hits, "hit_10": hits,
                "chance_1": 0.001, "chance_10": 0.01,
                "cos_oracle": rng.random(n), "cos_centred": rng.random(n),
                "contrast": rng.random(n)}))
    summaries, decided = lines_of(write_alignment(tmp_path, pd.concat(lines)))
    retrieval = summaries[summaries["metric"].isin(["p_at_1", "p_at_10"])]
    assert retrieval.set_index("metric")["chance"].to_dict() == pytest.approx(
        {"p_at_1": 0.1, "p_at_10": 1.0})
    d = detectable_discordant(0.001 / decided["p"].notna().sum())
    weak = power(decided).set_index(["target", "metric"])
    assert (weak["detectable"] == d).all()
    assert weak["powerless"].to_dict() == {("t", "p_at_10"): False, ("t", "p_at_1"): False,
                                           ("t2", "p_at_10"): True, ("t2", "p_at_1"): True}
    # t2: focus and omp differ by 3 hits, focus from Random by 10: fewer than d
    assert weak.loc[("t2", "p_at_10"), "largest"] == 10 < d
    said = [line for line in anomaly_lines(decided, summaries) if "without power" in line]
    assert said == [f"**Tests without power** (2 of 4 McNemar cells of the held-out split, a "
                    f"cell being one setting's P@1 or P@10 per side and stage): in each, the "
                    f"largest net difference between two working methods (at most 10 tokens) is "
                    f"below the {d} discordant tokens a test needs there, so \"not apart\" there "
                    f"says nothing; power in the other 2: x t input-row P@10 (transfer stage); "
                    f"x t input-row P@1 (transfer stage)."]


# --- paired tests ----------------------------------------------------------------------------


def test_mcnemar_is_the_exact_binomial_test_on_discordant_pairs():
    a = np.array([1] * 9 + [0] * 1 + [1] * 20)
    b = np.array([0] * 9 + [1] * 1 + [1] * 20)
    test = mcnemar(a, b)
    # 9 vs 1 discordant: P(X <= 1) + P(X >= 9), X ~ Bin(10, 1/2) = 22/1024
    assert test.p == pytest.approx(22 / 1024)
    # p 0.021: below 0.05, not below the report's family-wise 0.001 even alone
    assert not test.clears and test.diff == pytest.approx(8 / 30)
    assert binomial_two_sided(5, 10) == 1.0
    scipy_stats = pytest.importorskip("scipy.stats")
    for k, n in ((0, 7), (3, 20), (40, 100)):
        assert binomial_two_sided(k, n) == pytest.approx(
            scipy_stats.binomtest(k, n, 0.5).pvalue)


def test_paired_bootstrap_is_seeded_and_tells_noise_from_a_shift():
    rng = np.random.default_rng(0)
    a = rng.random(300)
    shifted = paired_bootstrap(a + 0.1, a + rng.normal(0, 0.01, 300), seed=1)
    assert shifted.clears and shifted.z > 3
    noise = paired_bootstrap(a, a + rng.normal(0, 0.1, 300), seed=1)
    assert not noise.clears
    assert paired_bootstrap(a, a[::-1], seed=4) == paired_bootstrap(a, a[::-1], seed=4)


def test_paired_bootstrap_p_is_the_normal_tail_over_the_resampled_means_spread():
    rng = np.random.default_rng(5)
    a, b = rng.random(120), rng.random(120) + 0.02
    test = paired_bootstrap(a, b, seed=9)
    draws = np.random.default_rng(9)
    d, means = a - b, []
    for start in range(0, BOOTSTRAP_SAMPLES, 256):
        idx = draws.integers(0, d.size, size=(min(256, BOOTSTRAP_SAMPLES - start), d.size))
        means += list(d[idx].mean(axis=1))
    z = d.mean() / np.std(means, ddof=1)
    assert test.p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    # far past 1 / samples, which the share of resamples past zero could not go below
    far = paired_bootstrap(a + 0.5, a, seed=9)
    assert far.p == 0.0 and normal_p(5.0) == pytest.approx(5.733e-7, rel=1e-3)


# --- questions only new tokens answer --------------------------------------------------------


def test_word_questions_are_native_words_and_the_facts_partition(world):
    loans = {c["id"] for c in world["concepts"] if c["loan"]}
    words = fact_docs(world, "vi_mini", None, SEED, "test", words=True)
    names = fact_docs(world, "vi_mini", None, SEED, "test", words=False)
    assert len(words) + len(names) == len(world["facts"])
    assert len(words) >= 40
    for doc in words:
        assert not set(doc["values"]) & loans
        assert all(v in value_pool(world, "profession") + value_pool(world, "food")
                   + value_pool(world, "animal") + value_pool(world, "object")
                   for v in doc["values"])
    facts = {f["id"]: f for f in world["facts"]}
    assert not any(word_answer(world, facts[d["id"]]) for d in names)
    assert set(native_words(world, "food")) == set(value_pool(world, "food")) - loans
    # the same questions in the source language
    en = fact_docs(world, "en_mini", None, SEED, "test", words=True)
    assert [d["id"] for d in en] == [d["id"] for d in words]
    assert [d["gold"] for d in en] == [d["gold"] for d in words]


def test_word_questions_keep_only_answers_no_shared_token_spells(world):
    from embtransfer.evaluation.world_tasks import answer_tokens, world_task_docs

    lang = "vi_mini"
    target = world["languages"][lang]
    vocab_ids: dict[str, int] = {}

    def encode(texts):  # one id per whitespace word (punctuation kept on it)
        return [[vocab_ids.setdefault(w, len(vocab_ids)) for w in t.split()] for t in texts]

    everything = world_task_docs(world, lang, SEED, {"fact_questions": None},
                                 [(encode, set())])["world_words"]["test"]
    assert len(everything) == len(fact_docs(world, lang, None, SEED, "test", words=True))
    # share the ids of every word form of a few animals: their questions and choices go
    animals = [c for c in native_words(world, "animal")][:5]
    shared_words = {w for d in everything for c in d["choices"] for w in c.split()
                    if any(target["lexicon"][a] in w for a in animals)}
    shared = {vocab_ids[w] for w in shared_words}
    kept = world_task_docs(world, lang, SEED, {"fact_questions": None},
                           [(encode, set()), (encode, shared)])
    words = kept["world_words"]["test"]
    assert 0 < len(words) < len(everything)
    for doc in words:
        assert not set(doc["values"]) & set(animals)
        assert all(d and not d & shared for d in answer_tokens(encode, doc["choices"]))
    en = kept["world_words_en"]["test"]
    assert [(d["id"], d["values"], d["gold"]) for d in en] == [
        (d["id"], d["values"], d["gold"]) for d in words]
    assert all(d["text"] != e["text"] for d, e in zip(words, en, strict=True) if d["text"])


def test_eval_records_keep_their_per_question_scores(tmp_path):
    import json

    from embtransfer.report.records import read_eval_records

    path = tmp_path / "results/seed0/eval/transfer/xx/src/tgt/salt/world_words.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "task": "world_words", "stage": "transfer", "lang": "xx", "source": "src",
        "target": "tgt", "method": "salt", "kind": "knowledge", "eval_language": "target",
        "note": "", "scores": {"Words acc": 50.0}, "stderr": {"Words acc": 25.0},
        "lm_eval_task": "world_words", "num_fewshot": 0, "limit": None, "n_samples": 2,
        "lm_eval_version": "0.4.9", "per_document": {"Words acc": [1.0, 0.0], "other": [1.0]}}))
    records, _ = read_eval_records([str(path)])
    assert records[0].per_document == {"Words acc": [1.0, 0.0]}


def test_no_row_that_ignores_the_token_beats_a_noisy_copy_of_the_truth_on_the_contrast():
    """The similarity the report tests (the contrast) ranks a noisy copy of the oracle rows
    above the mean row, a constant row and rows drawn around the mean; the raw cosine, which
    the report no longer tests, ranks the mean row above that same noisy copy."""
    rng = np.random.default_rng(0)
    h, n_source, n_target = 32, 400, 80
    offset = 4.0 * rng.standard_normal(h)  # the common direction real source rows share
    source = (offset + rng.standard_normal((n_source, h))).astype(np.float32)
    text_ids = np.arange(n_source)
    translations = [rng.choice(n_source, int(rng.integers(1, 3)), replace=False)
                    for _ in range(n_target)]
    oracle = np.stack([source[t].mean(axis=0) for t in translations])
    mean = source.mean(axis=0)
    rows = {
        "noisy copy": oracle + 1.0 * rng.standard_normal(oracle.shape),
        "mean row": np.tile(mean, (n_target, 1)),
        "constant row": np.tile(rng.standard_normal(h) * 5, (n_target, 1)),
        "around the mean": mean + source.std(axis=0) * rng.standard_normal(oracle.shape),
    }
    scores = {name: token_scores(r.astype(np.float32), source, text_ids,
                                 np.arange(n_target), translations)
              for name, r in rows.items()}
    contrast = {name: s["contrast"].mean() for name, s in scores.items()}
    assert contrast["noisy copy"] > 0.3
    assert all(abs(contrast[name]) < 0.05 for name in rows if name != "noisy copy")
    raw = {name: s["cos_oracle"].mean() for name, s in scores.items()}
    assert raw["mean row"] > raw["noisy copy"]
