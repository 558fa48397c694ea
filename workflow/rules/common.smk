# Path helpers and wildcard constraints shared by every stage.
from embtransfer.config import models_of_type, target_pairs, wildcard_alternatives

RESULTS = "results"
# With `--sdm conda`, jobs run in this environment (envs/cuda.yaml on GPU nodes:
# point a profile's overrides or this variable at it).
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "cpu.yaml")
LOGS = "results/logs"
MODELS = config["models"]
PAIRS = target_pairs(config)


wildcard_constraints:
    lang=wildcard_alternatives(config["languages"]),
    model=wildcard_alternatives(MODELS),
    source=wildcard_alternatives(config["sources"]),
    target=wildcard_alternatives({t for plms in config["targets"].values() for t in plms}),
    vectors="word|token",
    split="train|valid",


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
    return spec["path"] if spec["type"] == "local" else f"resources/models/{model}"


def tokenizer_dir(model):
    # Miniature models get their tokenizer before pretraining, so the vocabulary
    # stages (and the neighbour tables) need not wait for the model.
    spec = MODELS[model]
    return f"resources/tokenizers/{model}" if spec["type"] == "mini" else model_dir(model)


def corpus_file(lang, split):
    return f"{RESULTS}/corpus/{lang}/{split}.txt"


def pretraining_text(model):
    spec = MODELS[model]
    if spec.get("mix"):
        return f"{RESULTS}/corpus/mix/{model}/train.txt"
    return corpus_file(spec["language"], "train")


def fasttext_word_bin(lang):
    spec = config["languages"][lang]["fasttext"]
    if spec["type"] == "file":
        return spec["path"]
    if spec["type"] == "crawl":
        return f"resources/fasttext/cc.{spec.get('code', lang)}.300.bin"
    return f"{RESULTS}/fasttext/{lang}/word.bin"


def all_coverage():
    return sorted(
        {f"{RESULTS}/overlap/{s}/{t}.coverage.json" for _, s, t in PAIRS}
    )


def all_neighbors():
    return [
        f"{RESULTS}/neighbors/{lang}/{s}/{t}/{v}.parquet"
        for lang, s, t in PAIRS
        for v in config["neighbors"]["vectors"]
    ]


def all_regression_inputs():
    return [f"{RESULTS}/regression/{lang}/{s}/{t}/inputs.json" for lang, s, t in PAIRS]
