"""config/real_text.yaml (the run `make bench-real` times): it validates, its dry run plans
the rules users run, its random-weight source builds, WECHSEL and OFA share one search, and
benchmarks/bench_real.py reads the rules' figures."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from embtransfer.config.validation import ConfigError, load_config_file, validate_config
from embtransfer.core.grid import transfer_runs
from embtransfer.models.random_weights import build_random_model, write_random_model
from embtransfer.transfer.aligned import (
    AlignedVectors,
    read_search,
    search_every_target,
    softmax_neighbors,
    write_search,
)
from embtransfer.transfer.method_catalog import DEFAULT_METHODS
from embtransfer.transfer.shared_search import search_inputs, search_options

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "real_text.yaml"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "EMBTRANSFER_OFFLINE": "1"}


def benchmark(name: str):
    """``benchmarks/<name>.py`` loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench():
    return benchmark("bench_real")


#: The methods config/real_text.yaml runs: all but world_oracle and TokAlign, whose GloVe
#: space at Gemma 3's vocabulary is not yet measured against the bench's budget.
REAL_TEXT_METHODS = [m for m in DEFAULT_METHODS if m != "tokalign"]


def test_real_text_config_validates_every_method_on_one_target_per_family():
    config = load_config_file(CONFIG)
    assert config["models"]["gemma3"]["type"] == "random"
    assert sorted(config["transfer"]["methods"]) == sorted(REAL_TEXT_METHODS)
    runs = transfer_runs(config)
    per_target: dict[str, set[str]] = {}
    for run in runs:
        per_target.setdefault(run.target, set()).add(run.method)
    assert {t for t, ms in per_target.items() if ms == set(REAL_TEXT_METHODS)} == {
        "bert_ar",
        "t5_de",
    }
    # OMP on the largest pair only where a GPU is declared: on CPU it was most of the budget
    gpu_only = {"omp", "omp_salt_k"}
    assert per_target["gpt2_de"] == set(REAL_TEXT_METHODS) - gpu_only
    config["transfer"]["device"] = "cuda"
    assert {r.method for r in transfer_runs(config) if r.target == "gpt2_de"} == set(
        REAL_TEXT_METHODS)
    assert all(
        ms == {"heuristics"}
        for t, ms in per_target.items()
        if t not in ("gpt2_de", "bert_ar", "t5_de")
    )
    assert config["aligned"]["share_search"] is True
    assert search_options(config) == {"k": 10, "chunk_rows": 2048, "chunk_cols": 4096}


def test_dictionary_needed_only_where_the_method_runs():
    # vi has no FreeDict dictionary: WECHSEL runs on no vi PLM, so none is asked for ...
    config = load_config_file(CONFIG)
    assert "dictionary" not in config["languages"]["vi"]
    # ... but selecting it there names the missing dictionary
    import yaml

    raw = yaml.safe_load(CONFIG.read_text())
    raw["transfer"]["select"].append({"targets": ["gpt2_vi"], "methods": ["wechsel"]})
    with pytest.raises(ConfigError, match=r"languages\.vi\.dictionary: method 'wechsel'"):
        validate_config(raw)


def test_dry_run_plans_the_rules_users_run(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from test_workflow import copy_workflow

    work = copy_workflow(tmp_path / "wf")
    tokenizer = work / "resources" / "real" / "tokenizers" / "gemma3"
    tokenizer.mkdir(parents=True)  # make real-data copies the real one; a plan needs a path
    env = dict(os.environ, PYTHONPATH=str(work / "workflow"), **OFFLINE)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--directory",
            str(work),
            "--snakefile",
            str(work / "Snakefile"),
            "--configfile",
            str(work / "config" / "real_text.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.MULTILINE))
    expected = {
        "real_corpus": 4,
        "freedict_dictionary": 2,
        "corpus": 4,
        "random_model": 1,
        "train_tokenizer": 9,
        "pretrain_model": 3,
        "vocab": 10,
        "overlap": 9,
        "fasttext_word": 4,
        "fasttext_token": 3,
        "neighbors": 12,
        "salt_regression": 3,
        "aligned_vectors": 3,
        "aligned_search": 3,
        "transfer": 3 * len(REAL_TEXT_METHODS) + 6 - 2,  # gpt2_de's OMPs: transfer.gpu_only
        "lapt": 1,
        "report": 1,
    }
    assert {rule: int(counts.get(rule, 0)) for rule in expected} == expected


def _tokenizer(n_words: int = 40) -> PreTrainedTokenizerFast:
    vocab = {
        w: i for i, w in enumerate(["<pad>", "<eos>", "<bos>"] + [f"w{i}" for i in range(n_words)])
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>"
    )


SMALL_GEMMA3 = {
    "type": "random",
    "family": "gemma3",
    "vocab_size": 48,
    "dtype": "bfloat16",
    "tie_word_embeddings": None,
    "architecture": {
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 16,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    },
}


def test_random_model_builds_at_a_small_shape_and_reloads(tmp_path):
    tokenizer = _tokenizer()
    tokenizer.save_pretrained(tmp_path / "tok")
    shapes = write_random_model(SMALL_GEMMA3, tmp_path / "tok", tmp_path / "model", seed=3)
    assert shapes == {
        "rows": 48,
        "hidden": 32,
        "tokenizer_ids": 43,
        "parameters": shapes["parameters"],
        "dtype": "bfloat16",
    }
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.dtype == torch.bfloat16
    assert model.config.head_dim == 16 and model.config.num_key_value_heads == 1
    assert model.config.eos_token_id == tokenizer.eos_token_id
    # seeded: the same weights again; another seed, others
    again = build_random_model(SMALL_GEMMA3, tokenizer, seed=3).get_input_embeddings().weight
    other = build_random_model(SMALL_GEMMA3, tokenizer, seed=4).get_input_embeddings().weight
    assert torch.equal(again, model.get_input_embeddings().weight)
    assert not torch.equal(again, other)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma"])
def test_random_model_families(family):
    spec = {**SMALL_GEMMA3, "family": family, "vocab_size": None, "dtype": "float32"}
    model = build_random_model(spec, _tokenizer(), seed=0)
    assert model.get_input_embeddings().weight.shape == (43, 32)
    assert model.dtype == torch.float32


def test_random_model_refuses_too_few_rows_and_unknown_family():
    with pytest.raises(ValueError, match="smaller than the tokenizer's 43 ids"):
        build_random_model({**SMALL_GEMMA3, "vocab_size": 40}, _tokenizer(), seed=0)
    with pytest.raises(ValueError, match="unknown random-model family 'bert'"):
        build_random_model({**SMALL_GEMMA3, "family": "bert"}, _tokenizer(), seed=0)


def test_random_model_schema():
    raw = {
        "languages": {"en": {"corpus": {"type": "local", "train": "x.txt"}}},
        "models": {
            "m": {
                "type": "random",
                "family": "gemma3",
                "tokenizer": "t",
                "architecture": {
                    "hidden_size": 32,
                    "num_layers": 1,
                    "num_heads": 2,
                    "intermediate_size": 64,
                },
            }
        },
        "sources": ["m"],
        "targets": {"en": ["m"]},
        "transfer": {"methods": ["salt"]},
        "evaluation": {"tasks": [], "stages": []},
    }
    spec = validate_config(raw)["models"]["m"]
    assert spec["dtype"] == "bfloat16" and spec["vocab_size"] is None
    assert spec["architecture"]["max_position_embeddings"] == 2048
    raw["models"]["m"]["architecture"]["width"] = 3
    with pytest.raises(ConfigError, match="width"):
        validate_config(raw)


def _aligned(seed: int = 0) -> AlignedVectors:
    rng = np.random.default_rng(seed)
    return AlignedVectors(
        rng.standard_normal((50, 8)).astype(np.float32),
        rng.random(50) < 0.2,
        rng.standard_normal((30, 8)).astype(np.float32),
        rng.random(30) < 0.2,
    )


def test_shared_search_is_the_search_each_method_would_make(tmp_path, monkeypatch):
    shared = _aligned()
    assert search_every_target(shared, k=10) == int((~shared.target_missing).sum())
    write_search(tmp_path / "s.safetensors", shared)
    reader = _aligned()
    read_search(tmp_path / "s.safetensors", reader)
    import embtransfer.transfer.aligned as aligned_module

    monkeypatch.setattr(aligned_module, "topk_cosine", lambda *a, **k: pytest.fail("searched"))
    ids = np.nonzero(~reader.target_missing)[0][::2]
    got = softmax_neighbors(reader, ids, 10, 0.1, n_source=60)  # WECHSEL's call, rows >= vocab
    monkeypatch.undo()
    want = softmax_neighbors(_aligned(), ids, 10, 0.1, n_source=60)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="not the search of these aligned vectors"):
        read_search(
            tmp_path / "s.safetensors",
            AlignedVectors(
                reader.source, reader.source_missing, reader.target[:5], reader.target_missing[:5]
            ),
        )


class _W:
    lang, source, target, seed = "de", "gemma3", "gpt2_de", "1"

    def __init__(self, method: str) -> None:
        self.method = method


def test_search_inputs_only_for_the_searching_methods_when_shared():
    config = {"aligned": {"share_search": True}}
    assert search_inputs(config, _W("ofa")) == {
        "aligned_search": "results/seed1/aligned/de/gemma3/gpt2_de.search.safetensors"
    }
    assert search_inputs(config, _W("salt")) == {}
    assert search_inputs({"aligned": {"share_search": False}}, _W("wechsel")) == {}


def test_bench_reads_each_rules_seconds_and_peak_memory(tmp_path):
    bench = _bench()
    out = [
        "rule transfer:",
        "    log: results/logs/transfer/a.log",
        "    jobid: 7",
        "    benchmark: results/logs/benchmark/transfer/a.tsv",
        "    threads: 1",
        "localrule real_corpus:",
        "    log: results/logs/download/real_corpus_de.log",
        "    jobid: 2",
        "Finished jobid: 2 (Rule: real_corpus)",
        "Finished jobid: 7 (Rule: transfer)",
    ]
    stamped = [(100.0 + i, line) for i, line in enumerate(out)]
    assert bench.job_logs(out) == {7: "logs/transfer/a.log", 2: "logs/download/real_corpus_de.log"}
    tsv = tmp_path / "results/logs/benchmark/transfer/a.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100.0\n")
    os.utime(tsv, (105.0, 105.0))  # written while the job ran: this run's
    rules = bench.rule_figures(tmp_path, stamped, {"logs/transfer/a.log": 3_000_000_000})
    assert rules["transfer"]["seconds"] == [12.5] and rules["transfer"]["rss"] == 3_000_000_000
    assert rules["transfer"]["sources"] == {"benchmark"}
    # no benchmark file: the job's start and finish in the output
    assert rules["real_corpus"]["seconds"] == [3.0] and rules["real_corpus"]["sources"] == {"log"}
    assert rules["real_corpus"]["rss"] == 0


def test_bench_costs_each_method_per_setting_over_its_seeds():
    bench = _bench()
    rules = {
        "transfer": {
            "names": ["seed1/transfer/de/src/gpt2_de/salt.log",
                      "seed2/transfer/de/src/gpt2_de/salt.log",
                      "seed1/transfer/ar/src/gpt2_ar/salt.log",
                      "seed1/transfer/de/src/gpt2_de/mean.log",
                      "seed1/transfer/de/src/gpt2_de@extend/mean.log"],
            "seconds": [10.0, 14.0, 3.0, 1.0, 4.0],
            "job_rss": [2e9, 3e9, 1e9, 5e8, 6e8]},
        "holdout_transfer": {"names": ["seed1/holdout_transfer/de/src/gpt2_de/salt.log"],
                             "seconds": [2.0], "job_rss": [7e8]},
        "omp_solve": {"names": ["seed1/omp/de/src/gpt2_de.log"], "seconds": [99.0],
                      "job_rss": [1e9]},
    }
    costs = bench.method_costs(rules)
    assert costs[("salt", "transfer")] == {"seconds": {"ar gpt2_ar": 3.0, "de gpt2_de": 12.0},
                                           "rss": 3e9}
    # an extended setting is a setting of its own (its target written <model>@extend)
    assert costs[("mean", "transfer")] == {"seconds": {"de gpt2_de": 1.0,
                                                       "de gpt2_de@extend": 4.0}, "rss": 6e8}
    assert costs[("salt", "holdout_transfer")]["seconds"] == {"de gpt2_de": 2.0}
    assert len(costs) == 3  # omp_solve is a rule of its own, not a method's transfer


def test_bench_sampler_finds_this_process_and_its_open_log(tmp_path):
    bench = _bench()
    assert os.getpid() in bench.descendants(os.getpid())
    assert bench.proc_kib(os.getpid(), "status", "VmRSS:") > 0
    log = tmp_path / "results" / "logs" / "x.log"
    log.parent.mkdir(parents=True)
    with log.open("w"):
        assert bench.job_log(os.getpid()) == "logs/x.log"


def test_bench_goal_counts_the_tables_methods_read():
    read = _bench().tables_methods_read(load_config_file(CONFIG))
    # SALT (its regression) reads word tables, FOCUS token tables, of the three method targets
    assert read == {
        f"results/seed1234/neighbors/{lang}/gemma3/{plm}/{kind}.parquet"
        for lang, plm in (("de", "gpt2_de"), ("ar", "bert_ar"), ("de", "t5_de"))
        for kind in ("word", "token")
    }


def test_the_real_small_timing_runs_what_make_real_run_runs():
    """`bench_real.py --run real_small` times the command of `make real-run`: the same
    config and the same extra arguments (memory cap, the source first)."""
    makefile = (REPO / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+) :?= (.+)$", makefile, re.M))
    recipe = makefile.split("\nreal-run:", 1)[1].splitlines()[1]
    recipe = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), recipe)
    spec = _bench().RUNS["real_small"]
    assert f"--configfile {spec['config']} --cores 2 {' '.join(spec['args'])}" in recipe


def _real_small_run(work: Path, k_over_h: dict[str, tuple[float, float]], carries: list[bool],
                    salt_random: str, salt_flags: str, lapt_langs: list[str]) -> None:
    """A finished real_small run's records as far as its regime goals read them."""
    import json

    import pandas as pd

    for setting, (median, p99) in k_over_h.items():
        meta = work / "results" / "seed0" / "regression" / setting / "projected.json"
        meta.parent.mkdir(parents=True)
        meta.write_text(json.dumps({"stats": {"conditioning": {"k_over_h": {
            "median": median, "p90": p99, "p99": p99, "max": p99}}}}))
    report = work / "results" / "report"
    report.mkdir(parents=True)
    pd.DataFrame({"lang": ["de", "vi"], "source": "llama_en", "target": ["gpt2_de", "t5_vi"],
                  "carries": carries}).to_csv(report / "plm_probes.csv", index=False)
    pd.DataFrame({"family": ["zeroshot", "zeroshot"], "lang": "vi", "target": "gpt2_vi",
                  "method": ["salt", "focus"], "versus": "random",
                  "relation": [salt_random, "worse"]}).to_csv(report / "comparisons.csv",
                                                               index=False)
    pd.DataFrame({"family": "zeroshot", "lang": "vi", "target": "gpt2_vi",
                  "method": ["salt", "focus"], "flags": [salt_flags, "rows flagged: 3"]}).to_csv(
        report / "summaries.csv", index=False)
    for lang in lapt_langs:
        record = (work / "results" / "seed0" / "lapt_zeroshot" / lang / "llama_en"
                  / f"gpt2_{lang}" / "salt.json")
        record.parent.mkdir(parents=True)
        record.write_text("{}")


def test_real_small_goals_hold_salt_to_its_regime_and_its_plms_to_meaning(tmp_path):
    """The real-text run's goals read SALT's k/h per setting, the probes' verdict, SALT's
    relation to Random and the row check, and which languages LAPT scored; another method's
    failing row is not SALT's."""
    bench = _bench()
    config = {"targets": {"de": ["gpt2_de"], "ar": ["gpt2_ar"], "vi": ["gpt2_vi"]}}
    good = tmp_path / "good"
    _real_small_run(good, {"de/llama_en/gpt2_de": (0.2, 0.6), "vi/llama_en/t5_vi": (0.5, 0.8)},
                    [True, True], "better", "", ["de", "ar", "vi"])
    assert bench.regime_figures(good) == [("de/llama_en/gpt2_de/seed0", 0.2, 0.6),
                                          ("vi/llama_en/t5_vi/seed0", 0.5, 0.8)]
    assert bench.soundness_figures(good) == ([], [])
    assert bench.lapt_languages(good, config) == (["ar", "de", "vi"], ["ar", "de", "vi"])
    bad = tmp_path / "bad"
    _real_small_run(bad, {"vi/llama_en/gpt2_vi": (1.08, 3.42)}, [True, False], "worse",
                    "rows flagged: 12", ["de"])
    assert bench.regime_figures(bad) == [("vi/llama_en/gpt2_vi/seed0", 1.08, 3.42)]
    meaningless, unsound = bench.soundness_figures(bad)
    assert meaningless == ["vi/t5_vi"]
    assert unsound == ["vi/gpt2_vi (zeroshot: rows flagged)",
                       "vi/gpt2_vi (zeroshot: worse than Random)"]
    assert bench.lapt_languages(bad, config) == (["de"], ["ar", "de", "vi"])
    assert bench.RUNS["real_small"]["goals"]["wall_s"] == 60 * 60
