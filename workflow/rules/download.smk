# Downloads: local rules, run where Snakemake itself runs (a login node with internet).
# `snakemake --cores 1 download_all` fetches everything the config needs: hub model
# snapshots (rule fetch_model, models.smk), fastText crawl vectors, Wikipedia sentences
# and NLTK's punkt model, MUSE dictionaries, lm-eval datasets. Compute jobs then run
# offline (HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1); offline, a missing download fails
# at once naming the rule to run. Logic: workflow/embtransfer/download.py.
NLTK_DIR = "resources/nltk_data"
MUSE_DIR = "resources/dictionaries/muse"
LANGS = config["languages"]
WIKIPEDIA_LANGS = sorted(l for l, s in LANGS.items() if s["corpus"]["type"] == "wikipedia")
CRAWL_CODES = sorted(
    {
        s["fasttext"].get("code", l)
        for l, s in LANGS.items()
        if s.get("fasttext", {}).get("type") == "crawl"
    }
)


def wikipedia_sentences_file(lang):
    return f"resources/wikipedia/{lang}/sentences.txt"


def muse_dictionaries():
    """Dictionary files of the config that live under resources/dictionaries/muse/."""
    paths = []
    for spec in LANGS.values():
        path = spec.get("dictionary", {}).get("path", "")
        if spec.get("dictionary", {}).get("type") == "file" and path.startswith(MUSE_DIR + "/"):
            paths.append(path)
    return sorted(set(paths))


rule fetch_fasttext_crawl:
    # cc.{code}.300.bin from dl.fbaipublicfiles.com (about 4.5 GB gzipped, 7 GB unpacked).
    localrule: True
    output:
        "resources/fasttext/cc.{code}.300.bin",
    wildcard_constraints:
        code=wildcard_alternatives(CRAWL_CODES),
    params:
        code=script_hash("download_fasttext.py"),
    log:
        f"{LOGS}/download/fasttext_cc.{{code}}.log",
    script:
        "../scripts/download_fasttext.py"


rule fetch_nltk_punkt:
    localrule: True
    output:
        directory(NLTK_DIR),
    params:
        code=script_hash("download_nltk.py"),
    log:
        f"{LOGS}/download/nltk_punkt.log",
    script:
        "../scripts/download_nltk.py"


rule fetch_wikipedia:
    # The first N NLTK sentences of wikimedia/wikipedia {dump}.{language}, in dump order;
    # the corpus rule splits them 9:1 (sequentially) offline.
    localrule: True
    input:
        nltk=NLTK_DIR,
    output:
        wikipedia_sentences_file("{lang}"),
    wildcard_constraints:
        lang=wildcard_alternatives(WIKIPEDIA_LANGS),
    params:
        spec=lambda w: LANGS[w.lang]["corpus"],
        code=script_hash("download_wikipedia.py"),
    log:
        f"{LOGS}/download/wikipedia_{{lang}}.log",
    script:
        "../scripts/download_wikipedia.py"


rule fetch_muse_dictionary:
    # MUSE ground-truth bilingual dictionaries (dl.fbaipublicfiles.com/arrival/dictionaries/),
    # e.g. resources/dictionaries/muse/en-de.txt for WECHSEL and OFA.
    localrule: True
    output:
        f"{MUSE_DIR}/{{src}}-{{tgt}}.txt",
    wildcard_constraints:
        src="[a-z]+",
        tgt="[a-z]+",
    params:
        code=script_hash("download_dictionary.py"),
    log:
        f"{LOGS}/download/muse_{{src}}-{{tgt}}.log",
    script:
        "../scripts/download_dictionary.py"


# --- lm-eval datasets --------------------------------------------------------------------
# The datasets of the config's stock (and shipped) lm-eval tasks, saved as JSON lines under
# evaluation.datasets_dir (embtransfer.evaluation.datasets), where evaluation jobs read them.
from embtransfer.evaluation.catalog import SHIPPED_TASK_DIR, shipped_task_names, stock_task_names

LM_EVAL_STOCK = stock_task_names(config)
LM_EVAL_SHIPPED = shipped_task_names(config)


rule fetch_lm_eval_datasets:
    localrule: True
    output:
        f"{config['evaluation']['datasets_dir']}/tasks.json",
    params:
        stock=LM_EVAL_STOCK,
        shipped=LM_EVAL_SHIPPED,
        shipped_dir=str(SHIPPED_TASK_DIR),
        code=script_hash("download_lm_eval.py"),
    log:
        f"{LOGS}/download/lm_eval_datasets.log",
    script:
        "../scripts/download_lm_eval.py"


def lm_eval_downloads():
    return rules.fetch_lm_eval_datasets.output if LM_EVAL_STOCK or LM_EVAL_SHIPPED else []
# --- end lm-eval datasets ----------------------------------------------------------------


def needed_languages():
    """(corpus languages, word-vector languages) the config's DAG reads, for download_all."""
    targets = set(config["targets"])
    aligned = bool({"wechsel", "ofa"} & set(config["transfer"]["methods"]))
    vectors = set(targets) if ("word" in config["neighbors"]["vectors"] or aligned) else set()
    if aligned:
        vectors.add(config["source_language"])
    corpora = set(targets)
    replay = (config.get("lapt") or {}).get("replay")
    if replay and (config["lapt"].get("enabled", True)):
        corpora.add(replay.get("language") or config["source_language"])
    return corpora, vectors


def all_downloads():
    corpora, vectors = needed_languages()
    used_models = set(config["sources"]) | {t for plms in config["targets"].values() for t in plms}
    files = [model_dir(m) for m in HUB_MODELS if m in used_models]
    files += sorted(
        {fasttext_word_bin(l) for l in vectors if LANGS[l].get("fasttext", {}).get("type") == "crawl"}
    )
    files += [wikipedia_sentences_file(l) for l in WIKIPEDIA_LANGS if l in corpora]
    files += muse_dictionaries()
    files += lm_eval_downloads()
    return files


rule download_all:
    # Everything the config needs from the internet; run it on a login node.
    localrule: True
    input:
        all_downloads(),
