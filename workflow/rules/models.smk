# Models: hub snapshots pinned by revision, or miniature models trained here.
# Local models (type: local) are read in place and need no rule.


rule train_tokenizer:
    input:
        text=lambda w: tokenizer_text(config, w.model),
    output:
        directory(paths.TOKENIZER),
    wildcard_constraints:
        model=wildcard_alternatives(MINI_MODELS),
    params:
        spec=lambda w: tokenizer_spec(config, w.model),
        code=script_hash("models/train_tokenizer.py"),
    priority: lambda w: source_first(config, **w)
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/tokenizers/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/train_tokenizer/{{model}}.tsv"
    script:
        "../scripts/models/train_tokenizer.py"


rule pretrain_model:
    input:
        tokenizer=paths.TOKENIZER,
        train=lambda w: pretraining_text(config, w.model),
        valid=lambda w: paths.CORPUS.fill(lang=MODELS[w.model]["language"], split="valid"),
    output:
        directory(paths.MODEL),
    wildcard_constraints:
        model=wildcard_alternatives(MINI_MODELS),
    params:
        spec=lambda w: MODELS[w.model],
        seed=config["seed"],
        code=script_hash("models/pretrain_model.py"),
    # a model's own train.threads (a source pretrained on real text), else the run's
    threads: lambda w: MODELS[w.model]["train"]["threads"] or config["threads"]
    priority: lambda w: source_first(config, **w)
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/models/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/pretrain_model/{{model}}.tsv"
    script:
        "../scripts/models/pretrain_model.py"


rule fetch_model:
    # Runs where there is internet (a login node); compute jobs then read the snapshot.
    localrule: True
    output:
        directory(paths.MODEL),
    wildcard_constraints:
        model=wildcard_alternatives(HUB_MODELS),
    params:
        # pinning the config to the downloaded commit must not re-download it
        spec=lambda w: fetch_params(MODELS[w.model], w.model, paths.MODELS_DIR),
        code=script_hash("models/fetch_model.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/models/{{model}}.log",
    script:
        "../scripts/models/fetch_model.py"


rule random_model:
    # A model at a real model's shapes with random weights around a real tokenizer
    # (type: random; embtransfer/models/random_weights.py).
    input:
        tokenizer=lambda w: MODELS[w.model]["tokenizer"],
    output:
        directory(paths.MODEL),
    wildcard_constraints:
        model=wildcard_alternatives(models_of_type(config, "random")),
    params:
        spec=lambda w: MODELS[w.model],
        seed=config["seed"],
        code=script_hash("models/random_model.py"),
    threads: config["threads"]
    priority: lambda w: source_first(config, **w)
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/models/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/random_model/{{model}}.tsv"
    script:
        "../scripts/models/random_model.py"
