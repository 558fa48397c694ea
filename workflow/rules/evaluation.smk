# Evaluation: lm-eval benchmarks of the source LLMs, the transferred checkpoints and the
# LAPT checkpoints (one contract JSON per task, embtransfer.evaluation.record), the
# miniature world's benchmarks as local lm-eval tasks, held-out loss of LAPT checkpoints
# and tokenizer statistics. Which checkpoints: embtransfer.core.grid.evaluated_runs.


rule world_benchmarks:
    # The miniature world's benchmarks of one target language (local JSONL + task YAML).
    input:
        unpack(world_benchmark_inputs),
    output:
        directory(paths.WORLD_BENCHMARKS),
    params:
        sizes=EVAL["world"],
        trust_remote_code=config["trust_remote_code"],
        seed=config["seed"],
        code=script_hash("evaluation/evaluate_benchmarks.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/benchmarks/{{lang}}.log",
    script:
        "../scripts/evaluation/evaluate_benchmarks.py"


if EVAL_TASKS and EVAL["jobs"] == "checkpoint":
    # One job per checkpoint: the model and lm-eval load once for all its tasks.

    rule evaluate:
        input:
            unpack(eval_inputs),
        output:
            [paths.EVAL.fill(task=task) for task in EVAL_TASKS],
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
            f"{paths.LOGS}/eval/{CKPT}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{CKPT}.tsv"
        script:
            "../scripts/evaluation/evaluate.py"

    use rule evaluate as evaluate_source with:
        output:
            [paths.EVAL_SOURCE.fill(task=task) for task in EVAL_TASKS],
        log:
            f"{paths.LOGS}/eval/{SRC}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{SRC}.tsv"

elif EVAL_TASKS:
    # One job per (checkpoint, task).

    rule evaluate:
        input:
            unpack(eval_inputs),
        output:
            paths.EVAL,
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
            f"{paths.LOGS}/eval/{CKPT}/{{task}}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{CKPT}/{{task}}.tsv"
        script:
            "../scripts/evaluation/evaluate.py"

    use rule evaluate as evaluate_source with:
        output:
            paths.EVAL_SOURCE,
        log:
            f"{paths.LOGS}/eval/{SRC}/{{task}}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{SRC}/{{task}}.tsv"


rule intrinsic_lapt:
    # Held-out loss, perplexity, bits per byte and fertility of a LAPT checkpoint (the
    # transfer stage's are results/zeroshot/..., the source LLMs' .../source_model.json).
    input:
        model=lambda w: paths.LAPT_MODEL.fill(**w),
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        paths.INTRINSIC_LAPT,
    params:
        options=config["zeroshot"],
        device=TRANSFER["device"],
        code=script_hash("evaluation/intrinsic_lapt.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/intrinsic/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    script:
        "../scripts/evaluation/intrinsic_lapt.py"


rule tokenizer_stats:
    input:
        unpack(tokenizer_stats_inputs),
    output:
        paths.TOKENIZER_STATS,
    params:
        models=lambda w: tokenizer_stats_models(w.lang),
        specs=lambda w: spec_dicts(config, w.lang),
        limit=EVAL["limit"],
        max_lines=config["zeroshot"]["max_lines"],
        code=EVAL_CODE + script_hash("evaluation/tokenizer_stats.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/intrinsic/tokenizers/{{lang}}.log",
    script:
        "../scripts/evaluation/tokenizer_stats.py"


rule evaluation:
    # Everything this stage makes: `snakemake evaluation`.
    input:
        all_evaluation(),
        all_intrinsic(),
        all_alignment(),
        all_plm_probes(),


rule alignment:
    # How well each method's new rows mean their tokens' translations (the world's truth).
    input:
        unpack(alignment_inputs),
    output:
        paths.ALIGNMENT,
    params:
        methods=alignment_methods,
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("evaluation/alignment.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/alignment/{{stage}}/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/evaluation/alignment.py"


rule plm_probe:
    # Whether a target PLM's input rows carry meaning (SALT reads them): two paired probes.
    input:
        plm=lambda w: model_dir(w.target),
        neighbors=lambda w: paths.NEIGHBORS.fill(**w, vectors=salt_vectors()),
        overlap=paths.OVERLAP,
        truth=paths.WORLD_TRUTH,
        world=paths.WORLD,
    output:
        paths.PLM_PROBE,
    params:
        seed=config["seed"],
        rcond=resolve_options("salt", method_options("salt"))["rcond"],
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("evaluation/plm_probe.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/probes/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/evaluation/plm_probe.py"
