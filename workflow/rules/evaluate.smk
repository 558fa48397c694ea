# Evaluation: lm-eval benchmarks of the source LLMs, the transferred checkpoints and the
# LAPT checkpoints (one contract JSON per task, embtransfer.evaluation.record), the
# miniature world's benchmarks as local lm-eval tasks, held-out loss of LAPT checkpoints
# and tokenizer statistics. Which checkpoints: embtransfer.evaluation.catalog.evaluated_runs.
from embtransfer.evaluation.catalog import (
    CATALOG as EVAL_CATALOG,
    evaluated_runs,
    evaluated_sources,
    shipped_tasks_hash,
    spec_dicts,
    world_task_keys,
)

EVAL = config["evaluation"]
EVAL_TASKS = EVAL["tasks"]
EVAL_WORLD = bool(world_task_keys(config))
EVAL_RUNS = {stage: evaluated_runs(config, stage) for stage in ("transfer", "lapt")}


wildcard_constraints:
    task=wildcard_alternatives(EVAL_CATALOG),
    stage="transfer|lapt",


def eval_code():
    code = script_hash("evaluate.py")
    if any(EVAL_CATALOG[k].source == "shipped" for k in EVAL_TASKS):
        # The shipped task configs are code too (their scoring is the runner's).
        code += shipped_tasks_hash()
    return code


EVAL_CODE = eval_code()


def eval_checkpoint(w):
    stage = w.get("stage", "source")
    if stage == "source":
        return model_dir(w.source)
    if stage == "lapt":
        return rules.lapt.output.model.format(
            lang=w.lang, source=w.source, target=w.target, method=w.method)
    return f"{RESULTS}/transfer/{w.lang}/{w.source}/{w.target}/{w.method}"


def hub_datasets(keys):
    # Stock and shipped tasks read their datasets from evaluation.datasets_dir, which the
    # local download rule fills (download.smk), so compute jobs run offline.
    if any(EVAL_CATALOG[k].source != "world" for k in keys):
        return {"datasets": rules.fetch_lm_eval_datasets.output[0]}
    return {}


def eval_inputs(w):
    inputs = {"model": eval_checkpoint(w)}
    keys = [w.task] if "task" in w.keys() else EVAL_TASKS
    if any(EVAL_CATALOG[k].source == "world" for k in keys):
        inputs["benchmarks"] = f"{RESULTS}/benchmarks/{w.lang}"
    return inputs | hub_datasets(keys)


def eval_meta(w):
    stage = w.get("stage", "source")
    return {"stage": stage, "lang": w.lang, "source": w.source,
            "target": w.target if stage != "source" else None,
            "method": w.method if stage != "source" else None}


def eval_specs(w):
    return spec_dicts(config, w.lang, [w.task] if "task" in w.keys() else None)


EVAL_OPTIONS = {k: EVAL[k] for k in ("device", "batch_size", "limit", "max_length")}
EVAL_OPTIONS["nfc"] = EVAL["scoring"]["nfc"]
EVAL_RESOURCES = {"mem_mb": 8000, "runtime": 120}
if EVAL["device"] != "cpu":
    EVAL_RESOURCES["gpu"] = 1

CKPT = "{stage}/{lang}/{source}/{target}/{method}"
SRC = "source/{lang}/{source}"


rule world_benchmarks:
    # The miniature world's benchmarks of one target language (local JSONL + task YAML).
    input:
        world=rules.world.output[0],
    output:
        directory(f"{RESULTS}/benchmarks/{{lang}}"),
    params:
        sizes=EVAL["world"],
        seed=config["seed"],
        code=script_hash("evaluate_benchmarks.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/benchmarks/{{lang}}.log",
    script:
        "../scripts/evaluate_benchmarks.py"


if EVAL_TASKS and EVAL["jobs"] == "checkpoint":
    # One job per checkpoint: the model and lm-eval load once for all its tasks.

    rule evaluate:
        input:
            unpack(eval_inputs),
        output:
            [f"{RESULTS}/eval/{CKPT}/{task}.json" for task in EVAL_TASKS],
        params:
            specs=eval_specs,
            meta=eval_meta,
            options=EVAL_OPTIONS,
            seed=config["seed"],
            trust_remote_code=config["trust_remote_code"],
            code=EVAL_CODE,
        threads: EVAL["threads"]
        resources:
            **EVAL_RESOURCES,
        conda:
            CONDA_ENV
        log:
            f"{LOGS}/eval/{CKPT}.log",
        script:
            "../scripts/evaluate.py"

    use rule evaluate as evaluate_source with:
        output:
            [f"{RESULTS}/eval/{SRC}/{task}.json" for task in EVAL_TASKS],
        log:
            f"{LOGS}/eval/{SRC}.log",

elif EVAL_TASKS:
    # One job per (checkpoint, task).

    rule evaluate:
        input:
            unpack(eval_inputs),
        output:
            f"{RESULTS}/eval/{CKPT}/{{task}}.json",
        params:
            specs=eval_specs,
            meta=eval_meta,
            options=EVAL_OPTIONS,
            seed=config["seed"],
            trust_remote_code=config["trust_remote_code"],
            code=EVAL_CODE,
        threads: EVAL["threads"]
        resources:
            **EVAL_RESOURCES,
        conda:
            CONDA_ENV
        log:
            f"{LOGS}/eval/{CKPT}/{{task}}.log",
        script:
            "../scripts/evaluate.py"

    use rule evaluate as evaluate_source with:
        output:
            f"{RESULTS}/eval/{SRC}/{{task}}.json",
        log:
            f"{LOGS}/eval/{SRC}/{{task}}.log",


use rule zeroshot as intrinsic_lapt with:
    # Held-out loss, perplexity, bits per byte and fertility of a LAPT checkpoint (the
    # transfer stage's are results/zeroshot/..., the source LLMs' .../source_model.json).
    input:
        model=lambda w: rules.lapt.output.model.format(
            lang=w.lang, source=w.source, target=w.target, method=w.method),
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        f"{RESULTS}/intrinsic/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.json",
    log:
        f"{LOGS}/intrinsic/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.log",


def tokenizer_stats_models(lang):
    """model -> role (source/target) of the tokenizers compared on ``lang``'s eval sets."""
    models = {s: "source" for s in config["sources"]}
    models.update({t: "target" for t in config["targets"][lang]})
    return models


def tokenizer_stats_inputs(w):
    inputs = {
        "tokenizers": [tokenizer_dir(m) for m in tokenizer_stats_models(w.lang)],
        "valid": corpus_file(w.lang, "valid"),
    }
    if EVAL_WORLD:
        inputs["benchmarks"] = f"{RESULTS}/benchmarks/{w.lang}"
    return inputs | hub_datasets(EVAL_TASKS)


rule tokenizer_stats:
    input:
        unpack(tokenizer_stats_inputs),
    output:
        f"{RESULTS}/intrinsic/tokenizers/{{lang}}.json",
    params:
        models=lambda w: tokenizer_stats_models(w.lang),
        specs=lambda w: spec_dicts(config, w.lang),
        limit=EVAL["limit"],
        max_lines=config["zeroshot"]["max_lines"],
        code=EVAL_CODE + script_hash("tokenizer_stats.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/intrinsic/tokenizers/{{lang}}.log",
    script:
        "../scripts/tokenizer_stats.py"


def all_evaluation():
    """The lm-eval result JSONs (the report's inputs): every evaluated checkpoint x task."""
    files = [
        f"{RESULTS}/eval/{stage}/{r.lang}/{r.source}/{r.target}/{r.method}/{task}.json"
        for stage, runs in EVAL_RUNS.items()
        for r in runs
        for task in EVAL_TASKS
    ]
    files += [
        f"{RESULTS}/eval/source/{lang}/{source}/{task}.json"
        for lang, source in evaluated_sources(config)
        for task in EVAL_TASKS
    ]
    return files


def all_intrinsic():
    """Held-out loss of the LAPT checkpoints and the tokenizer statistics."""
    files = []
    if EVAL["intrinsic"]:
        files += [
            f"{RESULTS}/intrinsic/lapt/{r.lang}/{r.source}/{r.target}/{r.method}.json"
            for r in EVAL_RUNS["lapt"]
        ]
    if EVAL["tokenizer_stats"]:
        files += [f"{RESULTS}/intrinsic/tokenizers/{lang}.json" for lang in config["targets"]]
    return files


rule evaluation:
    # Everything this stage makes: `snakemake evaluation`.
    input:
        all_evaluation(),
        all_intrinsic(),
