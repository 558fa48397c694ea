# SALT's regression (GPU-declared), aligned static vectors (WECHSEL, OFA), every
# method's transferred checkpoint, and the zero-shot comparison before training.


wildcard_constraints:
    method=wildcard_alternatives(METHOD_CATALOG),


rule salt_regression:
    input:
        neighbors=lambda w: (
            f"{RESULTS}/neighbors/{w.lang}/{w.source}/{w.target}/{salt_vectors()}.parquet"
        ),
        source=lambda w: model_dir(w.source),
        target=lambda w: model_dir(w.target),
    output:
        tensors=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/projected.safetensors",
        meta=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/projected.json",
    params:
        options=method_options("salt"),
        device=TRANSFER["device"],
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=script_hash("salt_regression.py"),
    threads: config["threads"]
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=60,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/regression/{{lang}}/{{source}}/{{target}}/projected.log",
    benchmark:
        f"{BENCHMARKS}/salt_regression/{{lang}}/{{source}}/{{target}}.tsv"
    script:
        "../scripts/salt_regression.py"


rule aligned_vectors:
    input:
        source_fasttext=lambda w: fasttext_word_bin(config["source_language"]),
        target_fasttext=lambda w: fasttext_word_bin(w.lang),
        source_vocab=f"{RESULTS}/vocab/{{source}}.parquet",
        target_vocab=f"{RESULTS}/vocab/{{target}}.parquet",
        dictionary=lambda w: dictionary_input(w.lang),
        # the tokenizers only for aligned.token_strings: decode
        tokenizers=lambda w: (
            [tokenizer_dir(w.source), tokenizer_dir(w.target)]
            if config["aligned"]["token_strings"] == "decode"
            else []
        ),
    output:
        f"{RESULTS}/aligned/{{lang}}/{{source}}/{{target}}.safetensors",
    params:
        dictionary=lambda w: config["languages"][w.lang].get("dictionary", {"type": "world"}),
        source_language=config.get("source_language"),
        aligned=config["aligned"],
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("aligned_vectors.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/aligned/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/aligned_vectors.py"


rule transfer:
    # The checkpoint and its zero-shot scores in one job (see scripts/transfer.py).
    input:
        unpack(transfer_inputs),
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        model=directory(f"{RESULTS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}"),
        zeroshot=f"{RESULTS}/zeroshot/{{lang}}/{{source}}/{{target}}/{{method}}.json",
    params:
        options=lambda w: method_options(w.method),
        mode=TRANSFER["vocab_mode"],
        seed=config["seed"],
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        zeroshot=config["zeroshot"],
        device=TRANSFER["device"],
        code=transfer_code,
    threads: config["threads"]
    resources:
        mem_mb=8000,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    benchmark:
        f"{BENCHMARKS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}.tsv"
    script:
        "../scripts/transfer.py"


rule zeroshot_source:
    # The untouched source LLM with its own tokenizer on the same text: the
    # reference that bits per byte makes comparable across tokenizers.
    input:
        model=lambda w: model_dir(w.source),
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        f"{RESULTS}/zeroshot/{{lang}}/{{source}}/source_model.json",
    params:
        options=config["zeroshot"],
        device=TRANSFER["device"],
        code=script_hash("zeroshot.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/zeroshot/{{lang}}/{{source}}/source_model.log",
    script:
        "../scripts/zeroshot.py"


rule zeroshot_table:
    input:
        all_zeroshot(),
    output:
        csv=f"{RESULTS}/tables/zeroshot.csv",
        md=f"{RESULTS}/tables/zeroshot.md",
    params:
        code=script_hash("zeroshot_table.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/tables/zeroshot.log",
    script:
        "../scripts/zeroshot_table.py"
