"""Tokenise a LAPT text once into packed uint32 blocks (.npy) with a JSON sidecar."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from transformers import AutoConfig, AutoTokenizer

from embtransfer.core.logs import job_logger
from embtransfer.lapt.blocks import build_blocks

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
tokenizer = AutoTokenizer.from_pretrained(sm.input.model)
eos = getattr(AutoConfig.from_pretrained(sm.input.model), "eos_token_id", None)
meta = build_blocks(tokenizer, eos, sm.input.text, int(sm.params.max_length), sm.output.blocks,
                    tokenizer_where=sm.input.model)
log.info("%s: %d documents, %d tokens -> %d blocks of %d (separator %d, the tokenizer's %s)",
         sm.input.text, meta["documents"], meta["tokens"], meta["blocks"], meta["max_length"],
         meta["separator_id"], meta["separator"])
