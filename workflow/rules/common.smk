# What the rule files share (the package functions they call, their constants and the
# wildcard constraints). Included first, so the stage rule files hold rules only
# (tests/test_rule_files.py); the run's hooks are the Snakefile's. Input functions and their
# logic live in the stages' packages (embtransfer/<stage>/inputs.py, tested without Snakemake
# in tests/test_rule_inputs.py), as functions of the config the rules pass them.
from embtransfer.core import paths
from embtransfer.core.grid import (
    model_wildcards,
    real_text_run,
    source_first,
    target_mode,
    world_pairs,
)
from embtransfer.core.pinning import fetch_params
from embtransfer.config.validation import models_of_type, wildcard_alternatives
from embtransfer.data.inputs import (
    all_downloads,
    corpus_inputs,
    crawl_codes,
    mix_inputs,
    mixed_languages,
    wikipedia_languages,
)
from embtransfer.evaluation.task_catalog import (
    CATALOG as EVAL_CATALOG,
    SHIPPED_TASK_DIR,
    shipped_task_names,
    spec_dicts,
    stock_task_names,
)
from embtransfer.evaluation.inputs import (
    CHECKPOINT_JOB,
    SOURCE_JOB,
    alignment_inputs,
    alignment_methods,
    all_alignment,
    all_plm_probes,
    all_evaluation,
    all_intrinsic,
    eval_inputs,
    eval_meta,
    eval_specs,
    evaluation_options,
    evaluation_outputs,
    evaluation_resources,
    job_name,
    plm_probe_inputs,
    shipped_tasks_code,
    tokenizer_stats_inputs,
    tokenizer_stats_models,
    world_benchmark_inputs,
)
from embtransfer.fasttext.inputs import fasttext_bin, fasttext_word_bin
from embtransfer.lapt.inputs import (
    all_lapt,
    block_texts,
    blocks_text,
    blocks_tokenizer,
    lapt_inputs,
    training_settings,
)
from embtransfer.models.inputs import (
    model_dir,
    pretraining_text,
    tokenizer_dir,
    tokenizer_spec,
    tokenizer_text,
)
from embtransfer.data.real_text import (
    DICTIONARIES as FREEDICT_PAIRS,
    MAX_CHARS as REAL_TEXT_MAX_CHARS,
    SOURCES as REAL_TEXT_SOURCES,
)
from embtransfer.neighbors.inputs import all_neighbors
from embtransfer.report.build import config_subset, output_names
from embtransfer.report.inputs import all_report, report_entry, report_inputs
from embtransfer.transfer.method_catalog import METHODS as METHOD_CATALOG
from embtransfer.transfer.method_catalog import transfer_priority
from embtransfer.transfer.inputs import (
    aligned_tokenizers,
    all_dictionary_truth,
    all_holdout_scores,
    all_zeroshot,
    dictionary_input,
    dictionary_spec,
    fasttext_bli_inputs,
    glove_options,
    holdout_transfer_inputs,
    method_code,
    method_options,
    omp_solve_inputs,
    omp_solve_options,
    omp_solve_rule_inputs,
    salt_rcond,
    salt_vectors,
    transfer_inputs,
)
from embtransfer.transfer.shared_search import search_inputs, search_options
from embtransfer.vocab.inputs import (
    all_calibration,
    all_coverage,
    all_holdout,
    all_shared_kinds,
    holdout_inputs,
    holdout_share,
    lexicon_spec,
    overlap_text,
    shared_kinds_inputs,
    shared_kinds_params,
)


def script_hash(name):
    """Params entry that reruns a rule when its script or any package module it uses changes."""
    return codehash.script_hash(Path(workflow.basedir) / "workflow" / "scripts" / name)


def report_output(name):
    """An output of the report rule, registered for snakemake --report with its caption."""
    return report(REPORT_OUTPUTS[name], **report_entry(name, real_text_run(config)))


# With `--sdm conda`, jobs run in this environment (envs/cuda.yaml on GPU nodes:
# point a profile's overrides or this variable at it).
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "cpu.yaml")
MODELS = config["models"]
MINI_MODELS = models_of_type(config, "mini")
HUB_MODELS = models_of_type(config, "hub")
TRANSFER = config["transfer"]
LAPT = config["lapt"]
EVAL = config["evaluation"]
EVAL_TASKS = EVAL["tasks"]
EVAL_CODE = script_hash("evaluation/evaluate.py") + shipped_tasks_code(config)
REPORT_OUTPUTS = output_names(paths.REPORT_DIR)


wildcard_constraints:
    lang=wildcard_alternatives(config["languages"]),
    model=wildcard_alternatives(MODELS),
    source=wildcard_alternatives(config["sources"]),
    target=wildcard_alternatives({t for plms in config["targets"].values() for t in plms}),
    vectors="word|token",
    split="train|valid",
    method=wildcard_alternatives(METHOD_CATALOG),
    task=wildcard_alternatives(EVAL_CATALOG),
    stage="transfer|lapt",
    seed=r"\d+",
