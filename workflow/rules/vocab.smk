# Canonical token forms per vocabulary, and the source/target overlap.


rule vocab:
    input:
        tokenizer=lambda w: tokenizer_dir(w.model),
    output:
        f"{RESULTS}/vocab/{{model}}.parquet",
    params:
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/vocab/{{model}}.log",
    script:
        "../scripts/vocab.py"


rule overlap:
    input:
        source=f"{RESULTS}/vocab/{{source}}.parquet",
        target=f"{RESULTS}/vocab/{{target}}.parquet",
        target_tokenizer=lambda w: tokenizer_dir(w.target),
        valid=lambda w: corpus_file(model_language(w.target), "valid"),
    output:
        pairs=f"{RESULTS}/overlap/{{source}}/{{target}}.parquet",
        coverage=f"{RESULTS}/overlap/{{source}}/{{target}}.coverage.json",
    params:
        match=config["overlap"]["match"],
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("overlap.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/overlap/{{source}}/{{target}}.log",
    script:
        "../scripts/overlap.py"
