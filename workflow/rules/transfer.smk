# SALT's regression (GPU-declared), aligned static vectors (WECHSEL, OFA), every
# method's transferred checkpoint, and the zero-shot comparison before training.


rule salt_regression:
    input:
        # the source model is not read here: the transfer job applies the coefficients
        neighbors=lambda w: paths.NEIGHBORS.fill(**w, vectors=salt_vectors(config)),
        target=lambda w: model_dir(config, w.target),
    output:
        tensors=paths.REGRESSION,
        meta=paths.REGRESSION_META,
    params:
        options=method_options(config, "salt"),
        device=TRANSFER["device"],
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=script_hash("transfer/salt_regression.py"),
    threads: config["threads"]
    resources:
        gpu=1,
        mem_mb=TRANSFER["mem_mb"] or 16000,
        runtime=60,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/regression/{{lang}}/{{source}}/{{target}}/projected.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/salt_regression/{{lang}}/{{source}}/{{target}}.tsv"
    script:
        "../scripts/transfer/salt_regression.py"


rule aligned_vectors:
    input:
        source_fasttext=lambda w: fasttext_word_bin(config, config["source_language"], w.seed),
        target_fasttext=lambda w: fasttext_word_bin(config, w.lang, w.seed),
        source_vocab=paths.VOCAB.fill(model="{source}"),
        target_vocab=paths.VOCAB.fill(model="{target}"),
        dictionary=lambda w: dictionary_input(config, w.lang),
        tokenizers=lambda w: aligned_tokenizers(config, w),
    output:
        paths.ALIGNED,
    params:
        dictionary=lambda w: dictionary_spec(config, w.lang),
        # a world dictionary, or a real one with held_out: its held-out half is left out
        # (world/split.py, data/dictionary_split.py)
        held_out=config["dictionary_held_out"],
        seed=lambda w: int(w.seed),
        source_language=config.get("source_language"),
        # the keys this job reads (share_search is the aligned_search rule's)
        aligned={k: config["aligned"][k] for k in ("token_strings", "duplicate_variants")},
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("transfer/aligned_vectors.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/aligned/{{lang}}/{{source}}/{{target}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/aligned_vectors/{{lang}}/{{source}}/{{target}}.tsv"
    script:
        "../scripts/transfer/aligned_vectors.py"


rule aligned_search:
    # WECHSEL's and OFA's top-k neighbours in the aligned space, searched once for both
    # (aligned.share_search: true; embtransfer/transfer/aligned.py).
    input:
        paths.ALIGNED,
    output:
        paths.ALIGNED_SEARCH,
    params:
        options=search_options(config),
        code=script_hash("transfer/aligned_search.py"),
    threads: config["threads"]
    resources:
        mem_mb=TRANSFER["mem_mb"] or 8000,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/aligned/{{lang}}/{{source}}/{{target}}.search.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/aligned_search/{{lang}}/{{source}}/{{target}}.tsv"
    script:
        "../scripts/transfer/aligned_search.py"


rule omp_solve:
    # omp's and omp_salt_k's fits of one pair from one solve to the larger k, where a run
    # has both (embtransfer/transfer/methods/omp.py): the solve is most of their time.
    input:
        unpack(lambda w: omp_solve_rule_inputs(config, w)),
    output:
        paths.OMP_SOLVE,
    params:
        options=omp_solve_options(config),
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=script_hash("transfer/omp_solve.py") + method_code("omp"),
    threads: config["threads"]
    priority: 1
    resources:
        mem_mb=TRANSFER["mem_mb"] or 8000,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/omp/{{lang}}/{{source}}/{{target}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/omp_solve/{{lang}}/{{source}}/{{target}}.tsv"
    script:
        "../scripts/transfer/omp_solve.py"


rule fasttext_bli:
    # Whether the aligned fastText spaces WECHSEL and OFA search retrieve translations at
    # all: bilingual lexicon induction with their map on the dictionary's held-out half.
    input:
        unpack(lambda w: fasttext_bli_inputs(config, w)),
    output:
        paths.FASTTEXT_BLI,
    params:
        source_language=config.get("source_language"),
        code=script_hash("transfer/fasttext_bli.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/fasttext_bli/{{lang}}.log",
    script:
        "../scripts/transfer/fasttext_bli.py"


rule transfer:
    # The checkpoint and its zero-shot scores in one job (see scripts/transfer/transfer.py).
    input:
        unpack(lambda w: transfer_inputs(config, w)),
        unpack(lambda w: search_inputs(config, w)),
        unpack(lambda w: omp_solve_inputs(config, w)),
        text=paths.CORPUS.fill(split="valid"),
    output:
        model=directory(paths.TRANSFER_MODEL),
        zeroshot=paths.ZEROSHOT,
    params:
        options=lambda w: method_options(config, w.method),
        mode=lambda w: target_mode(config, w.target),
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        zeroshot=config["zeroshot"],
        device=TRANSFER["device"],
        code=lambda w: script_hash("transfer/transfer.py") + method_code(w.method),
    threads: config["threads"]
    priority: lambda w: transfer_priority(w.method)
    resources:
        mem_mb=TRANSFER["mem_mb"] or 8000,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}.tsv"
    script:
        "../scripts/transfer/transfer.py"


rule zeroshot_source:
    # The untouched source LLM with its own tokenizer on the same text: the
    # reference that bits per byte makes comparable across tokenizers.
    input:
        model=lambda w: model_dir(config, w.source),
        text=paths.CORPUS.fill(split="valid"),
    output:
        paths.ZEROSHOT_SOURCE,
    params:
        options=config["zeroshot"],
        device=TRANSFER["device"],
        code=script_hash("transfer/zeroshot.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/zeroshot/{{lang}}/{{source}}/source_model.log",
    benchmark:
        f"{paths.BENCHMARKS}/zeroshot_source/{{lang}}/{{source}}.tsv"
    script:
        "../scripts/transfer/zeroshot.py"


use rule salt_regression as holdout_regression with:
    # SALT's regression on the held-out neighbour tables (the held-out tokens among its rows)
    input:
        neighbors=lambda w: paths.HOLDOUT_NEIGHBORS.fill(**w, vectors=salt_vectors(config)),
        target=lambda w: model_dir(config, w.target),
    output:
        tensors=paths.HOLDOUT_REGRESSION,
        meta=paths.HOLDOUT_REGRESSION_META,
    log:
        f"{paths.LOGS}/seed{{seed}}/holdout_regression/{{lang}}/{{source}}/{{target}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/holdout_regression/{{lang}}/{{source}}/{{target}}.tsv"


rule holdout_transfer:
    # One method with the held-out shared tokens hidden; its rows for them scored against
    # their true source rows (embtransfer.transfer.job.run_holdout_job). No checkpoint.
    input:
        unpack(lambda w: holdout_transfer_inputs(config, w)),
    output:
        paths.HOLDOUT_SCORES,
    params:
        options=lambda w: method_options(config, w.method),
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=lambda w: script_hash("transfer/holdout_transfer.py") + method_code(w.method),
    threads: config["threads"]
    priority: lambda w: transfer_priority(w.method)
    resources:
        mem_mb=TRANSFER["mem_mb"] or 8000,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/holdout_transfer/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/holdout_transfer/{{lang}}/{{source}}/{{target}}/{{method}}.tsv"
    script:
        "../scripts/transfer/holdout_transfer.py"


rule tokalign_glove:
    # TokAlign's GloVe space of a language's corpus in one model's tokenization
    # (embtransfer/transfer/glove.py): each tokenizer's space trained apart.
    input:
        corpus=paths.CORPUS.fill(split="train"),
        tokenizer=lambda w: tokenizer_dir(config, w.model),
    output:
        paths.GLOVE,
    params:
        options=glove_options(config),
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("transfer/tokalign_glove.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/glove/{{lang}}/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/tokalign_glove/{{lang}}/{{model}}.tsv"
    script:
        "../scripts/transfer/tokalign_glove.py"
