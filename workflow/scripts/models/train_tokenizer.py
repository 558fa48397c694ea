"""Train a miniature model's tokenizer on its pretraining text."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import atomic_path
from embtransfer.core.logs import job_logger
from embtransfer.models.tokenizer_training import (
    DEFAULT_ALGORITHM,
    DEFAULT_SPLIT_DIGITS,
    train_tokenizer,
)

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
spec = sm.params.spec
algorithm = spec["tokenizer"].get("algorithm") or DEFAULT_ALGORITHM[spec["family"]]
split_digits = spec["tokenizer"].get("split_digits")
tokenizer = train_tokenizer(
    algorithm,
    [sm.input.text],
    spec["tokenizer"]["vocab_size"],
    spec["family"],
    split_digits=DEFAULT_SPLIT_DIGITS[spec["family"]] if split_digits is None else split_digits,
)
with atomic_path(sm.output[0], directory=True) as tmp:
    tokenizer.save_pretrained(str(tmp))
log.info("%s: %s tokenizer with %d tokens", sm.wildcards.model, algorithm, len(tokenizer))
