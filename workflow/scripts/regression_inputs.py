"""Stack the shared tokens' paired embeddings (target PLM and source LLM rows)."""

from embtransfer.logs import job_logger
from embtransfer.models import check_tokenizer_model_agreement, load_embeddings
from embtransfer.overlap import read_overlap
from embtransfer.regression_inputs import (
    build_regression_inputs,
    describe,
    write_regression_inputs,
)

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
trust, allow_pickle = sm.params.trust_remote_code, sm.params.allow_pickle
# Refuse mismatched tokenizer/model pairs before reading any weights.
for name in ("source", "target"):
    check_tokenizer_model_agreement(sm.input[name], sm.input[name])
pairs = read_overlap(sm.input.overlap)
source = load_embeddings(sm.input.source, trust_remote_code=trust, allow_pickle=allow_pickle)
target = load_embeddings(sm.input.target, trust_remote_code=trust, allow_pickle=allow_pickle)
arrays = build_regression_inputs(pairs, target.input, source.input, source.output)
meta = describe(arrays, source.tied)
meta.update(
    source=sm.wildcards.source, target=sm.wildcards.target, lang=sm.wildcards.lang,
    source_model_type=source.model_type, target_model_type=target.model_type,
    source_vocab_rows=int(source.input.shape[0]), target_vocab_rows=int(target.input.shape[0]),
)
write_regression_inputs(arrays, meta, sm.output.tensors, sm.output.meta)
log.info("regression inputs: %s", meta)
