"""The rules' input functions (embtransfer/<stage>/inputs.py), called as Snakemake calls
them, with a small hand-written config and wildcards, against the paths they must return.

The dry runs (tests/test_paper_grid.py) plan whole grids; these pin each function's
branches, the rarely-taken ones included (hub, local and file inputs, FreeDict, replay,
per-task evaluation jobs), without Snakemake.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from embtransfer.core.errors import ConfigError
from embtransfer.data import inputs as data
from embtransfer.evaluation import inputs as evaluation
from embtransfer.fasttext.inputs import fasttext_bin, fasttext_word_bin
from embtransfer.lapt import inputs as lapt
from embtransfer.models import inputs as models
from embtransfer.neighbors.inputs import all_neighbors
from embtransfer.report import inputs as report
from embtransfer.transfer import inputs as transfer
from embtransfer.vocab.inputs import (
    all_coverage,
    all_shared_kinds,
    overlap_text,
    shared_kinds_inputs,
    shared_kinds_params,
)

MUSE = "resources/dictionaries/muse/en-de.txt"
TOKENIZER = {"algorithm": "bytelevel_bpe", "vocab_size": 800}

# Two target languages: vi (the miniature world's: corpus, world dictionary, trained
# fastText) and de (the user's: local corpus, a MUSE dictionary, their own fastText file),
# a miniature source whose mix adds vi and sw (Wikipedia, crawl vectors), and three target
# PLMs: a miniature, a hub and a local one.
CONFIG: dict[str, Any] = {
    "source_language": "en",
    "dictionary_held_out": 0.5,
    "languages": {
        "en": {"corpus": {"type": "mini"}, "fasttext": {"type": "crawl"}},
        "vi": {"corpus": {"type": "mini"}, "fasttext": {"type": "train"}},
        "de": {
            "corpus": {"type": "local", "train": "text/de.train.txt", "valid": "text/de.valid.txt"},
            "fasttext": {"type": "file", "path": "vectors/de.bin"},
            "dictionary": {"type": "file", "path": MUSE},
        },
        "sw": {
            "corpus": {"type": "wikipedia"},
            "fasttext": {"type": "crawl", "code": "swh"},
            "dictionary": {"type": "freedict", "path": "dicts/eng-swh.index"},
        },
    },
    "models": {
        "src": {
            "type": "mini",
            "family": "llama",
            "language": "en",
            "mix": {"vi": 0.1, "sw": 0.1},
            "tokenizer": {**TOKENIZER, "text": "language"},
            "train": {"steps": 5},
        },
        "gpt2_vi": {
            "type": "mini",
            "family": "gpt2",
            "language": "vi",
            "mix": None,
            "tokenizer": TOKENIZER,
            "train": {"steps": 5},
        },
        "hub_de": {"type": "hub", "repo_id": "org/hub-de", "revision": "main"},
        "local_de": {"type": "local", "path": "/models/local-de"},
    },
    "sources": ["src"],
    "targets": {"vi": ["gpt2_vi"], "de": ["hub_de", "local_de"]},
    "transfer": {
        "methods": ["salt", "focus", "wechsel"],
        "options": {"salt": {"vectors": "token"}},
        "select": None,
    },
    "neighbors": {"vectors": ["word", "token"]},
    "aligned": {"token_strings": "text"},
    "lapt": {
        "enabled": True,
        "select": [{"targets": ["gpt2_vi"], "methods": ["focus", "salt"]}],
        "replay": None,
        "max_length": 32,
    },
    "evaluation": {
        "tasks": ["world_facts", "belebele"],
        "stages": ["source", "transfer", "lapt"],
        "select": {"sources": None, "targets": None, "methods": None},
        "jobs": "checkpoint",
        "device": "cpu",
        "batch_size": 4,
        "limit": 10,
        "max_length": None,
        "threads": 1,
        "scoring": {"nfc": True},
        "lapt_zeroshot": True,
        "tokenizer_stats": True,
        "datasets_dir": "resources/lm_eval",
    },
    "report": {"reference": "resources/reference/paper.csv", "calibration": "real.csv"},
}


@pytest.fixture
def config() -> dict[str, Any]:
    return copy.deepcopy(CONFIG)


def snakemake_wildcards(**values: str) -> Any:
    """The wildcards object Snakemake passes an input function."""
    import snakemake.api  # noqa: F401 (snakemake.jobs imports it first)
    from snakemake.jobs import Wildcards

    return Wildcards(fromdict=values)


RUN = {"lang": "vi", "source": "src", "target": "gpt2_vi", "seed": "0"}


# --- models -----------------------------------------------------------------------------------


def test_model_and_tokenizer_dirs_by_model_type(config):
    assert models.model_dir(config, "src") == "resources/models/src"
    assert models.model_dir(config, "hub_de") == "resources/models/hub_de"
    assert models.model_dir(config, "local_de") == "/models/local-de"
    # a miniature model's tokenizer is trained before the model; the others' are the model's
    assert models.tokenizer_dir(config, "gpt2_vi") == "resources/tokenizers/gpt2_vi"
    assert models.tokenizer_dir(config, "hub_de") == "resources/models/hub_de"
    assert models.tokenizer_dir(config, "local_de") == "/models/local-de"


def test_model_language_from_its_key_else_its_targets_entry(config):
    assert models.model_language(config, "gpt2_vi") == "vi"
    assert models.model_language(config, "hub_de") == "de"
    config["targets"]["de"] = ["local_de"]
    with pytest.raises(ConfigError, match="'hub_de' has no language"):
        models.model_language(config, "hub_de")


def test_pretraining_and_tokenizer_texts(config):
    assert models.pretraining_text(config, "src") == "results/corpus/mix/src/train.txt"
    assert models.pretraining_text(config, "gpt2_vi") == "results/corpus/vi/train.txt"
    # tokenizer.text: language trains the tokenizer on the language alone, not the mix
    assert models.tokenizer_text(config, "src") == "results/corpus/en/train.txt"
    assert models.tokenizer_text(config, "gpt2_vi") == "results/corpus/vi/train.txt"
    assert models.tokenizer_spec(config, "src") == {
        "family": "llama",
        "tokenizer": {**TOKENIZER, "text": "language"},
        "language": "en",
        "mix": {"vi": 0.1, "sw": 0.1},
    }


# --- data -------------------------------------------------------------------------------------


def test_corpus_inputs_by_corpus_type(config):
    assert data.corpus_inputs(config, {"lang": "vi"}) == {"world": "results/world/world.json"}
    assert data.corpus_inputs(config, {"lang": "de"}) == {
        "train": "text/de.train.txt",
        "valid": "text/de.valid.txt",
    }
    assert data.corpus_inputs(config, {"lang": "sw"}) == {
        "sentences": "resources/wikipedia/sw/sentences.txt"
    }


def test_mix_inputs_split_the_world_from_real_corpora(config):
    assert data.mixed_languages(config, "src", mini=True) == ["vi"]
    assert data.mixed_languages(config, "src", mini=False) == ["sw"]
    assert data.mix_inputs(config, snakemake_wildcards(model="src")) == {
        "main": "results/corpus/en/train.txt",
        "others": ["results/corpus/sw/train.txt"],
        "world": ["results/world/world.json"],
    }
    config["models"]["src"]["mix"] = {"sw": 0.1}
    assert data.mix_inputs(config, {"model": "src"})["world"] == []


def test_downloads_of_a_config(config):
    assert data.wikipedia_languages(config) == ["sw"]
    assert data.crawl_codes(config) == ["en", "swh"]
    assert data.muse_dictionaries(config) == [MUSE]
    # belebele is a stock lm-eval task; world tasks need no download
    assert data.lm_eval_downloads(config) == ["resources/lm_eval/tasks.json"]
    # the source language's crawl vectors (WECHSEL); sw's Wikipedia text is only a mix share
    # of a miniature source, whose corpus no target or replay needs
    assert data.all_downloads(config) == [
        "resources/models/hub_de",
        "resources/fasttext/cc.en.300.bin",
        MUSE,
        "resources/lm_eval/tasks.json",
    ]
    config["evaluation"]["tasks"] = ["world_facts"]
    assert data.lm_eval_downloads(config) == []


# --- vocab, fastText, neighbours --------------------------------------------------------------


def test_overlap_text_is_the_target_language_valid_split(config):
    assert overlap_text(config, {"source": "src", "target": "hub_de"}) == (
        "results/corpus/de/valid.txt"
    )


def test_shared_kinds_read_the_world_pairs_only(config):
    from embtransfer.core.grid import world_pairs

    pairs = world_pairs(config)
    inputs = shared_kinds_inputs(config)
    assert inputs.pop("world") == "results/world/world.json"  # the world's lexicon
    assert {len(v) for v in inputs.values()} == {len(pairs)}
    assert inputs["overlap"] == [f"results/overlap/{s}/{t}.parquet" for _, s, t in pairs]
    assert inputs["valid"] == [f"results/corpus/{lang}/valid.txt" for lang, _, _ in pairs]
    assert all_shared_kinds(config) == (["results/overlap/shared_kinds.csv"] if pairs else [])
    assert {p["lexicon"] for p in shared_kinds_params(config)} == {"world"}
    for model in config["models"].values():
        model["type"] = "hub"  # no miniature pair left: nothing to measure
    assert shared_kinds_inputs(config) == {"vocab": [], "overlap": [], "tokenizer": [],
                                           "valid": []}
    assert all_shared_kinds(config) == []


def test_plm_probes_of_the_world_pairs_with_salts_rcond(config):
    from embtransfer.core.grid import world_pairs
    from embtransfer.transfer.method_catalog import resolve_options

    assert evaluation.all_plm_probes(config) == [
        f"results/seed0/probes/{lang}/{s}/{t}.json" for lang, s, t in world_pairs(config)
    ] != []
    assert report.report_inputs(config)["plm_probes"] == evaluation.all_plm_probes(config)
    lang, source, target = world_pairs(config)[0]
    inputs = evaluation.plm_probe_inputs(config, {"lang": lang, "source": source,
                                                  "target": target})
    assert set(inputs) == {"plm", "overlap", "truth", "world"}  # both probes
    assert transfer.salt_rcond(config) == resolve_options("salt", {})["rcond"]
    config["transfer"]["options"]["salt"] = {"rcond": 1e-3}
    assert transfer.salt_rcond(config) == 1e-3


def test_coverage_and_neighbor_targets(config):
    assert all_coverage(config) == [
        "results/overlap/src/gpt2_vi.coverage.json",
        "results/overlap/src/hub_de.coverage.json",
        "results/overlap/src/local_de.coverage.json",
    ]
    neighbors = all_neighbors(config)
    assert len(neighbors) == 6
    assert neighbors[:2] == [
        "results/seed0/neighbors/vi/src/gpt2_vi/word.parquet",
        "results/seed0/neighbors/vi/src/gpt2_vi/token.parquet",
    ]


def test_fasttext_models_by_type(config):
    assert fasttext_word_bin(config, "vi") == "results/seed0/fasttext/vi/word.bin"
    assert fasttext_word_bin(config, "de") == "vectors/de.bin"
    assert fasttext_word_bin(config, "en") == "resources/fasttext/cc.en.300.bin"
    assert fasttext_word_bin(config, "sw") == "resources/fasttext/cc.swh.300.bin"
    token = snakemake_wildcards(lang="vi", vectors="token", model="gpt2_vi", seed="0")
    assert fasttext_bin(config, token) == "results/seed0/fasttext/vi/token/gpt2_vi.bin"
    assert fasttext_bin(config, {"lang": "de", "vectors": "word", "model": "x", "seed": "0"}) == (
        "vectors/de.bin"
    )
    # a replicate seed's vectors are trained apart; crawl and user vectors are one download
    assert fasttext_word_bin(config, "vi", "2") == "results/seed2/fasttext/vi/word.bin"
    assert fasttext_bin(config, {"lang": "vi", "vectors": "word", "model": "x", "seed": "2"}) == (
        "results/seed2/fasttext/vi/word.bin")
    assert fasttext_word_bin(config, "en", "2") == "resources/fasttext/cc.en.300.bin"


# --- transfer ---------------------------------------------------------------------------------


def test_transfer_inputs_follow_the_method_needs(config):
    base = {
        "source": "resources/models/src",
        "target_tokenizer": "resources/tokenizers/gpt2_vi",
        "source_vocab": "results/vocab/src.parquet",
        "target_vocab": "results/vocab/gpt2_vi.parquet",
        "overlap": "results/overlap/src/gpt2_vi.parquet",
    }
    salt = transfer.transfer_inputs(config, snakemake_wildcards(**RUN, method="salt"))
    assert salt == base | {
        "projected": "results/seed0/regression/vi/src/gpt2_vi/projected.safetensors"}
    # FOCUS reads the token-space neighbours (its default vectors option)
    focus = transfer.transfer_inputs(config, {**RUN, "method": "focus"})
    assert focus == base | {
        "neighbors_token": "results/seed0/neighbors/vi/src/gpt2_vi/token.parquet"}
    wechsel = transfer.transfer_inputs(config, {**RUN, "method": "wechsel"})
    assert wechsel == base | {"aligned": "results/seed0/aligned/vi/src/gpt2_vi.safetensors"}


def test_method_options_and_code(config):
    assert transfer.method_options(config, "salt") == {"vectors": "token"}
    assert transfer.method_options(config, "focus") == {}
    assert transfer.salt_vectors(config) == "token"
    del config["transfer"]["options"]["salt"]
    assert transfer.salt_vectors(config) == "word"  # the catalog's default
    code = transfer.method_code("salt")
    assert len(code) == 16 and code != transfer.method_code("focus")


def test_dictionaries_by_type(config, tmp_path):
    assert transfer.dictionary_spec(config, "vi") == {"type": "world"}
    assert transfer.dictionary_input(config, "vi") == "results/world/world.json"
    assert transfer.dictionary_input(config, "de") == MUSE
    # FreeDict: the index and its (here missing, so .dict.dz) entries
    assert transfer.dictionary_input(config, "sw") == [
        "dicts/eng-swh.index",
        "dicts/eng-swh.dict.dz",
    ]


def test_aligned_tokenizers_only_to_decode(config):
    wildcards = {"lang": "de", "source": "src", "target": "hub_de"}
    assert transfer.aligned_tokenizers(config, wildcards) == []
    config["aligned"]["token_strings"] = "decode"
    assert transfer.aligned_tokenizers(config, wildcards) == [
        "resources/tokenizers/src",
        "resources/models/hub_de",
    ]


def test_zeroshot_targets(config):
    files = transfer.all_zeroshot(config)
    assert len(files) == 3 * 3 + 2
    assert files[0] == "results/seed0/zeroshot/vi/src/gpt2_vi/salt.json"
    assert files[-2:] == [
        "results/zeroshot/de/src/source_model.json",
        "results/zeroshot/vi/src/source_model.json",
    ]


# --- LAPT -------------------------------------------------------------------------------------


def test_blocks_share_the_first_selected_method_tokenizer(config):
    blocks = snakemake_wildcards(**RUN, text="train")
    # lapt.select keeps grid order: salt comes before focus in transfer.methods
    assert lapt.blocks_tokenizer(config, blocks) == "results/seed0/transfer/vi/src/gpt2_vi/salt"
    assert lapt.blocks_text(config, blocks) == "results/corpus/vi/train.txt"
    config["lapt"]["select"] = [{"methods": ["focus"]}]
    assert lapt.blocks_tokenizer(config, blocks) == "results/seed0/transfer/vi/src/gpt2_vi/focus"


def test_lapt_inputs_with_and_without_replay(config):
    run = {**RUN, "method": "salt"}
    inputs = {
        "model": "results/seed0/transfer/vi/src/gpt2_vi/salt",
        "train": "results/lapt_blocks/vi/src/gpt2_vi/train.npy",
        "valid": "results/lapt_blocks/vi/src/gpt2_vi/valid.npy",
    }
    assert lapt.lapt_inputs(config, run) == inputs
    assert lapt.block_texts(config) == "train|valid"
    config["lapt"]["replay"] = {"language": "en", "ratio": 0.1}
    assert lapt.lapt_inputs(config, run) == inputs | {
        "replay": "results/lapt_blocks/vi/src/gpt2_vi/replay.npy"
    }
    assert lapt.block_texts(config) == "train|valid|replay"
    assert lapt.blocks_text(config, {**RUN, "text": "replay"}) == "results/corpus/en/train.txt"


def test_lapt_targets_and_settings(config):
    assert lapt.all_lapt_metrics(config) == [
        "results/seed0/lapt/vi/src/gpt2_vi/salt.metrics.jsonl",
        "results/seed0/lapt/vi/src/gpt2_vi/focus.metrics.jsonl",
    ]
    assert lapt.all_lapt(config) == [
        "results/seed0/lapt/vi/src/gpt2_vi/salt",
        "results/seed0/lapt/vi/src/gpt2_vi/focus",
        *lapt.all_lapt_metrics(config),
    ]
    assert lapt.training_settings(config) == {"replay": None, "max_length": 32}
    config["lapt"]["enabled"] = False
    assert lapt.all_lapt(config) == []


# --- evaluation -------------------------------------------------------------------------------


def test_one_evaluate_job_per_checkpoint_or_per_task(config):
    assert evaluation.evaluation_outputs(config, evaluation.paths.EVAL_SOURCE) == [
        "results/eval/source/{lang}/{source}/world_facts.json",
        "results/eval/source/{lang}/{source}/belebele.json",
    ]
    assert evaluation.job_name(config, evaluation.SOURCE_JOB) == "source/{lang}/{source}"
    config["evaluation"]["jobs"] = "task"
    assert evaluation.evaluation_outputs(config, evaluation.paths.EVAL_SOURCE) == [
        "results/eval/source/{lang}/{source}/{task}.json"
    ]
    assert evaluation.job_name(config, evaluation.CHECKPOINT_JOB) == (
        "seed{seed}/{stage}/{lang}/{source}/{target}/{method}/{task}"
    )


def test_eval_inputs_by_stage_and_task(config):
    datasets = {"datasets": "resources/lm_eval/tasks.json"}
    benchmarks = {"benchmarks": "results/benchmarks/vi"}
    source = snakemake_wildcards(lang="vi", source="src")
    assert evaluation.eval_inputs(config, source) == (
        {"model": "resources/models/src"} | benchmarks | datasets
    )
    lapt_run = snakemake_wildcards(stage="lapt", **RUN, method="salt", task="belebele")
    assert evaluation.eval_inputs(config, lapt_run) == (
        {"model": "results/seed0/lapt/vi/src/gpt2_vi/salt"} | datasets
    )
    transferred = {"stage": "transfer", **RUN, "method": "salt", "task": "world_facts"}
    assert evaluation.eval_inputs(config, transferred) == (
        {"model": "results/seed0/transfer/vi/src/gpt2_vi/salt"} | benchmarks
    )
    assert evaluation.job_tasks(config, transferred) == ["world_facts"]
    assert evaluation.job_tasks(config, source) == ["world_facts", "belebele"]


def test_eval_meta_names_no_target_for_a_source_model():
    assert evaluation.eval_meta(snakemake_wildcards(lang="vi", source="src")) == {
        "stage": "source",
        "lang": "vi",
        "source": "src",
        "target": None,
        "method": None,
    }
    lapt_run = {"stage": "lapt", **RUN, "method": "salt"}
    assert evaluation.eval_meta(lapt_run) == {
        "stage": "lapt",
        "lang": "vi",
        "source": "src",
        "target": "gpt2_vi",
        "method": "salt",
    }


def test_eval_options_resources_and_code(config):
    assert evaluation.evaluation_options(config) == {
        "device": "cpu",
        "batch_size": 4,
        "limit": 10,
        "max_length": None,
        "nfc": True,
    }
    assert evaluation.evaluation_resources(config) == {"mem_mb": 8000, "runtime": 120}
    config["evaluation"]["device"] = "auto"
    assert evaluation.evaluation_resources(config)["gpu"] == 1
    assert evaluation.shipped_tasks_code(config) == ""
    config["evaluation"]["tasks"].append("xquad")
    assert len(evaluation.shipped_tasks_code(config)) > 0


def test_world_benchmarks_read_every_world_pair_of_the_language(config):
    assert evaluation.world_benchmark_inputs(config, {"lang": "vi"}) == {
        "world": "results/world/world.json",
        "tokenizers": ["resources/tokenizers/gpt2_vi"],
        "overlaps": ["results/overlap/src/gpt2_vi.parquet"],
    }
    # de's PLMs are no miniature models: the world knows no truth of them
    assert evaluation.world_benchmark_inputs(config, {"lang": "de"})["tokenizers"] == []


def test_tokenizer_stats_inputs(config):
    assert evaluation.tokenizer_stats_models(config, "de") == {
        "src": "source",
        "hub_de": "target",
        "local_de": "target",
    }
    assert evaluation.tokenizer_stats_inputs(config, snakemake_wildcards(lang="de")) == {
        "tokenizers": ["resources/tokenizers/src", "resources/models/hub_de", "/models/local-de"],
        "valid": "results/corpus/de/valid.txt",
        "benchmarks": "results/benchmarks/de",
        "datasets": "resources/lm_eval/tasks.json",
    }


def test_alignment_of_each_stage_methods(config):
    transferred = {"stage": "transfer", **RUN}
    assert evaluation.alignment_methods(config, transferred) == ["salt", "focus", "wechsel"]
    lapt_group = snakemake_wildcards(stage="lapt", **RUN)
    assert evaluation.alignment_methods(config, lapt_group) == ["salt", "focus"]
    assert evaluation.alignment_inputs(config, lapt_group) == {
        "source": "resources/models/src",
        "source_vocab": "results/vocab/src.parquet",
        "target_tokenizer": "resources/tokenizers/gpt2_vi",
        "truth": "results/seed0/truth/vi/src/gpt2_vi.parquet",
        "checkpoints": ["results/seed0/lapt/vi/src/gpt2_vi/salt",
                        "results/seed0/lapt/vi/src/gpt2_vi/focus"],
    }
    assert evaluation.all_alignment(config) == [
        "results/seed0/alignment/transfer/vi/src/gpt2_vi.parquet",
        "results/seed0/alignment/lapt/vi/src/gpt2_vi.parquet",
    ]


def test_evaluation_and_intrinsic_targets(config):
    files = evaluation.all_evaluation(config)
    # transfer and lapt: the two LAPT runs, then the source model of both languages, x 2 tasks
    assert len(files) == (2 + 2 + 2) * 2
    assert files[0] == "results/seed0/eval/transfer/vi/src/gpt2_vi/salt/world_facts.json"
    assert files[-1] == "results/eval/source/de/src/belebele.json"
    assert evaluation.all_intrinsic(config) == [
        "results/seed0/lapt_zeroshot/vi/src/gpt2_vi/salt.json",
        "results/seed0/lapt_zeroshot/vi/src/gpt2_vi/focus.json",
        "results/intrinsic/tokenizers/vi.json",
        "results/intrinsic/tokenizers/de.json",
    ]
    config["evaluation"]["lapt_zeroshot"] = config["evaluation"]["tokenizer_stats"] = False
    assert evaluation.all_intrinsic(config) == []


# --- report -----------------------------------------------------------------------------------


def test_report_inputs(config):
    inputs = report.report_inputs(config)
    assert inputs["zeroshot"] == [
        "results/seed0/zeroshot/vi/src/gpt2_vi/salt.json",
        "results/seed0/zeroshot/vi/src/gpt2_vi/focus.json",
    ]
    assert inputs["lapt"] == lapt.all_lapt_metrics(config)
    assert inputs["reference"] == "resources/reference/paper.csv"
    assert list(inputs) == [
        "evaluation", "lapt", "coverage", "zeroshot", "alignment", "plm_probes", "reference",
        "transfer_zeroshot", "source_floor", "lapt_zeroshot", "salt_regression",
        "fasttext_bli", "holdout",
    ]
    # the report reads each kind the rule gives it, by name, and refuses a kind it lacks
    from embtransfer.report.build import Inputs

    assert Inputs.of_rule(inputs).holdout == []
    with pytest.raises(ValueError, match="holdout"):
        Inputs.of_rule({k: v for k, v in inputs.items() if k != "holdout"})
    # the BLI of the aligned fastText spaces: vi's world dictionary keeps a held-out half,
    # de's MUSE file none
    assert inputs["fasttext_bli"] == ["results/seed0/fasttext_bli/vi.json"]
    # SALT's regression records, once per setting with a method that reads its coefficients
    assert inputs["salt_regression"] == [
        f"results/seed0/regression/{lang}/src/{target}/projected.json"
        for lang, target in (("vi", "gpt2_vi"), ("de", "hub_de"), ("de", "local_de"))
    ]
    # the final LAPT checkpoints' records are the evaluation stage's (one place)
    assert inputs["lapt_zeroshot"] == evaluation.all_lapt_zeroshot(config) == [
        "results/seed0/lapt_zeroshot/vi/src/gpt2_vi/salt.json",
        "results/seed0/lapt_zeroshot/vi/src/gpt2_vi/focus.json",
    ]
    # every checkpoint's zero-shot record and the source models', for the comparison
    assert inputs["transfer_zeroshot"] == transfer.all_zeroshot(config)
    # no method reads SALT's coefficients: no regression record
    config["transfer"]["select"] = [{"methods": ["focus", "wechsel"]}]
    assert report.report_inputs(config)["salt_regression"] == []


def test_report_entries_caption_every_output():
    outputs = report.all_report()
    assert "results/report/report.md" in outputs
    assert report.report_entry("table5_csv") == {
        "caption": "../report/table5.rst",
        "category": "Paper tables",
        "subcategory": "Table 5: eval loss during LAPT",
        "labels": {"table": "5", "format": "CSV"},
    }
    assert report.report_entry("alignment_md")["labels"] == {
        "table": "alignment",
        "format": "Markdown",
    }
    assert report.report_entry("figure2")["category"] == "Paper figures"
    assert report.report_entry("methods")["caption"] == "../report/methods.rst"
    assert report.report_entry("zeroshot_md")["category"] == "Methods compared"
    # the spine's two tables, shown beside the tables drawn from them
    for name in ("comparisons_csv", "comparisons_md", "summaries_csv"):
        entry = report.report_entry(name)
        assert (entry["category"], entry["caption"]) == ("Methods compared",
                                                         "../report/comparisons.rst")
    assert report.report_entry("summaries_csv")["labels"] == {
        "table": "every method's summary", "format": "CSV"}
    assert report.report_entry("calibration_md")["labels"]["format"] == "Markdown"
    # every output has a caption that exists
    for name in report.output_names():
        rules = Path(__file__).resolve().parents[1] / "workflow" / "rules"
        assert (rules / report.report_entry(name)["caption"]).is_file()
    assert report.report_entry("report_md")["subcategory"] == "All tables (report.md)"
    # each output the report shows (environment.json is not one) has labels of its own
    shown = [name for name in report.output_names() if name != "environment"]
    entries = {repr(sorted(report.report_entry(name).items())) for name in shown}
    assert len(entries) == len(shown)


def test_the_held_out_split_is_asked_for_only_with_transfer_holdout(config):
    from embtransfer.vocab.inputs import all_holdout, holdout_inputs, holdout_share

    assert holdout_share(config) is None and all_holdout(config) == []
    config["transfer"]["holdout"] = {"share": 0.15}
    config["seeds"] = [3, 4]
    files = all_holdout(config)
    pairs = [(lang, s, t) for lang, plms in config["targets"].items()
             for s in config["sources"] for t in plms]
    assert files == [f"results/seed{seed}/holdout/{lang}/{s}/{t}.json"
                     for seed in (3, 4) for lang, s, t in pairs]
    # the world's lexicon reads the world; a real language's reads wordfreq, no file
    world = holdout_inputs(config, {**RUN, "seed": "3"})
    assert world == {"target_vocab": "results/vocab/gpt2_vi.parquet",
                     "overlap": "results/overlap/src/gpt2_vi.parquet",
                     "world": "results/world/world.json"}
    real = holdout_inputs(config, {"lang": "de", "source": "src", "target": "hub_de",
                                   "seed": "3"})
    assert "world" not in real
    config["transfer"]["holdout"]["by_language"] = {"de": 0.3}
    assert holdout_share(config, "de") == 0.3 and holdout_share(config, "vi_mini") == 0.15


def test_a_held_out_transfer_reads_the_held_out_overlap_tables_and_regression(config):
    from embtransfer.transfer.inputs import (
        all_holdout_scores,
        holdout_transfer_inputs,
        transfer_inputs,
    )

    assert all_holdout_scores(config) == []
    config["transfer"]["holdout"] = {"share": 0.15}
    # every competing method's (Token Distillation runs in no setting of a replaced run)
    scored = {path.rsplit("/", 1)[1].removesuffix(".parquet")
              for path in all_holdout_scores(config)}
    assert scored == set(config["transfer"]["methods"]) - {"token_distillation"}
    config["transfer"]["methods"].append("token_distillation")
    assert {path.rsplit("/", 1)[1].removesuffix(".parquet")
            for path in all_holdout_scores(config)} == scored
    wildcards = {**RUN, "method": "salt", "seed": "3"}
    full, held = transfer_inputs(config, wildcards), holdout_transfer_inputs(config, wildcards)
    assert held.pop("holdout") == "results/seed3/holdout/vi/src/gpt2_vi.parquet"
    assert held.pop("overlap") == "results/seed3/holdout/vi/src/gpt2_vi.overlap.parquet"
    assert held.pop("projected") == (
        "results/seed3/holdout_regression/vi/src/gpt2_vi/projected.safetensors")
    assert {k: v for k, v in full.items() if k not in ("overlap", "projected")} == held
    focus = holdout_transfer_inputs(config, {**wildcards, "method": "focus"})
    assert focus["neighbors_token"] == (
        "results/seed3/holdout_neighbors/vi/src/gpt2_vi/token.parquet")
    # the shared search saw the held-out source tokens: a held-out WECHSEL searches anew
    config["aligned"]["share_search"] = True
    assert "aligned_search" not in holdout_transfer_inputs(config, {**wildcards,
                                                                    "method": "wechsel"})


def test_a_target_written_with_a_mode_is_a_setting_of_its_plm_in_that_mode(config):
    """``gpt2_vi@extend`` beside ``gpt2_vi``: its own runs (only the methods that work in its
    mode), checkpoints and held-out-free paths under its name, and the PLM's artifacts (vocab,
    overlap, neighbours, regression, split) read by the PLM's name."""
    from embtransfer.core.grid import target_mode, target_pairs, transfer_runs
    from embtransfer.transfer.inputs import all_holdout_scores, holdout_transfer_inputs

    config["targets"]["vi"] = ["gpt2_vi", "gpt2_vi@extend"]
    config["transfer"]["methods"] = ["salt", "focus", "token_distillation"]
    config["transfer"]["vocab_mode"] = "replace"
    assert (target_mode(config, "gpt2_vi"), target_mode(config, "gpt2_vi@extend")) == (
        "replace", "extend")
    runs = {(r.target, r.method) for r in transfer_runs(config) if r.lang == "vi"}
    # Token Distillation works in extended vocabularies only; SALT and FOCUS in both
    assert runs == {("gpt2_vi", "salt"), ("gpt2_vi", "focus"), ("gpt2_vi@extend", "salt"),
                    ("gpt2_vi@extend", "focus"), ("gpt2_vi@extend", "token_distillation")}
    assert [p for p in target_pairs(config) if p[0] == "vi"] == [("vi", "src", "gpt2_vi")]
    wildcards = {**RUN, "target": "gpt2_vi@extend", "method": "salt", "seed": "3"}
    plain = transfer.transfer_inputs(config, {**wildcards, "target": "gpt2_vi"})
    assert transfer.transfer_inputs(config, wildcards) == plain
    held = holdout_transfer_inputs(config, wildcards)
    assert held == holdout_transfer_inputs(config, {**wildcards, "target": "gpt2_vi"})
    assert "gpt2_vi@extend" not in str(held)
    # the held-out transfer does not depend on the mode: each PLM's methods are scored once
    config["transfer"]["holdout"] = {"share": 0.15}
    scored = [p for p in all_holdout_scores(config) if "/vi/" in p]
    assert sorted(p.rsplit("/", 2)[1:] for p in scored) == [
        ["gpt2_vi", "focus.parquet"], ["gpt2_vi", "salt.parquet"],
        ["gpt2_vi", "token_distillation.parquet"]]
    # the transfer and everything after it carry the setting's name
    checkpoint = evaluation.eval_checkpoint(
        config, {**wildcards, "stage": "transfer", "seed": "1"})
    assert "/gpt2_vi@extend/salt" in checkpoint
    aligned = evaluation.alignment_inputs(config, {**wildcards, "stage": "transfer"})
    assert aligned["target_tokenizer"] == models.tokenizer_dir(config, "gpt2_vi")
    assert "gpt2_vi@extend" not in aligned["truth"]
    assert all("/gpt2_vi@extend/" in path for path in aligned["checkpoints"])
    assert models.model_language(config, "gpt2_vi") == "vi"
