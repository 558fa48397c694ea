"""Source and target token vectors in one aligned fastText space (WECHSEL, OFA)."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import read_json
from embtransfer.core.logs import job_logger
from embtransfer.data.dictionaries import read_dictionary
from embtransfer.fasttext.vectors import load_fasttext
from embtransfer.models.loading import load_tokenizer
from embtransfer.transfer.aligned import align_from_dictionary, token_vectors_aligned, write_aligned
from embtransfer.vocab.canonical import read_vocab

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
if sm.params.dictionary["type"] == "world":  # its dictionary concepts only, recorded
    from embtransfer.world.split import dictionary_part

    pairs, fitted = dictionary_part(
        read_json(sm.input.dictionary),
        sm.params.source_language,
        sm.wildcards.lang,
        sm.params.seed,
        sm.params.held_out,
    )
elif sm.params.dictionary.get("held_out"):  # a real dictionary's headword half, recorded
    from embtransfer.data.dictionary_split import split_dictionary

    split = split_dictionary(
        read_dictionary(sm.params.dictionary), sm.params.seed, sm.params.held_out
    )
    pairs, fitted = split.dictionary, {"dictionary_split": split.record}
else:
    pairs, fitted = read_dictionary(sm.params.dictionary), {}
options = sm.params.aligned
source_ft = load_fasttext(sm.input.source_fasttext)
target_ft = load_fasttext(sm.input.target_fasttext)
W, stats = align_from_dictionary(
    source_ft, target_ft, pairs, duplicate_variants=options["duplicate_variants"]
)
tokenizers = None
if options["token_strings"] == "decode":
    tokenizers = tuple(
        load_tokenizer(path, trust_remote_code=sm.params.trust_remote_code)
        for path in sm.input.tokenizers
    )
aligned = token_vectors_aligned(
    source_ft,
    target_ft,
    W,
    read_vocab(sm.input.source_vocab),
    read_vocab(sm.input.target_vocab),
    token_strings=options["token_strings"],
    tokenizers=tokenizers,
)
stats["token_strings"] = options["token_strings"]
log.info(
    "aligned %s -> %s with %d dictionary pairs: %s",
    sm.params.source_language,
    sm.wildcards.lang,
    len(pairs),
    stats,
)
stats |= fitted
write_aligned(sm.output[0], aligned, W, stats)
