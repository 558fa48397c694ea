"""Fertility and prompt-token ratios of the source and target tokenizers of one language."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import os

# Data come from the datasets directory; set before lm-eval imports `datasets`, which reads
# it at import.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import tempfile
from pathlib import Path

from embtransfer.core.atomic import write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.runner import task_manager, task_spec
from embtransfer.evaluation.task_catalog import TaskSpec
from embtransfer.evaluation.tokenizer_stats import load_task_texts, tokenizer_stats
from embtransfer.evaluation.zeroshot import read_documents

sm = snakemake  # noqa: F821
datasets_dir = Path(sm.input.datasets).parent if sm.input.get("datasets") else None
log = job_logger(sm.log[0])
specs = [TaskSpec(**{**s, "metrics": {k: tuple(v) for k, v in s["metrics"].items()}})
         for s in sm.params.specs]
sets = {"valid": read_documents(sm.input.valid, sm.params.max_lines)}
info = {"valid": {"file": sm.input.valid}}
if specs:
    with tempfile.TemporaryDirectory(prefix="embt-tok-") as tmp:
        manager = task_manager(specs, sm.input.get("benchmarks"), tmp)
        tspecs = [task_spec(s, manager, datasets_dir, Path(tmp) / "datasets") for s in specs]
        texts = load_task_texts(tspecs, manager, sm.params.limit)
    for spec in specs:
        sets[spec.key] = texts[spec.lm_eval_task]
        info[spec.key] = {"lm_eval_task": spec.lm_eval_task}
models = list(sm.params.models)
stats = tokenizer_stats(dict(zip(models, sm.input.tokenizers, strict=True)),
                        dict(sm.params.models), sets, info)
write_json(sm.output[0], {"lang": sm.wildcards.lang, **stats})
log.info("%s", {m: {s: v["fertility"] for s, v in t["sets"].items()}
                for m, t in stats["tokenizers"].items()})
