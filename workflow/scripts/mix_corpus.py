"""A source LLM's pretraining text: its language plus small target-language shares."""

from pathlib import Path

from embtransfer.atomic import write_text_lines
from embtransfer.corpus import mix_corpora
from embtransfer.logs import job_logger

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
shares = sm.params.shares
main = Path(sm.input.main).read_text(encoding="utf-8").splitlines()
others = {
    lang: Path(path).read_text(encoding="utf-8").splitlines()
    for lang, path in zip(sorted(shares), sm.input.others, strict=True)
}
mixed = mix_corpora(main, others, shares, sm.params.seed)
write_text_lines(sm.output[0], mixed)
log.info("mixed %d lines (%d main, shares %s)", len(mixed), len(main), shares)
