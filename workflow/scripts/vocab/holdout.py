"""The shared tokens one (language, source, target) pair holds out from every method, drawn
per kind with the replicate seed (embtransfer.vocab.holdout), and their counts per kind."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json, write_json, write_parquet
from embtransfer.core.logs import job_logger
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.holdout import counts_by_kind, held_out_overlap, holdout_split
from embtransfer.vocab.kinds import shared_kinds
from embtransfer.vocab.overlap import read_overlap, write_overlap
from embtransfer.world.lexicon import pair_lexicon

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
world = read_json(sm.input.world) if "world" in sm.input.keys() else None
overlap = read_overlap(sm.input.overlap)
kinds = shared_kinds(read_vocab(sm.input.target_vocab), overlap,
                     pair_lexicon(sm.params.lexicon, sm.wildcards.lang, world))
split = holdout_split(overlap, kinds, sm.params.share, int(sm.wildcards.seed))
counts = counts_by_kind(split)
write_parquet(sm.output.table, split, metadata={**dict(sm.wildcards), "share": sm.params.share})
write_overlap(held_out_overlap(split), sm.output.overlap,
              metadata={**dict(sm.wildcards), "share": sm.params.share})
write_json(sm.output.counts, {**dict(sm.wildcards), "share": sm.params.share,
                              "held_out": int(split["held_out"].sum()),
                              "shared": int((split["kind"] != "").sum()),
                              "by_kind": counts.to_dict(orient="records")})
log.info("held out %d of %d shared tokens: %s", int(split["held_out"].sum()),
         int((split["kind"] != "").sum()), counts.to_dict(orient="records"))
