# fastText spaces: word-level vectors per language (SALT's stand-in for crawl
# vectors), token-level vectors per target tokenizer (FOCUS); token vectors.


rule fasttext_word:
    input:
        corpus=paths.CORPUS.fill(split="train"),
    output:
        paths.FASTTEXT_WORD,
    params:
        params=config["fasttext"]["word"],
        seed=lambda w: int(w.seed),
        code=script_hash("fasttext/fasttext_train.py"),
    threads: config["fasttext"]["threads"]
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/fasttext/{{lang}}/word.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/fasttext_word/{{lang}}.tsv"
    script:
        "../scripts/fasttext/fasttext_train.py"


rule fasttext_tokenize:
    input:
        corpus=paths.CORPUS.fill(split="train"),
        tokenizer=lambda w: tokenizer_dir(config, w.model),
    output:
        temp(paths.FASTTEXT_TOKEN_TEXT),
    params:
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("fasttext/fasttext_tokenize.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/fasttext/{{lang}}/tokenize_{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/fasttext_tokenize/{{lang}}/{{model}}.tsv"
    script:
        "../scripts/fasttext/fasttext_tokenize.py"


use rule fasttext_word as fasttext_token with:
    input:
        corpus=paths.FASTTEXT_TOKEN_TEXT,
    output:
        paths.FASTTEXT_TOKEN,
    params:
        params=config["fasttext"]["token"],
        seed=lambda w: int(w.seed),
        code=script_hash("fasttext/fasttext_train.py"),
    log:
        f"{paths.LOGS}/seed{{seed}}/fasttext/{{lang}}/token_{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/fasttext_token/{{lang}}/{{model}}.tsv"


rule token_vectors:
    input:
        vocab=paths.VOCAB,
        fasttext=lambda w: fasttext_bin(config, w),
    output:
        vectors=paths.TOKEN_VECTORS,
        missing=paths.TOKEN_VECTORS_MISSING,
    params:
        code=script_hash("fasttext/token_vectors.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/token_vectors/{{lang}}/{{vectors}}/{{model}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/token_vectors/{{lang}}/{{vectors}}/{{model}}.tsv"
    script:
        "../scripts/fasttext/token_vectors.py"
