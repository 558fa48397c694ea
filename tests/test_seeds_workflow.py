"""Integration: ``seeds`` repeats the seed-dependent stages under results/seed<N>/ and the
report decides every test per seed, stating a verdict only where it holds in every seed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from test_workflow import copy_workflow, small_config, snakemake

from embtransfer.core import paths
from embtransfer.models.loading import load_embeddings

pytestmark = pytest.mark.slow

SEEDS = [1234, 7]
RUN = {"lang": "ar_mini", "source": "llama_mini", "target": "gpt2_ar_mini"}


@pytest.fixture(scope="module")
def seeded_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("wf"))
    config = small_config()
    config["seeds"] = SEEDS
    config["targets"] = {"ar_mini": ["gpt2_ar_mini"]}
    # wechsel and tokalign: the aligned vectors the leak test's WECHSEL and OFA read, and the
    # GloVe spaces TokAlign's
    config["transfer"] = {"methods": ["salt", "focus", "wechsel", "tokalign", "random"],
                          "holdout": {"share": 0.15},
                          "options": {"tokalign": {"dim": 16, "iterations": 3}}}
    config["lapt"]["select"] = [{"methods": ["salt", "random"]}]
    config["evaluation"]["tasks"] = ["world_facts"]
    config["evaluation"]["lapt_zeroshot"] = True
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    snakemake(workdir, "--cores", "2", "all")
    return workdir


def test_each_seed_draws_its_own_spaces_and_rows(seeded_run):
    rows = {}
    for seed in SEEDS:
        for method in ("salt", "random"):
            path = seeded_run / paths.TRANSFER_MODEL.fill(**RUN, method=method, seed=seed)
            rows[seed, method] = load_embeddings(path).input
    # the same shared rows, other new rows: another fastText space, another random draw
    for method in ("salt", "random"):
        assert not np.array_equal(rows[SEEDS[0], method], rows[SEEDS[1], method])
    word = [(seeded_run / paths.FASTTEXT_WORD.fill(lang="ar_mini", seed=s)).read_bytes()
            for s in SEEDS]
    assert word[0] != word[1]
    # the world, the corpora and the pretrained models are drawn once
    assert not (seeded_run / "results" / f"seed{SEEDS[1]}" / "corpus").exists()


def test_lapt_and_lm_eval_run_for_the_primary_seed_only(seeded_run):
    for method in ("salt", "random"):
        primary = {**RUN, "method": method, "seed": SEEDS[0]}
        assert (seeded_run / paths.LAPT_METRICS.fill(**primary)).is_file()
        assert not (seeded_run / paths.LAPT_METRICS.fill(**primary | {"seed": SEEDS[1]})).exists()
        moved = pd.read_json(seeded_run / paths.LAPT_ZEROSHOT.fill(**primary), typ="series")
        assert moved["rows_moved"]["input"]["rows"] > 0
    assert not (seeded_run / "results" / f"seed{SEEDS[1]}" / "eval").exists()


def test_the_report_decides_each_seed_and_keeps_what_holds_in_every_seed(seeded_run):
    report = seeded_run / paths.REPORT_DIR
    per_seed = pd.read_csv(report / "seeds.csv")
    assert sorted(per_seed["seed"].unique()) == sorted(SEEDS)
    decided = pd.read_csv(report / "comparisons.csv")
    zeroshot = decided[decided["family"] == "zeroshot"]
    assert set(zeroshot["seeds"]) == {2}
    assert set(decided.loc[decided["family"] == "lapt_zeroshot", "seeds"]) <= {1}
    # a verdict stated in the consensus holds, with its relation, in every seed
    key = ["family", "stage", "lang", "source", "target", "side", "split", "variant", "metric",
           "method", "other"]
    merged = decided[decided["clears"]].merge(per_seed, on=key, suffixes=("", "_seed"))
    assert (merged["relation"] == merged["relation_seed"]).all()
    findings = (report / "findings.md").read_text()
    assert "2 seeds" in findings
    # how far LAPT moved the primary seed's new rows, one line per run and side
    movement = pd.read_csv(report / "lapt_movement.csv")
    assert sorted(set(movement["method"])) == ["random", "salt"]
    assert len(movement) == 2 * movement["side"].nunique()
    assert (movement["median_cosine"].between(-1, 1)).all()


def test_each_seed_holds_out_its_own_share_of_each_kind_of_shared_token(seeded_run):
    held = {}
    for seed in SEEDS:
        split = pd.read_parquet(seeded_run / paths.HOLDOUT.fill(**RUN, seed=seed))
        counts = pd.read_json(seeded_run / paths.HOLDOUT_COUNTS.fill(**RUN, seed=seed),
                              typ="series")
        text = split[split["kind"] != ""]
        assert counts["held_out"] == int(text["held_out"].sum()) > 0
        # one source id is held out with every target token that shares it
        assert (text.groupby("source_id")["held_out"].nunique() == 1).all()
        for line in counts["by_kind"]:
            if line["shared"] >= 20:  # rounding aside, the share of each kind
                assert abs(line["share"] - 0.15) < 0.05, line
        held[seed] = set(text.loc[text["held_out"], "source_id"])
    assert held[SEEDS[0]] != held[SEEDS[1]]
