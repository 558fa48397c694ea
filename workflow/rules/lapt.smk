# Language-adaptive continual pre-training of the transferred checkpoints (GPU-declared,
# resumable: a killed or preempted job restarts from the checkpoint in {method}.work/).
from embtransfer.grid import lapt_runs

LAPT = config["lapt"]
LAPT_RUNS = lapt_runs(config)
LAPT_TEXTS = "train|valid" + ("|replay" if LAPT.get("replay") else "")


def blocks_file(w, text):
    return f"{RESULTS}/lapt_blocks/{w.lang}/{w.source}/{w.target}/{text}.npy"


def blocks_tokenizer(w):
    # Every method of a (language, source, target) writes the same tokenizer; the first
    # selected one lends it (the trainer checks each run's tokenizer hash against it).
    method = next(r.method for r in LAPT_RUNS
                  if (r.lang, r.source, r.target) == (w.lang, w.source, w.target))
    return f"{RESULTS}/transfer/{w.lang}/{w.source}/{w.target}/{method}"


def blocks_text(w):
    if w.text == "replay":
        return corpus_file(LAPT["replay"]["language"], "train")
    return corpus_file(w.lang, w.text)


rule lapt_blocks:
    # Tokenise once: packed blocks (uint32 .npy + .json sidecar) shared by every LAPT job
    # of this tokenizer and every resume.
    input:
        model=blocks_tokenizer,
        text=blocks_text,
    output:
        blocks=f"{RESULTS}/lapt_blocks/{{lang}}/{{source}}/{{target}}/{{text}}.npy",
        meta=f"{RESULTS}/lapt_blocks/{{lang}}/{{source}}/{{target}}/{{text}}.json",
    wildcard_constraints:
        text=LAPT_TEXTS,
    params:
        max_length=LAPT["max_length"],
        code=script_hash("lapt_blocks.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/lapt_blocks/{{lang}}/{{source}}/{{target}}/{{text}}.log",
    script:
        "../scripts/lapt_blocks.py"


def lapt_inputs(w):
    inputs = {
        "model": f"{RESULTS}/transfer/{w.lang}/{w.source}/{w.target}/{w.method}",
        "train": blocks_file(w, "train"),
        "valid": blocks_file(w, "valid"),
    }
    if LAPT.get("replay"):
        inputs["replay"] = blocks_file(w, "replay")
    return inputs


rule lapt:
    input:
        unpack(lapt_inputs),
    output:
        model=directory(f"{RESULTS}/lapt/{{lang}}/{{source}}/{{target}}/{{method}}"),
        metrics=f"{RESULTS}/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.metrics.jsonl",
    params:
        lapt={k: v for k, v in LAPT.items() if k not in ("enabled", "select")},
        seed=config["seed"],
        work=lambda w: f"{RESULTS}/lapt/{w.lang}/{w.source}/{w.target}/{w.method}.work",
        code=script_hash("lapt.py"),
    threads: config["threads"]
    resources:
        gpu=LAPT["gpus"],
        mem_mb=LAPT["mem_mb"],
        runtime=LAPT["runtime"],
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/lapt/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    script:
        "../scripts/lapt.py"


def all_lapt():
    return [
        f"{RESULTS}/lapt/{r.lang}/{r.source}/{r.target}/{r.method}" for r in LAPT_RUNS
    ] + all_lapt_metrics()


def all_lapt_metrics():
    return [
        f"{RESULTS}/lapt/{r.lang}/{r.source}/{r.target}/{r.method}.metrics.jsonl"
        for r in LAPT_RUNS
    ]
