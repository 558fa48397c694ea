"""Integration: a run with a replaced and an extended setting of one target PLM
(``gpt2_ar_mini`` and ``gpt2_ar_mini@extend``) from start to report: in the extended one the
source keeps its vocabulary and gains the target tokens it lacks, Token Distillation distils
some of them, LAPT trains the extended checkpoint, and the alignment scores read each target
token's own row; the replaced one beside it is untouched by the other's mode."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from test_workflow import copy_workflow, small_config, snakemake

from embtransfer.core import paths
from embtransfer.models.hf import VOCAB_MODE_KEY
from embtransfer.models.loading import load_embeddings, load_tokenizer

pytestmark = pytest.mark.slow

RUN = {"lang": "ar_mini", "source": "llama_mini", "target": "gpt2_ar_mini@extend", "seed": 1234}
REPLACED = {**RUN, "target": "gpt2_ar_mini"}
METHODS = ["subword_mean", "token_distillation", "mean"]


@pytest.fixture(scope="module")
def extended_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("wf"))
    config = small_config()
    config["targets"] = {"ar_mini": ["gpt2_ar_mini", "gpt2_ar_mini@extend"]}
    config["transfer"] = {
        "methods": METHODS,
        "options": {"token_distillation": {"snippets_per_token": 4, "snippet_length": 16,
                                           "min_snippets": 2, "max_tokens": 20,
                                           "batch_size": 4}}}
    config["lapt"]["select"] = [{"methods": ["token_distillation"]}]
    config["evaluation"]["tasks"] = ["world_facts"]
    config["report"]["focus_method"] = "subword_mean"
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    snakemake(workdir, "--cores", "2", "all")
    return workdir


def test_the_extended_checkpoints_keep_the_source_and_append_the_new_tokens(extended_run):
    source = load_tokenizer(extended_run / "resources" / "models" / "llama_mini")
    for method in METHODS:
        model = extended_run / paths.TRANSFER_MODEL.fill(**RUN, method=method)
        record = json.loads((model / "transfer.json").read_text())
        config = json.loads((model / "config.json").read_text())
        assert config[VOCAB_MODE_KEY] == "extend"
        rows = load_embeddings(model).vocab_rows
        assert rows == len(source) + record["checkpoint"]["new_rows"] > len(source)
    # the replaced setting of the same PLM: Token Distillation does not run there (it works
    # in extended vocabularies only), the others hold the PLM's vocabulary alone
    target = load_tokenizer(extended_run / "resources" / "tokenizers" / "gpt2_ar_mini")
    for method in METHODS:
        model = extended_run / paths.TRANSFER_MODEL.fill(**REPLACED, method=method)
        assert model.is_dir() == (method != "token_distillation"), method
        if model.is_dir():
            config = json.loads((model / "config.json").read_text())
            assert config.get(VOCAB_MODE_KEY, "replace") == "replace"
            assert load_embeddings(model).vocab_rows == len(target)
    distilled = json.loads((extended_run / paths.TRANSFER_MODEL.fill(
        **RUN, method="token_distillation") / "transfer.json").read_text())
    assert 0 < distilled["counts"].get("distilled", 0) <= 20


def test_lapt_trains_the_extended_checkpoint(extended_run):
    lapt = extended_run / paths.LAPT_MODEL.fill(**RUN, method="token_distillation")
    config = json.loads((lapt / "config.json").read_text())
    assert config[VOCAB_MODE_KEY] == "extend"
    transferred = load_embeddings(extended_run / paths.TRANSFER_MODEL.fill(
        **RUN, method="token_distillation"))
    assert load_embeddings(lapt).vocab_rows == transferred.vocab_rows


def test_the_alignment_scores_every_methods_rows_and_the_report_is_built(extended_run):
    for stage in ("transfer", "lapt"):
        scores = pd.read_parquet(extended_run / paths.ALIGNMENT.fill(**RUN, stage=stage))
        assert np.isfinite(scores["contrast"]).all() and len(scores)
    scores = pd.read_parquet(extended_run / paths.ALIGNMENT.fill(**RUN, stage="transfer"))
    assert set(scores["method"]) == set(METHODS)
    # Mean gives every new token the same row: its mean contrast is zero where the rows read
    # are its own (a source row read at a target id would not be the same for every token)
    for side, part in scores[scores["method"] == "mean"].groupby("side"):
        assert abs(part["contrast"].mean()) < 1e-6, side
    # how many rows Token Distillation distilled, as its transfer record says, in the report's
    # table and in the findings' line against its start
    record = json.loads((extended_run / paths.TRANSFER_MODEL.fill(
        **RUN, method="token_distillation") / "transfer.json").read_text())
    new_rows = pd.read_csv(extended_run / paths.REPORT_DIR / "new_rows.csv")
    mine = new_rows[(new_rows["method"] == "token_distillation")]
    assert set(mine["target"]) == {RUN["target"]}
    distilled = int(mine.loc[mine["how"] == "distilled", "rows"].sum())
    assert distilled == record["counts"]["distilled"] > 0
    assert int(mine["rows"].sum()) == record["checkpoint"]["new_rows"]
    findings = (extended_run / paths.REPORT_DIR / "findings.md").read_text()
    assert (f"**`token_distillation` against `subword_mean`** (where its rows start; distilled "
            f"{distilled} of {record['checkpoint']['new_rows']:,} new rows") in findings
    # both settings are in the report, each under its own name
    assert "gpt2_ar_mini@extend" in findings and "gpt2_ar_mini " in findings.replace("|", " ")
