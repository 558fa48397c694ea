# Canonical token forms per vocabulary, and the source/target overlap.


rule vocab:
    input:
        tokenizer=lambda w: tokenizer_dir(w.model),
    output:
        paths.VOCAB,
    params:
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/vocab.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/vocab/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/vocab/{{model}}.tsv"
    script:
        "../scripts/vocab/vocab.py"


rule overlap:
    input:
        source=paths.VOCAB.fill(model="{source}"),
        target=paths.VOCAB.fill(model="{target}"),
        target_tokenizer=lambda w: tokenizer_dir(w.target),
        valid=lambda w: corpus_file(model_language(w.target), "valid"),
    output:
        pairs=paths.OVERLAP,
        coverage=paths.COVERAGE,
    params:
        match=config["overlap"]["match"],
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/overlap.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/overlap/{{source}}/{{target}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/overlap/{{source}}/{{target}}.tsv"
    script:
        "../scripts/vocab/overlap.py"


rule world_truth:
    # What each target token means in the source language, as the miniature world knows it.
    input:
        world=rules.world.output[0],
        source_vocab=paths.VOCAB.fill(model="{source}"),
        target_vocab=paths.VOCAB.fill(model="{target}"),
        source_tokenizer=lambda w: tokenizer_dir(w.source),
        overlap=paths.OVERLAP.fill(source="{source}", target="{target}"),
    output:
        table=paths.WORLD_TRUTH,
        counts=paths.WORLD_TRUTH_COUNTS,
    params:
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/truth.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/truth/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/vocab/truth.py"
