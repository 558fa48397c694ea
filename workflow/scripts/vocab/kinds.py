"""The miniature world's pairs, or a real-text run's, measured as the real ones are: coverage
and the kinds of the shared tokens (embtransfer.vocab.kinds), a row per (language, source,
target), with the world's lexicon or the language's wordfreq one."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

import pandas as pd

from embtransfer.core.atomic import atomic_path, read_json
from embtransfer.core.logs import job_logger
from embtransfer.models.loading import load_tokenizer
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.kinds import COLUMNS, shared_token_figures
from embtransfer.vocab.overlap import count_tokens, read_overlap
from embtransfer.world.lexicon import pair_lexicon

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
world = read_json(sm.input.world) if "world" in sm.input.keys() else None


rows = []
inputs = zip(
    sm.params.pairs,
    sm.input.vocab,
    sm.input.overlap,
    sm.input.tokenizer,
    sm.input.valid,
    strict=True,
)
for pair, vocab_path, overlap_path, tokenizer_path, valid in inputs:
    vocab = read_vocab(vocab_path)
    tokenizer = load_tokenizer(tokenizer_path, trust_remote_code=sm.params.trust_remote_code)
    figures = shared_token_figures(
        vocab,
        read_overlap(overlap_path),
        count_tokens(tokenizer, valid),
        pair_lexicon(pair, pair["lang"], world),
    )
    rows.append(
        {
            "lang": pair["lang"],
            "source": pair["source"],
            "target": pair["target"],
            "scheme": vocab.attrs["scheme"],
            **figures,
        }
    )
    log.info("%s -> %s (%s): %s", pair["source"], pair["target"], pair["lang"], figures)
with atomic_path(sm.output[0]) as tmp:
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp, index=False)
