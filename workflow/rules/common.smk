# The imports, constants, wildcard constraints, input functions and path helpers of every
# stage, in pipeline order; this file is included first, so the other rule files hold rules
# only (tests/test_rule_files.py), and the run's hooks are the Snakefile's.
# A function here runs when the rules call it, so it may name constants of any section.
from embtransfer.core import paths
from embtransfer.core.grid import (
    alignment_groups,
    evaluated_runs,
    evaluated_sources,
    lapt_runs,
    source_first,
    target_pairs,
    transfer_runs,
    world_pairs,
)
from embtransfer.core.pinning import fetch_params
from embtransfer.config.validation import models_of_type, wildcard_alternatives
from embtransfer.data.dictionaries import freedict_data
from embtransfer.data.download import needed_languages
from embtransfer.data.real_text import (
    DICTIONARIES as FREEDICT_PAIRS,
    MAX_CHARS as REAL_TEXT_MAX_CHARS,
    SOURCES as REAL_TEXT_SOURCES,
)
from embtransfer.evaluation.catalog import (
    CATALOG as EVAL_CATALOG,
    SHIPPED_TASK_DIR,
    shipped_task_names,
    shipped_tasks_hash,
    spec_dicts,
    stock_task_names,
    world_task_keys,
)
from embtransfer.report.build import config_subset, output_names, zeroshot_paths
from embtransfer.transfer.catalog import METHODS as METHOD_CATALOG, method_needs, resolve_options
from embtransfer.transfer.shared_search import search_inputs, search_options

# With `--sdm conda`, jobs run in this environment (envs/cuda.yaml on GPU nodes:
# point a profile's overrides or this variable at it).
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "cpu.yaml")
MODELS = config["models"]
PAIRS = target_pairs(config)


wildcard_constraints:
    lang=wildcard_alternatives(config["languages"]),
    model=wildcard_alternatives(MODELS),
    source=wildcard_alternatives(config["sources"]),
    target=wildcard_alternatives({t for plms in config["targets"].values() for t in plms}),
    vectors="word|token",
    split="train|valid",
    method=wildcard_alternatives(METHOD_CATALOG),
    task=wildcard_alternatives(EVAL_CATALOG),
    stage="transfer|lapt",


def script_hash(name):
    """Params entry that reruns a rule when its script or any package module it uses changes."""
    return codehash.script_hash(Path(workflow.basedir) / "workflow" / "scripts" / name)


def model_language(model):
    """The language a model was trained on: its `language` key, else its targets entry."""
    if MODELS[model].get("language"):
        return MODELS[model]["language"]
    for lang, plms in config["targets"].items():
        if model in plms:
            return lang
    raise WorkflowError(f"model {model!r} has no language (set models.{model}.language)")


def model_dir(model):
    spec = MODELS[model]
    return spec["path"] if spec["type"] == "local" else paths.MODEL.fill(model=model)


def tokenizer_dir(model):
    # Miniature models get their tokenizer before pretraining, so the vocabulary
    # stages (and the neighbour tables) need not wait for the model.
    spec = MODELS[model]
    return paths.TOKENIZER.fill(model=model) if spec["type"] == "mini" else model_dir(model)


def corpus_file(lang, split):
    return paths.CORPUS.fill(lang=lang, split=split)


def pretraining_text(model):
    spec = MODELS[model]
    if spec.get("mix"):
        return paths.MIX_CORPUS.fill(model=model)
    return corpus_file(spec["language"], "train")


def tokenizer_text(model):
    spec = MODELS[model]
    if spec["tokenizer"].get("text") == "language":
        return corpus_file(spec["language"], "train")
    return pretraining_text(model)


def fasttext_word_bin(lang):
    spec = config["languages"][lang]["fasttext"]
    if spec["type"] == "file":
        return spec["path"]
    if spec["type"] == "crawl":
        return paths.FASTTEXT_CRAWL.fill(code=spec.get("code", lang))
    return paths.FASTTEXT_WORD.fill(lang=lang)


def all_coverage():
    return sorted({paths.COVERAGE.fill(source=s, target=t) for _, s, t in PAIRS})


def all_neighbors():
    return [
        paths.NEIGHBORS.fill(lang=lang, source=s, target=t, vectors=v)
        for lang, s, t in PAIRS
        for v in config["neighbors"]["vectors"]
    ]


# --- corpora (data.smk) --------------------------------------------------------------------


def corpus_inputs(wildcards):
    spec = config["languages"][wildcards.lang]["corpus"]
    if spec["type"] == "mini":
        return {"world": rules.world.output[0]}
    if spec["type"] == "local":
        return {k: spec[k] for k in ("train", "valid") if spec.get(k)}
    # wikipedia: the sentences the local rule fetch_wikipedia (data.smk) wrote.
    return {"sentences": wikipedia_sentences_file(wildcards.lang)}


def source_chain_first(wildcards):
    """Priority 1 for the source LLMs' pretraining and the jobs it waits on (core/grid.py)."""
    return source_first(config, wildcards.get("model"), wildcards.get("lang"))


def mixed_languages(wildcards, mini):
    """The languages of a source LLM's mix whose corpus is (``mini``) or is not the world's."""
    return [
        lang
        for lang in sorted(MODELS[wildcards.model]["mix"])
        if (config["languages"][lang]["corpus"]["type"] == "mini") == mini
    ]


# --- models (models.smk) -------------------------------------------------------------------

MINI_MODELS = models_of_type(config, "mini")
HUB_MODELS = models_of_type(config, "hub")


def tokenizer_spec(model):
    # Only what shapes the tokenizer: a change of architecture or training
    # budget must not retrain it (and rerun every vocabulary stage after it).
    return {k: MODELS[model][k] for k in ("family", "tokenizer", "language", "mix")}


# --- fastText (fasttext.smk) ---------------------------------------------------------------


def fasttext_bin(wildcards):
    if wildcards.vectors == "word":
        return fasttext_word_bin(wildcards.lang)
    return paths.FASTTEXT_TOKEN.fill(**wildcards)


# --- regression, transfer and zero-shot (transfer.smk) -------------------------------------

TRANSFER = config["transfer"]
TRANSFER_RUNS = transfer_runs(config)


def method_options(method):
    return TRANSFER["options"].get(method, {})


def salt_vectors():
    return resolve_options("salt", method_options("salt"))["vectors"]


def transfer_code(wildcards):
    # The script, and only the module of this method: editing SALT reruns SALT's jobs.
    method_module = f"embtransfer.transfer.methods.{METHOD_CATALOG[wildcards.method]['module']}"
    return script_hash("transfer/transfer.py") + codehash.code_hash(method_module)


def dictionary_input(lang):
    spec = config["languages"][lang].get("dictionary", {"type": "world"})
    if spec["type"] == "world":
        return rules.world.output[0]
    if spec["type"] == "freedict":  # the index and the entries it points into
        return [spec["path"], str(freedict_data(spec["path"]))]
    return spec["path"]


def transfer_inputs(w):
    # Every method reads these; method_needs (the catalog) picks the rest by input name.
    inputs = {
        "source": model_dir(w.source),
        "target_tokenizer": tokenizer_dir(w.target),
        "source_vocab": paths.VOCAB.fill(model=w.source),
        "target_vocab": paths.VOCAB.fill(model=w.target),
        "overlap": paths.OVERLAP.fill(**w),
    }
    by_need = {
        "neighbors_word": paths.NEIGHBORS.fill(**w, vectors="word"),
        "neighbors_token": paths.NEIGHBORS.fill(**w, vectors="token"),
        "plm": model_dir(w.target),
        "projected": paths.REGRESSION.fill(**w),
        "aligned": paths.ALIGNED.fill(**w),
        "source_tokenizer": tokenizer_dir(w.source),
        "truth": paths.WORLD_TRUTH.fill(**w),
    }
    for need in sorted(method_needs(w.method, method_options(w.method))):
        inputs[need] = by_need[need]
    return inputs


def all_zeroshot():
    files = [paths.ZEROSHOT.fill(**r._asdict()) for r in TRANSFER_RUNS]
    files += sorted({paths.ZEROSHOT_SOURCE.fill(lang=lang, source=s) for lang, s, _ in PAIRS})
    return files


# --- LAPT (lapt.smk) -----------------------------------------------------------------------

LAPT = config["lapt"]
LAPT_RUNS = lapt_runs(config)
LAPT_TEXTS = "train|valid" + ("|replay" if LAPT.get("replay") else "")


def blocks_file(w, text):
    return paths.LAPT_BLOCKS.fill(**w, text=text)


def blocks_tokenizer(w):
    # Every method of a (language, source, target) writes the same tokenizer; the first
    # selected one lends it (the trainer checks each run's tokenizer hash against it).
    method = next(
        r.method for r in LAPT_RUNS if (r.lang, r.source, r.target) == (w.lang, w.source, w.target)
    )
    return paths.TRANSFER_MODEL.fill(**w, method=method)


def blocks_text(w):
    if w.text == "replay":
        return corpus_file(LAPT["replay"]["language"], "train")
    return corpus_file(w.lang, w.text)


def lapt_inputs(w):
    inputs = {
        "model": paths.TRANSFER_MODEL.fill(**w),
        "train": blocks_file(w, "train"),
        "valid": blocks_file(w, "valid"),
    }
    if LAPT.get("replay"):
        inputs["replay"] = blocks_file(w, "replay")
    return inputs


def all_lapt():
    return [paths.LAPT_MODEL.fill(**r._asdict()) for r in LAPT_RUNS] + all_lapt_metrics()


def all_lapt_metrics():
    return [paths.LAPT_METRICS.fill(**r._asdict()) for r in LAPT_RUNS]


# --- evaluation (evaluation.smk) -----------------------------------------------------------

EVAL = config["evaluation"]
EVAL_TASKS = EVAL["tasks"]
EVAL_WORLD = bool(world_task_keys(config))
EVAL_RUNS = {stage: evaluated_runs(config, stage) for stage in ("transfer", "lapt")}
EVAL_OPTIONS = {k: EVAL[k] for k in ("device", "batch_size", "limit", "max_length")}
EVAL_OPTIONS["nfc"] = EVAL["scoring"]["nfc"]
EVAL_RESOURCES = {"mem_mb": 8000, "runtime": 120}
if EVAL["device"] != "cpu":
    EVAL_RESOURCES["gpu"] = 1
# The log and benchmark paths of one evaluated checkpoint, and of one source model.
CKPT = "{stage}/{lang}/{source}/{target}/{method}"
SRC = "source/{lang}/{source}"


def eval_code():
    code = script_hash("evaluation/evaluate.py")
    if any(EVAL_CATALOG[k].source == "shipped" for k in EVAL_TASKS):
        # The shipped task configs are code too (their scoring is the runner's).
        code += shipped_tasks_hash()
    return code


EVAL_CODE = eval_code()


def eval_checkpoint(w):
    stage = w.get("stage", "source")
    if stage == "source":
        return model_dir(w.source)
    if stage == "lapt":
        return paths.LAPT_MODEL.fill(**w)
    return paths.TRANSFER_MODEL.fill(**w)


def hub_datasets(keys):
    # Stock and shipped tasks read their datasets from evaluation.datasets_dir, which the
    # local download rule fills (data.smk), so compute jobs run offline.
    if any(EVAL_CATALOG[k].source != "world" for k in keys):
        return {"datasets": rules.fetch_lm_eval_datasets.output[0]}
    return {}


def world_benchmark_inputs(w):
    # world_words keeps the choices that no (source, target) pair of the language shares a
    # token of: the world, and each pair's target tokenizer and overlap, in the same order.
    pairs = [(s, t) for lang, s, t in world_pairs(config) if lang == w.lang]
    return {
        "world": rules.world.output[0],
        "tokenizers": [tokenizer_dir(t) for _, t in pairs],
        "overlaps": [paths.OVERLAP.fill(source=s, target=t) for s, t in pairs],
    }


def eval_inputs(w):
    inputs = {"model": eval_checkpoint(w)}
    keys = [w.task] if "task" in w.keys() else EVAL_TASKS
    if any(EVAL_CATALOG[k].source == "world" for k in keys):
        inputs["benchmarks"] = paths.WORLD_BENCHMARKS.fill(lang=w.lang)
    return inputs | hub_datasets(keys)


def eval_meta(w):
    stage = w.get("stage", "source")
    return {
        "stage": stage,
        "lang": w.lang,
        "source": w.source,
        "target": w.target if stage != "source" else None,
        "method": w.method if stage != "source" else None,
    }


def eval_specs(w):
    return spec_dicts(config, w.lang, [w.task] if "task" in w.keys() else None)


def tokenizer_stats_models(lang):
    """model -> role (source/target) of the tokenizers compared on ``lang``'s eval sets."""
    models = {s: "source" for s in config["sources"]}
    models.update({t: "target" for t in config["targets"][lang]})
    return models


def tokenizer_stats_inputs(w):
    inputs = {
        "tokenizers": [tokenizer_dir(m) for m in tokenizer_stats_models(w.lang)],
        "valid": corpus_file(w.lang, "valid"),
    }
    if EVAL_WORLD:
        inputs["benchmarks"] = paths.WORLD_BENCHMARKS.fill(lang=w.lang)
    return inputs | hub_datasets(EVAL_TASKS)


def all_evaluation():
    """The lm-eval result JSONs (the report's inputs): every evaluated checkpoint x task."""
    files = [
        paths.EVAL.fill(stage=stage, **r._asdict(), task=task)
        for stage, runs in EVAL_RUNS.items()
        for r in runs
        for task in EVAL_TASKS
    ]
    files += [
        paths.EVAL_SOURCE.fill(lang=lang, source=source, task=task)
        for lang, source in evaluated_sources(config)
        for task in EVAL_TASKS
    ]
    return files


ALIGNMENT_GROUPS = alignment_groups(config)


def alignment_methods(w):
    runs = TRANSFER_RUNS if w.stage == "transfer" else LAPT_RUNS
    return [r.method for r in runs if (r.lang, r.source, r.target) == (w.lang, w.source, w.target)]


def alignment_inputs(w):
    model = paths.TRANSFER_MODEL if w.stage == "transfer" else paths.LAPT_MODEL
    return {
        "source": model_dir(w.source),
        "source_vocab": paths.VOCAB.fill(model=w.source),
        "truth": paths.WORLD_TRUTH.fill(**w),
        "checkpoints": [model.fill(**w, method=m) for m in alignment_methods(w)],
    }


def all_alignment():
    return [paths.ALIGNMENT.fill(stage=stage, **r._asdict()) for stage, r in ALIGNMENT_GROUPS]


def all_intrinsic():
    """Held-out loss of the LAPT checkpoints and the tokenizer statistics."""
    files = []
    if EVAL["intrinsic"]:
        files += [paths.INTRINSIC_LAPT.fill(**r._asdict()) for r in EVAL_RUNS["lapt"]]
    if EVAL["tokenizer_stats"]:
        files += [paths.TOKENIZER_STATS.fill(lang=lang) for lang in config["targets"]]
    return files


# --- report (report.smk) -------------------------------------------------------------------

REPORT_OUTPUTS = output_names(paths.REPORT_DIR)
REPORT_SUBCATEGORIES = {
    1: "Table 1: knowledge",
    2: "Table 2: reading comprehension",
    3: "Table 3: cross-lingual",
    4: "Table 4: target-PLM architectures",
    5: "Table 5: eval loss during LAPT",
    6: "Table 6: vocabulary overlap",
    8: "Table 8: final training loss",
}


def report_output(name):
    """An output of the report rule, registered for snakemake --report with its caption."""
    path = REPORT_OUTPUTS[name]
    if name.startswith("table"):
        number = int(name[len("table") : name.index("_")])
        kind = "Markdown" if name.endswith("_md") else "CSV"
        return report(
            path,
            caption=f"../report/table{number}.rst",
            category="Paper tables",
            subcategory=REPORT_SUBCATEGORIES[number],
            labels={"table": str(number), "format": kind},
        )
    if name.startswith("alignment"):
        kind = "Markdown" if name.endswith("_md") else "CSV"
        return report(
            path,
            caption="../report/alignment.rst",
            category="Alignment with the world's truth",
            labels={"table": "alignment", "format": kind},
        )
    if name == "figure2":
        return report(
            path, caption="../report/figure2.rst", category="Paper figures", labels={"figure": "2"}
        )
    return report(
        path,
        caption="../report/report_md.rst",
        category="Paper tables",
        subcategory="All tables (report.md)",
        labels={"table": "all", "format": "Markdown"},
    )


def all_report():
    return list(REPORT_OUTPUTS.values())


# --- downloads (data.smk) ------------------------------------------------------------------

LANGS = config["languages"]
WIKIPEDIA_LANGS = sorted(l for l, s in LANGS.items() if s["corpus"]["type"] == "wikipedia")
CRAWL_CODES = sorted(
    {
        s["fasttext"].get("code", l)
        for l, s in LANGS.items()
        if s.get("fasttext", {}).get("type") == "crawl"
    }
)
LM_EVAL_STOCK = stock_task_names(config)
LM_EVAL_SHIPPED = shipped_task_names(config)


def wikipedia_sentences_file(lang):
    return paths.WIKIPEDIA_SENTENCES.fill(lang=lang)


def muse_dictionaries():
    """Dictionary files of the config that live under resources/dictionaries/muse/."""
    files = []
    for spec in LANGS.values():
        dictionary = spec.get("dictionary", {})
        path = dictionary.get("path", "")
        if dictionary.get("type") == "file" and path.startswith(f"{paths.MUSE_DIR}/"):
            files.append(path)
    return sorted(set(files))


def lm_eval_downloads():
    return rules.fetch_lm_eval_datasets.output if LM_EVAL_STOCK or LM_EVAL_SHIPPED else []


def all_downloads():
    corpora, vectors = needed_languages(config)
    used_models = set(config["sources"]) | {t for plms in config["targets"].values() for t in plms}
    files = [model_dir(m) for m in HUB_MODELS if m in used_models]
    files += sorted(
        {
            fasttext_word_bin(l)
            for l in vectors
            if LANGS[l].get("fasttext", {}).get("type") == "crawl"
        }
    )
    files += [wikipedia_sentences_file(l) for l in WIKIPEDIA_LANGS if l in corpora]
    files += muse_dictionaries()
    files += lm_eval_downloads()
    return files
