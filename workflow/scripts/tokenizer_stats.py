"""Fertility and prompt-token ratios of the source and target tokenizers of one language."""

import os
from pathlib import Path

from embtransfer.download import lm_eval_cache_env

sm = snakemake  # noqa: F821
if sm.input.get("datasets"):
    # Before anything imports huggingface_hub/datasets: they read these at import time.
    os.environ.update(lm_eval_cache_env(Path(sm.input.datasets).parent))

import tempfile  # noqa: E402

from embtransfer.atomic import write_json  # noqa: E402
from embtransfer.evaluation.catalog import TaskSpec  # noqa: E402
from embtransfer.evaluation.runner import task_manager  # noqa: E402
from embtransfer.evaluation.tokenizer_stats import load_task_texts, tokenizer_stats  # noqa: E402
from embtransfer.intrinsic import read_documents  # noqa: E402
from embtransfer.logs import job_logger  # noqa: E402

log = job_logger(sm.log[0])
specs = [TaskSpec(**{**s, "metrics": {k: tuple(v) for k, v in s["metrics"].items()}})
         for s in sm.params.specs]
sets = {"valid": read_documents(sm.input.valid, sm.params.max_lines)}
info = {"valid": {"file": sm.input.valid}}
if specs:
    with tempfile.TemporaryDirectory(prefix="embt-tok-") as tmp:
        manager = task_manager(specs, sm.input.get("benchmarks"), tmp)
        texts = load_task_texts([s.lm_eval_task for s in specs], manager, sm.params.limit)
    for spec in specs:
        sets[spec.key] = texts[spec.lm_eval_task]
        info[spec.key] = {"lm_eval_task": spec.lm_eval_task}
models = list(sm.params.models)
stats = tokenizer_stats(dict(zip(models, sm.input.tokenizers, strict=True)),
                        dict(sm.params.models), sets, info)
write_json(sm.output[0], {"lang": sm.wildcards.lang, **stats})
log.info("%s", {m: {s: v["fertility"] for s, v in t["sets"].items()}
                for m, t in stats["tokenizers"].items()})
