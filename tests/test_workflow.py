"""Integration: the workflow runs to the neighbour tables in a temporary directory.

The repository's Snakefile, package and config are copied to a temporary
directory and run there (with that copy's package first on PYTHONPATH), so the
invalidation tests can edit package modules without touching the checkout.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from embtransfer.core.atomic import read_parquet_metadata
from embtransfer.core.workflow_copy import copy_workflow, job_stats  # the other tests' too

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

pytestmark = pytest.mark.slow

#: The folder of the seed-dependent artifacts of the default config's one seed (`seed` 1234).
SEEDED = "results/seed1234"


def small_config() -> dict:
    """The default config, shrunk so the upstream half runs in well under a minute."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["world"] = {"sentences": {"source_train": 6000, "target_train": 4000, "valid": 400}}
    for spec in config["models"].values():
        spec["train"] = {"steps": 20, "batch_size": 4, "seq_len": 32, "log_every": 10}
        spec["tokenizer"]["vocab_size"] = 1200 if spec["family"] in ("llama", "gemma") else 800
    # Fewer target PLMs and methods keep the transfer part of the DAG small; every
    # PLM family and every kind of method input is still exercised.
    config["targets"] = {"ar_mini": ["gpt2_ar_mini", "bert_ar_mini"], "vi_mini": ["t5_vi_mini"]}
    config["transfer"] = {"methods": ["salt", "focus", "wechsel", "clp_plus", "subword_mean",
                                      "random"]}
    config["zeroshot"] = {"max_length": 64, "max_lines": 200}
    # Two short LAPT runs (one GPU-declared job each, on CPU here).
    config["lapt"] = {
        "select": [{"sources": ["llama_mini"], "targets": ["gpt2_ar_mini"],
                    "methods": ["salt", "random"]}],
        "max_length": 32, "lr": 1e-3, "global_batch_size": 8, "micro_batch_size": 4,
        "max_steps": 6, "log_every": 1, "checkpoint_every": 2, "eval_batches": 2,
        "gpus": 1, "mem_mb": 2000, "runtime": 10,
    }
    config["fasttext"]["word"]["epoch"] = 3
    config["fasttext"]["token"]["epoch"] = 3
    config["fasttext"]["token"]["min_count"] = 3
    # The shrunk world's few thousand words fill few of fastText's 2,000,000 n-gram
    # buckets: 20,000 keep a model at 8 MB instead of 800 (a test run writes dozens).
    config["fasttext"]["word"]["bucket"] = config["fasttext"]["token"]["bucket"] = 20000
    return config


def snakemake(
    workdir: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Snakemake on the copy ``workdir`` with its test config; ``env`` adds variables."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(workdir / "workflow"))
    proc = subprocess.run(
        [*SNAKEMAKE, "--directory", str(workdir), "--snakefile", str(workdir / "Snakefile"),
         "--configfile", str(workdir / "test_config.yaml"), *args],
        capture_output=True, text=True, env=env, cwd=workdir,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def planned_jobs(workdir: Path, target: str) -> dict[str, int]:
    """Rule -> job count of a dry run (empty when nothing is to be done)."""
    out = snakemake(workdir, "-n", target)
    text = out.stdout + out.stderr
    if "Job stats:" not in text:
        assert "Nothing to be done" in text, text[-2000:]
        return {}
    return job_stats(text)


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("wf"))
    config = small_config()
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    snakemake(workdir, "--cores", "2", "neighbors_only")
    return workdir, config


def test_artifacts_have_their_schemas_and_counts(workflow_run):
    workdir, config = workflow_run
    results = workdir / "results"
    used = set(config["sources"]) | {t for plms in config["targets"].values() for t in plms}
    for model in sorted(used):
        vocab = pd.read_parquet(results / "vocab" / f"{model}.parquet")
        assert list(vocab.columns) == ["id", "token", "bytes", "canonical", "start", "kind", "role"]
        assert (vocab["id"].to_numpy() == np.arange(len(vocab))).all()
        assert set(vocab["kind"]) <= {"special", "byte", "normal"}
    for lang, plms in config["targets"].items():
        for target in plms:
            vocab = pd.read_parquet(results / "vocab" / f"{target}.parquet")
            for vectors in config["neighbors"]["vectors"]:
                vec = np.load(workdir / SEEDED / "token_vectors" / lang / vectors
                              / f"{target}.npy")
                missing = np.load(
                    workdir / SEEDED / "token_vectors" / lang / vectors / f"{target}.missing.npy"
                )
                assert vec.shape[0] == len(vocab) and missing.shape == (len(vocab),)
                assert np.isfinite(vec).all()
                assert missing[vocab["kind"].to_numpy() == "special"].all()
            for source in config["sources"]:
                pairs = pd.read_parquet(results / "overlap" / source / f"{target}.parquet")
                cov = json.loads((results / "overlap" / source / f"{target}.coverage.json")
                                 .read_text())
                assert cov["copied"] == len(pairs)
                assert cov["copied"] + cov["initialized"] == len(vocab)
                # The miniature world is built for partial overlap, like real pairs (15-68%).
                assert 5 < cov["coverage_pct"] < 90, cov
                assert pairs["target_id"].is_unique
                shared = dict(zip(pairs["target_id"], pairs["source_id"], strict=True))
                nonshared = sorted(set(range(len(vocab))) - set(shared))
                for vectors in config["neighbors"]["vectors"]:
                    path = (workdir / SEEDED / "neighbors" / lang / source / target
                            / f"{vectors}.parquet")
                    table = pd.read_parquet(path)
                    meta = read_parquet_metadata(path)
                    assert sorted(table["target_id"]) == nonshared
                    assert {"degenerate", "fallback_rows"} <= set(meta)
                    live = table[~table["missing"]]
                    assert len(live) > 0.5 * len(table)
                    for row in live.itertuples():
                        assert len(row.neighbor_target_ids) == row.k > 0
                        assert np.isclose(np.sum(row.weights), 1.0, atol=1e-5)
                        assert all(shared[t] == s for t, s in
                                   zip(row.neighbor_target_ids, row.neighbor_source_ids,
                                       strict=True))
                        assert np.all(np.diff(row.similarities) <= 1e-6)
                    assert (table.loc[table["missing"], "k"] == 0).all()


def test_rerun_without_change_does_nothing(workflow_run):
    workdir, _ = workflow_run
    assert planned_jobs(workdir, "neighbors_only") == {}


def test_the_snakefile_keeps_the_code_hash_parses(workflow_run):
    """The run above saved every module's parse; Snakemake's next start parses none again."""
    workdir, _ = workflow_run
    kept = json.loads((workdir / ".snakemake" / "embtransfer" / "code_imports.json").read_text())
    modules = {key.split(":", 1)[0] for key in kept}
    assert {"embtransfer.neighbors.search", "embtransfer.transfer.regression", "None"} <= modules


def test_editing_a_module_reruns_exactly_its_dependents(workflow_run, tmp_path):
    workdir, config = workflow_run
    n_tables = sum(len(p) for p in config["targets"].values()) * len(config["sources"]) * 2
    module = workdir / "workflow" / "embtransfer" / "neighbors" / "search.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        assert planned_jobs(workdir, "neighbors_only") == {
            "neighbors": n_tables, "neighbors_only": 1,
        }
    finally:
        module.write_text(original)
    assert planned_jobs(workdir, "neighbors_only") == {}

    # sparsemax is imported by neighbors only: editing it reruns the same jobs.
    module = workdir / "workflow" / "embtransfer" / "neighbors" / "sparsemax.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        assert set(planned_jobs(workdir, "neighbors_only")) == {"neighbors", "neighbors_only"}
    finally:
        module.write_text(original)

    module = workdir / "workflow" / "embtransfer" / "vocab" / "overlap.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit\n")
        jobs = planned_jobs(workdir, "neighbors_only")
    finally:
        module.write_text(original)
    # vocab/overlap.py is imported by the overlap and neighbours scripts; vocab,
    # fastText and token vectors do not depend on it.
    assert set(jobs) == {"overlap", "neighbors", "neighbors_only"}


def test_changing_a_parameter_reruns_exactly_its_dependents(workflow_run):
    workdir, config = workflow_run
    changed = copy.deepcopy(config)
    changed["neighbors"]["prefilter_k"] = 64
    path = workdir / "test_config.yaml"
    original = path.read_text()
    try:
        path.write_text(yaml.safe_dump(changed, allow_unicode=True))
        assert set(planned_jobs(workdir, "neighbors_only")) == {"neighbors", "neighbors_only"}
        changed["overlap"]["match"] = "exact"
        path.write_text(yaml.safe_dump(changed, allow_unicode=True))
        assert set(planned_jobs(workdir, "neighbors_only")) == {
            "overlap", "neighbors", "neighbors_only",
        }
        # A model's training budget shapes the model, not its tokenizer: nothing
        # upstream of the models (vocabularies, overlap, neighbours) reruns.
        changed = copy.deepcopy(config)
        changed["models"]["gpt2_ar_mini"]["train"]["steps"] = 21
        path.write_text(yaml.safe_dump(changed, allow_unicode=True))
        assert planned_jobs(workdir, "neighbors_only") == {}
    finally:
        path.write_text(original)


def test_misspelled_config_key_stops_before_any_job(tmp_path):
    workdir = copy_workflow(tmp_path)
    config = small_config()
    config["neighbors"]["prefilterk"] = 3
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(workdir, "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "prefilterk" in proc.stdout + proc.stderr
    assert "config key neighbors" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def test_bad_inputs_fail_clearly_and_leave_no_artifact(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from embtransfer.models.tokenizer_training import train_tokenizer

    workdir = copy_workflow(tmp_path / "wf")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"the cat {i} sat on mat number {i * 7}" for i in range(300)))
    # A checkpoint whose tokenizer has more ids than the model has embedding rows.
    bad_model = tmp_path / "bad_model"
    tokenizer = train_tokenizer("bytelevel_bpe", [str(text)], 400, "gpt2")
    GPT2LMHeadModel(GPT2Config(vocab_size=300, n_embd=16, n_layer=1, n_head=2)).save_pretrained(
        bad_model
    )
    tokenizer.save_pretrained(bad_model)
    config = small_config()
    config["models"]["bad_local"] = {"type": "local", "path": str(bad_model)}
    # A "fastText model" that is a text file.
    config["languages"]["ar_mini"]["fasttext"] = {"type": "file", "path": str(text)}
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))

    proc = snakemake(workdir, "--cores", "1", "results/vocab/bad_local.parquet", check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/vocab/bad_local.log").read_text()
    assert "tokenizer/model mismatch" in log and f"has {len(tokenizer)} ids" in log
    assert "only 300 embedding rows" in log
    assert not (workdir / "results/vocab/bad_local.parquet").exists()

    target = f"{SEEDED}/token_vectors/ar_mini/word/gpt2_ar_mini.npy"
    proc = snakemake(workdir, "--cores", "2", target, check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/seed1234/token_vectors/ar_mini/word/gpt2_ar_mini.log"
           ).read_text()
    assert "is not a fastText model" in log and "languages.ar_mini.fasttext" in log
    assert not (workdir / target).exists()
    assert not list((workdir / SEEDED / "token_vectors").rglob("*.npy"))


def test_transferred_checkpoints_load_and_the_table_ranks_them(workflow_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, config = workflow_run
    snakemake(workdir, "--cores", "2", "all")  # no-op when the test above ran first
    results = workdir / "results"
    methods = config["transfer"]["methods"]
    for lang, plms in config["targets"].items():
        for source in config["sources"]:
            for target in plms:
                vocab = pd.read_parquet(results / "vocab" / f"{target}.parquet")
                pairs = pd.read_parquet(results / "overlap" / source / f"{target}.parquet")
                for method in methods:
                    ckpt = workdir / SEEDED / "transfer" / lang / source / target / method
                    report = json.loads((ckpt / "transfer.json").read_text())
                    assert sum(report["counts"].values()) == len(vocab)
                    # random copies nothing; WECHSEL, like its reference, copies only
                    # the special tokens; every other method copies every shared token.
                    expected = {
                        "random": 0, "wechsel": int((pairs["how"] == "special").sum()),
                    }.get(method, len(pairs))
                    assert report["counts"].get("copied", 0) == expected, method
                    if method == "salt":
                        assert report["counts"].get("projected", 0) > 0
                    model = AutoModelForCausalLM.from_pretrained(ckpt)
                    tokenizer = AutoTokenizer.from_pretrained(ckpt)
                    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
                    assert len(tokenizer) == len(vocab)
                    tied = (model.get_output_embeddings().weight.data_ptr()
                            == model.get_input_embeddings().weight.data_ptr())
                    assert tied == report["source_tied"]
    # every checkpoint's zero-shot record, each ranked among its setting's methods
    from embtransfer.report.setting_tables import zeroshot_lines

    records = [str(p) for folder in (results, workdir / SEEDED)
               for p in (folder / "zeroshot").rglob("*.json")]
    summaries, tests = zeroshot_lines(records, seed=0)
    table = pd.DataFrame(summaries)
    n_pairs = sum(len(p) for p in config["targets"].values()) * len(config["sources"])
    assert len(table[table["method"] != "source_model"]) == n_pairs * len(methods)
    assert table["value"].notna().all() and (table["value"] > 0).all()
    ranked = table[table["method"] != "source_model"]
    assert ranked["rank"].notna().all() and tests


def test_lapt_jobs_declare_a_gpu_and_write_metrics_and_checkpoints(workflow_run):
    from transformers import AutoModelForCausalLM

    workdir, config = workflow_run
    targets = [f"{SEEDED}/lapt/ar_mini/llama_mini/gpt2_ar_mini/{m}.metrics.jsonl"
               for m in ("salt", "random")]
    out = snakemake(workdir, "-n", "--forceall", *targets)
    # Each planned job is printed as "rule lapt:" and its indented fields.
    lapt_jobs = re.findall(r"^rule lapt:\n((?:    .*\n)+)", out.stdout + out.stderr, re.M)
    assert len(lapt_jobs) == 2
    for block in lapt_jobs:
        assert re.search(r"resources:.*\bgpu=1\b", block, re.S), block
    snakemake(workdir, "--cores", "2", *targets)  # no-op when an earlier test ran them
    for method in ("salt", "random"):
        base = workdir / SEEDED / "lapt" / "ar_mini" / "llama_mini" / "gpt2_ar_mini"
        metrics = (base / f"{method}.metrics.jsonl").read_text().splitlines()
        lines = [json.loads(x) for x in metrics]
        train = [r for r in lines if "train_loss" in r]
        assert [r["step"] for r in train] == list(range(1, 7))
        assert sorted(r["fraction"] for r in lines if "eval_loss" in r) == [0.3, 0.6, 0.9]
        final = lines[-1]
        assert final["final"] and final["step"] == 6 and final["tokens_per_s"] > 0
        assert final["peak_memory_bytes"] > 0
        summary = json.loads((base / method / "lapt.json").read_text())
        assert summary["total_steps"] == 6 and summary["config"]["lr"] == 1e-3
        assert not (base / f"{method}.work").exists()  # the resume state is cleaned up
        AutoModelForCausalLM.from_pretrained(base / method)
        log = (workdir / "results" / "logs" / "seed1234" / "lapt" / "ar_mini" / "llama_mini"
               / "gpt2_ar_mini" / f"{method}.log").read_text()
        assert "eta" in log and "done: 6 steps" in log
