"""A source LLM's pretraining text: its language plus small target-language shares."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from pathlib import Path

from embtransfer.core.atomic import read_json, write_text_lines
from embtransfer.core.logs import job_logger
from embtransfer.data.corpus import mix_corpora, source_llm_share

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
shares = sm.params.shares
main = Path(sm.input.main).read_text(encoding="utf-8").splitlines()
# Miniature-world languages give the share from the world (facts restated); others from
# their corpus files, in the order the rule lists them.
world = read_json(sm.input.world[0]) if sm.params.mini else None
files = iter(sm.input.others)
others = {
    lang: source_llm_share(world, lang, sm.params.seed) if lang in sm.params.mini
    else Path(next(files)).read_text(encoding="utf-8").splitlines()
    for lang in sorted(shares)
}
mixed = mix_corpora(main, others, shares, sm.params.seed, sm.params.unit)
write_text_lines(sm.output[0], mixed)
log.info(
    "mixed %d lines (%d main, shares of %s %s)", len(mixed), len(main), sm.params.unit, shares
)
