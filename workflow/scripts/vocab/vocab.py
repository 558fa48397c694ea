"""Canonical forms of every token of one model's vocabulary."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from pathlib import Path

from embtransfer.core.logs import job_logger
from embtransfer.models.loading import check_tokenizer_model_agreement, load_tokenizer
from embtransfer.vocab.canonical import vocab_table, write_vocab

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
tokenizer = load_tokenizer(sm.input.tokenizer, trust_remote_code=sm.params.trust_remote_code)
if (Path(sm.input.tokenizer) / "config.json").exists():
    # A full checkpoint: refuse a tokenizer with ids beyond the embedding rows now,
    # before any later stage spends compute on it.
    check_tokenizer_model_agreement(tokenizer, sm.input.tokenizer)
table = vocab_table(tokenizer)
write_vocab(table, sm.output[0], tokenizer_name=sm.wildcards.model)
log.info(
    "%s: %d tokens, scheme %s, kinds %s",
    sm.wildcards.model, len(table), table.attrs.get("scheme"),
    table["kind"].value_counts().to_dict(),
)
