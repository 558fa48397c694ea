"""Pretrain a miniature model (source LLM or target PLM) on CPU or GPU."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.logs import job_logger
from embtransfer.models.loading import load_tokenizer
from embtransfer.models.pretrain import build_model, pretrain, save_checkpoint
from embtransfer.models.tokenizer_training import special_token_ids

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
spec = sm.params.spec
tokenizer = load_tokenizer(sm.input.tokenizer)
model = build_model(
    spec["family"], len(tokenizer), spec["architecture"], spec["tie_word_embeddings"],
    special_token_ids(tokenizer), sm.params.seed,
)
metrics = pretrain(
    model, tokenizer, sm.input.train, sm.input.valid, spec["train"], sm.params.seed,
    log=log.info, threads=sm.threads,
)
save_checkpoint(model, tokenizer, sm.output[0], metrics)
log.info("%s pretrained: %s", sm.wildcards.model, metrics)
