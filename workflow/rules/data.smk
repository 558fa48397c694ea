# Corpora: the miniature world, local text or Wikipedia; and the source LLMs'
# pretraining mixes (mostly source language with a small target share).
rule world:
    output:
        paths.WORLD,
    params:
        world=config["world"],
        seed=config["seed"],
        code=script_hash("world.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/world.log",
    script:
        "../scripts/world.py"


rule corpus:
    input:
        unpack(corpus_inputs),
    output:
        train=paths.CORPUS.fill(split="train"),
        valid=paths.CORPUS.fill(split="valid"),
    params:
        spec=lambda w: config["languages"][w.lang]["corpus"],
        world=config["world"],
        seed=config["seed"],
        code=script_hash("corpus.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/corpus/{{lang}}.log",
    script:
        "../scripts/corpus.py"


rule mix_corpus:
    input:
        main=lambda w: corpus_file(MODELS[w.model]["language"], "train"),
        others=lambda w: [corpus_file(lang, "train") for lang in mixed_languages(w, mini=False)],
        world=lambda w: [rules.world.output[0]] if mixed_languages(w, mini=True) else [],
    output:
        paths.MIX_CORPUS,
    params:
        shares=lambda w: MODELS[w.model]["mix"],
        mini=lambda w: mixed_languages(w, mini=True),
        seed=config["seed"],
        code=script_hash("mix_corpus.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/corpus/mix_{{model}}.log",
    script:
        "../scripts/mix_corpus.py"
