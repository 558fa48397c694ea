# Language-adaptive continual pre-training of the transferred checkpoints (GPU-declared,
# resumable: a killed or preempted job restarts from the checkpoint in {method}.work/).
from embtransfer.grid import lapt_runs

LAPT = config["lapt"]
LAPT_RUNS = lapt_runs(config)


def lapt_inputs(w):
    inputs = {
        "model": f"{RESULTS}/transfer/{w.lang}/{w.source}/{w.target}/{w.method}",
        "train": corpus_file(w.lang, "train"),
        "valid": corpus_file(w.lang, "valid"),
    }
    if LAPT.get("replay"):
        inputs["replay"] = corpus_file(LAPT["replay"]["language"], "train")
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
