"""Bilingual lexicon induction in one language's aligned fastText spaces (WECHSEL's and
OFA's), on its dictionary's held-out half (embtransfer.transfer.fasttext_bli)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json, write_json
from embtransfer.core.logs import job_logger
from embtransfer.fasttext.vectors import load_fasttext
from embtransfer.transfer.fasttext_bli import bli_record

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
_, record = bli_record(
    load_fasttext(sm.input.source_fasttext),
    load_fasttext(sm.input.target_fasttext),
    list(sm.input.aligned),
    read_json(sm.input.world) if "world" in sm.input.keys() else None,
    sm.params.source_language,
    sm.wildcards.lang,
)
write_json(sm.output[0], record)
log.info("fastText BLI of %s: %s", sm.wildcards.lang, record)
