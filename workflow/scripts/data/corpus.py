"""Write train.txt and valid.txt of one language from its configured source."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json, write_text_lines
from embtransfer.core.logs import job_logger
from embtransfer.data.corpus import local_corpus, mini_corpus, wikipedia_corpus

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
spec = sm.params.spec
if spec["type"] == "mini":
    train, valid = mini_corpus(read_json(sm.input.world), sm.wildcards.lang, sm.params.seed)
elif spec["type"] == "local":
    train, valid = local_corpus(spec, sm.wildcards.lang)
else:
    train, valid = wikipedia_corpus(spec, sm.input.sentences)
write_text_lines(sm.output.train, train)
write_text_lines(sm.output.valid, valid)
log.info("%s: %d train and %d valid lines", sm.wildcards.lang, len(train), len(valid))
