# Language-adaptive continual pre-training of the transferred checkpoints (GPU-declared,
# resumable: a killed or preempted job restarts from the checkpoint in {method}.work/).


rule lapt_blocks:
    # Tokenise once: packed blocks (uint32 .npy + .json sidecar) shared by every LAPT job
    # of this tokenizer and every resume.
    input:
        model=lambda w: blocks_tokenizer(config, w),
        text=lambda w: blocks_text(config, w),
    output:
        blocks=paths.LAPT_BLOCKS,
        meta=paths.LAPT_BLOCKS_META,
    wildcard_constraints:
        text=block_texts(config),
    params:
        max_length=LAPT["max_length"],
        code=script_hash("lapt/lapt_blocks.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/lapt_blocks/{{lang}}/{{source}}/{{target}}/{{text}}.log",
    script:
        "../scripts/lapt/lapt_blocks.py"


rule lapt:
    input:
        unpack(lambda w: lapt_inputs(config, w)),
    output:
        model=directory(paths.LAPT_MODEL),
        metrics=paths.LAPT_METRICS,
    params:
        lapt=training_settings(config),
        seed=lambda w: int(w.seed),
        work=paths.LAPT_WORK,
        code=script_hash("lapt/lapt.py"),
    threads: config["threads"]
    resources:
        gpu=LAPT["gpus"],
        mem_mb=LAPT["mem_mb"],
        runtime=LAPT["runtime"],
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.tsv"
    script:
        "../scripts/lapt/lapt.py"
