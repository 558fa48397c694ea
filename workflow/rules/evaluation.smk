# Evaluation: lm-eval benchmarks of the source LLMs, the transferred checkpoints and the
# LAPT checkpoints (one contract JSON per task, embtransfer.evaluation.record), the
# miniature world's benchmarks as local lm-eval tasks, held-out loss of LAPT checkpoints
# and tokenizer statistics. Which checkpoints: embtransfer.core.grid.evaluated_runs.


rule world_benchmarks:
    # The miniature world's benchmarks of one target language (local JSONL + task YAML).
    input:
        unpack(lambda w: world_benchmark_inputs(config, w)),
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


if EVAL_TASKS:
    # One job per checkpoint (the model and lm-eval load once for all its tasks), or per
    # (checkpoint, task) with evaluation.jobs: task (embtransfer/evaluation/inputs.py).

    rule evaluate:
        input:
            unpack(lambda w: eval_inputs(config, w)),
        output:
            evaluation_outputs(config, paths.EVAL),
        params:
            specs=lambda w: eval_specs(config, w),
            meta=eval_meta,
            options=evaluation_options(config),
            seed=config["seed"],
            trust_remote_code=config["trust_remote_code"],
            code=EVAL_CODE,
        threads: EVAL["threads"]
        resources:
            **evaluation_resources(config),
        conda:
            CONDA_ENV
        log:
            f"{paths.LOGS}/eval/{job_name(config, CHECKPOINT_JOB)}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{job_name(config, CHECKPOINT_JOB)}.tsv"
        script:
            "../scripts/evaluation/evaluate.py"

    use rule evaluate as evaluate_source with:
        output:
            evaluation_outputs(config, paths.EVAL_SOURCE),
        log:
            f"{paths.LOGS}/eval/{job_name(config, SOURCE_JOB)}.log",
        benchmark:
            f"{paths.BENCHMARKS}/evaluate/{job_name(config, SOURCE_JOB)}.tsv"


rule lapt_zeroshot:
    # Held-out loss, perplexity, bits per byte and fertility of a LAPT checkpoint (the
    # transfer stage's are results/zeroshot/..., the source LLMs' .../source_model.json).
    input:
        model=paths.LAPT_MODEL,
        # the transferred checkpoint it was trained from: how far LAPT moved the new rows
        before=paths.TRANSFER_MODEL,
        # the PLM's overlap, whatever the setting's vocabulary mode
        overlap=lambda w: paths.OVERLAP.fill(**model_wildcards(w)),
        text=paths.CORPUS.fill(split="valid"),
    output:
        paths.LAPT_ZEROSHOT,
    params:
        options=config["zeroshot"],
        device=TRANSFER["device"],
        code=script_hash("evaluation/lapt_zeroshot.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/lapt_zeroshot/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    script:
        "../scripts/evaluation/lapt_zeroshot.py"


rule tokenizer_stats:
    input:
        unpack(lambda w: tokenizer_stats_inputs(config, w)),
    output:
        paths.TOKENIZER_STATS,
    params:
        models=lambda w: tokenizer_stats_models(config, w.lang),
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


rule source_floor:
    # A source LLM pretrained here on real text against an add-one unigram and a
    # Kneser-Ney bigram of its own tokens on held-out text (evaluation/lm_floor.py).
    input:
        model=lambda w: model_dir(config, w.source),
        train=lambda w: paths.CORPUS.fill(lang=MODELS[w.source]["language"], split="train"),
        heldout=lambda w: paths.CORPUS.fill(lang=MODELS[w.source]["language"], split="valid"),
    output:
        paths.SOURCE_FLOOR,
    params:
        options=config["zeroshot"],
        device=config["evaluation"]["device"],
        code=script_hash("evaluation/source_floor.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/intrinsic/source_floor/{{source}}.log",
    script:
        "../scripts/evaluation/source_floor.py"


rule evaluation:
    # Everything this stage makes: `snakemake evaluation`.
    input:
        all_evaluation(config),
        all_intrinsic(config),
        all_alignment(config),
        all_plm_probes(config),


rule alignment:
    # How well each method's new rows mean their tokens' translations (the world's truth).
    input:
        unpack(lambda w: alignment_inputs(config, w)),
    output:
        paths.ALIGNMENT,
    params:
        methods=lambda w: alignment_methods(config, w),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("evaluation/alignment.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/alignment/{{stage}}/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/evaluation/alignment.py"


rule plm_probe:
    # Whether a target PLM's input rows carry meaning (SALT reads them): paired probes, the
    # span probe of every pair, the class probe of the world's (its concept classes).
    input:
        unpack(lambda w: plm_probe_inputs(config, w)),
        neighbors=lambda w: paths.NEIGHBORS.fill(**w, vectors=salt_vectors(config)),
    output:
        paths.PLM_PROBE,
    params:
        seed=lambda w: int(w.seed),
        rcond=salt_rcond(config),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("evaluation/plm_probe.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/probes/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/evaluation/plm_probe.py"
