# fastText spaces: word-level vectors per language (SALT's stand-in for crawl
# vectors), token-level vectors per target tokenizer (FOCUS); token vectors.


rule fasttext_word:
    input:
        corpus=corpus_file("{lang}", "train"),
    output:
        f"{RESULTS}/fasttext/{{lang}}/word.bin",
    params:
        params=config["fasttext"]["word"],
        seed=config["seed"],
        code=script_hash("fasttext_train.py"),
    threads: config["fasttext"]["threads"]
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/fasttext/{{lang}}/word.log",
    script:
        "../scripts/fasttext_train.py"


rule fasttext_tokenize:
    input:
        corpus=corpus_file("{lang}", "train"),
        tokenizer=lambda w: tokenizer_dir(w.model),
    output:
        temp(f"{RESULTS}/fasttext/{{lang}}/token/{{model}}.txt"),
    params:
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("fasttext_tokenize.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/fasttext/{{lang}}/tokenize_{{model}}.log",
    script:
        "../scripts/fasttext_tokenize.py"


use rule fasttext_word as fasttext_token with:
    input:
        corpus=f"{RESULTS}/fasttext/{{lang}}/token/{{model}}.txt",
    output:
        f"{RESULTS}/fasttext/{{lang}}/token/{{model}}.bin",
    params:
        params=config["fasttext"]["token"],
        seed=config["seed"],
        code=script_hash("fasttext_train.py"),
    log:
        f"{LOGS}/fasttext/{{lang}}/token_{{model}}.log",


rule token_vectors:
    input:
        vocab=f"{RESULTS}/vocab/{{model}}.parquet",
        fasttext=fasttext_bin,
    output:
        vectors=f"{RESULTS}/token_vectors/{{lang}}/{{vectors}}/{{model}}.npy",
        missing=f"{RESULTS}/token_vectors/{{lang}}/{{vectors}}/{{model}}.missing.npy",
    params:
        code=script_hash("token_vectors.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/token_vectors/{{lang}}/{{vectors}}/{{model}}.log",
    script:
        "../scripts/token_vectors.py"
