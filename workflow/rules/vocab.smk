# Canonical token forms per vocabulary, and the source/target overlap.


rule vocab:
    input:
        tokenizer=lambda w: tokenizer_dir(config, w.model),
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
        target_tokenizer=lambda w: tokenizer_dir(config, w.target),
        valid=lambda w: overlap_text(config, w),
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
        source_tokenizer=lambda w: tokenizer_dir(config, w.source),
        overlap=paths.OVERLAP.fill(source="{source}", target="{target}"),
    output:
        table=paths.WORLD_TRUTH,
        counts=paths.WORLD_TRUTH_COUNTS,
    params:
        held_out=config["dictionary_held_out"],  # each row's split (world/split.py)
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/truth.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/truth/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/vocab/truth.py"


rule dictionary_truth:
    # What each target token means in English, from the held-out half of a real dictionary
    # (held_out: true; embtransfer/data/dictionary_split.py).
    input:
        dictionary=lambda w: dictionary_input(config, w.lang),
        source_vocab=paths.VOCAB.fill(model="{source}"),
        target_vocab=paths.VOCAB.fill(model="{target}"),
        source_tokenizer=lambda w: tokenizer_dir(config, w.source),
        overlap=paths.OVERLAP.fill(source="{source}", target="{target}"),
    output:
        table=paths.DICTIONARY_TRUTH,
        counts=paths.DICTIONARY_TRUTH_COUNTS,
    params:
        dictionary=lambda w: dictionary_spec(config, w.lang),
        held_out=config["dictionary_held_out"],
        seed=lambda w: int(w.seed),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/dictionary_truth.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/truth_dictionary/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/vocab/dictionary_truth.py"


rule holdout:
    # The shared tokens hidden from every method (transfer.holdout), drawn per kind with the
    # replicate seed, by source id (embtransfer/vocab/holdout.py).
    input:
        unpack(lambda w: holdout_inputs(config, w)),
    output:
        table=paths.HOLDOUT,
        counts=paths.HOLDOUT_COUNTS,
        # the overlap a held-out transfer and its neighbour tables read
        overlap=paths.HOLDOUT_OVERLAP,
    params:
        share=lambda w: holdout_share(config, w.lang),
        lexicon=lambda w: lexicon_spec(config, w.lang, w.source, w.target),
        code=script_hash("vocab/holdout.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/holdout/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/vocab/holdout.py"


rule shared_kinds:
    # The world's pairs, or a real-text run's, measured as the real ones are
    # (analysis/real_shared_tokens.py): coverage and the kinds of shared tokens, beside the
    # committed real table (docs/calibration.md).
    input:
        unpack(lambda w: shared_kinds_inputs(config)),
    output:
        paths.SHARED_KINDS,
    params:
        pairs=shared_kinds_params(config),
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("vocab/kinds.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/overlap/shared_kinds.log",
    script:
        "../scripts/vocab/kinds.py"
