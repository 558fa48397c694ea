# Downloads: local rules, run where Snakemake itself runs (a login node with internet).
# `snakemake --cores 1 download_all` fetches everything the config needs: hub model
# snapshots (rule fetch_model, models.smk), fastText crawl vectors, Wikipedia sentences
# and NLTK's punkt model, MUSE dictionaries, lm-eval datasets. Compute jobs then run
# offline (HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1); offline, a missing download fails
# at once naming the rule to run. Logic: workflow/embtransfer/download.py.


rule fetch_fasttext_crawl:
    # cc.{code}.300.bin from dl.fbaipublicfiles.com (about 4.5 GB gzipped, 7 GB unpacked).
    localrule: True
    output:
        paths.FASTTEXT_CRAWL,
    wildcard_constraints:
        code=wildcard_alternatives(CRAWL_CODES),
    params:
        code=script_hash("download_fasttext.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/fasttext_cc.{{code}}.log",
    script:
        "../scripts/download_fasttext.py"


rule fetch_nltk_punkt:
    localrule: True
    output:
        directory(paths.NLTK_DIR),
    params:
        code=script_hash("download_nltk.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/nltk_punkt.log",
    script:
        "../scripts/download_nltk.py"


rule fetch_wikipedia:
    # The first N NLTK sentences of wikimedia/wikipedia {dump}.{language}, in dump order;
    # the corpus rule splits them 9:1 (sequentially) offline.
    localrule: True
    input:
        nltk=paths.NLTK_DIR,
    output:
        paths.WIKIPEDIA_SENTENCES,
    wildcard_constraints:
        lang=wildcard_alternatives(WIKIPEDIA_LANGS),
    params:
        spec=lambda w: LANGS[w.lang]["corpus"],
        code=script_hash("download_wikipedia.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/wikipedia_{{lang}}.log",
    script:
        "../scripts/download_wikipedia.py"


rule fetch_muse_dictionary:
    # MUSE ground-truth bilingual dictionaries (dl.fbaipublicfiles.com/arrival/dictionaries/),
    # e.g. resources/dictionaries/muse/en-de.txt for WECHSEL and OFA.
    localrule: True
    output:
        paths.MUSE_DICTIONARY,
    wildcard_constraints:
        **paths.MUSE_DICTIONARY.constraints,
    params:
        code=script_hash("download_dictionary.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/muse_{{src}}-{{tgt}}.log",
    script:
        "../scripts/download_dictionary.py"


# lm-eval datasets: the datasets of the config's stock (and shipped) lm-eval tasks, saved
# as JSON lines under evaluation.datasets_dir (embtransfer.evaluation.datasets), where
# evaluation jobs read them.
from embtransfer.evaluation.catalog import SHIPPED_TASK_DIR


rule fetch_lm_eval_datasets:
    localrule: True
    output:
        paths.lm_eval_index(config["evaluation"]["datasets_dir"]),
    params:
        stock=LM_EVAL_STOCK,
        shipped=LM_EVAL_SHIPPED,
        shipped_dir=str(SHIPPED_TASK_DIR),
        code=script_hash("download_lm_eval.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/download/lm_eval_datasets.log",
    script:
        "../scripts/download_lm_eval.py"


rule download_all:
    # Everything the config needs from the internet; run it on a login node.
    localrule: True
    input:
        all_downloads(),
