"""The miniature world's benchmarks of one language as local lm-eval tasks."""

from embtransfer.core.jobserver import delegate

delegate()  # in a local run, the job server runs this script in a fork (core/jobserver.py)

from embtransfer.core.atomic import atomic_path, read_json, write_json
from embtransfer.core.logs import job_logger
from embtransfer.evaluation.task_catalog import CATALOG
from embtransfer.evaluation.world_tasks import build_world_tasks
from embtransfer.models.hf import encode_texts
from embtransfer.models.loading import load_tokenizer
from embtransfer.vocab.overlap import read_overlap

sm = snakemake  # noqa: F821
log = job_logger(sm.log[0])
world = read_json(sm.input.world)
shots = {key: bench.num_fewshot for key, bench in CATALOG.items()}
# Each (source, target tokenizer) pair of the language: how the target spells a choice and
# which of its tokens the source shares (world_words keeps the choices no shared token spells).
spellers = []
for tokenizer_dir, overlap in zip(sm.input.tokenizers, sm.input.overlaps, strict=True):
    tokenizer = load_tokenizer(tokenizer_dir, trust_remote_code=sm.params.trust_remote_code)
    shared = set(read_overlap(overlap)["target_id"].tolist())
    spellers.append((lambda texts, t=tokenizer: encode_texts(t, texts), shared))
with atomic_path(sm.output[0], directory=True) as tmp:
    manifest = build_world_tasks(
        world, sm.wildcards.lang, tmp, sm.params.seed, sm.params.sizes, shots, spellers
    )
    write_json(tmp / "manifest.json", manifest)
log.info("%s", manifest)
