"""Held-out loss, perplexity and bits per byte of a checkpoint on the target valid text."""

from embtransfer.atomic import write_json
from embtransfer.intrinsic import evaluate_text, fertility
from embtransfer.logs import job_logger
from embtransfer.models import load_tokenizer

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
opts = sm.params.options
metrics = evaluate_text(
    sm.input.model, sm.input.text, max_length=opts["max_length"], batch_size=opts["batch_size"],
    device=sm.params.device, max_lines=opts["max_lines"],
)
metrics["fertility"] = fertility(load_tokenizer(sm.input.model), sm.input.text)
metrics.update({k: v for k, v in sm.wildcards.items()})
metrics.setdefault("method", "source_model")
write_json(sm.output[0], metrics)
log.info("%s", metrics)
