"""One transfer job: load what the method needs, run it, write the checkpoint.

Separate from the Snakemake script so it can be called (and tested) directly.
``paths`` holds the rule's named inputs: ``source``, ``target_tokenizer``,
``source_vocab``, ``target_vocab``, ``overlap`` and those the method needs, named as in
:data:`embtransfer.transfer.method_catalog.NEEDS`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from typing import Any

from embtransfer.core.logs import without_run_values
from embtransfer.models.loading import (
    check_id_count,
    load_embeddings,
    load_tokenizer,
)
from embtransfer.neighbors.search import Neighbors, read_neighbors
from embtransfer.transfer.aligned import read_aligned, read_search
from embtransfer.transfer.method_runner import run_method
from embtransfer.transfer.methods.base import TransferInputs
from embtransfer.transfer.regression import read_coefficients
from embtransfer.transfer.transferred_model import write_transferred_checkpoint
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.overlap import read_overlap
from embtransfer.world.truth import read_truth


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("embtransfer", "torch", "transformers", "tokenizers", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def config_hash(payload: dict[str, Any]) -> str:
    """A stable digest of the job's settings (method, options, mode, seed, keys)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_inputs(paths: dict[str, str], seed: int, trust_remote_code: bool = False,
                allow_pickle: bool = False) -> tuple[TransferInputs, dict[str, Any]]:
    """Build :class:`TransferInputs` from the rule's input paths; also neighbour statistics."""
    source_vocab = read_vocab(paths["source_vocab"])
    target_vocab = read_vocab(paths["target_vocab"])
    # Refuse a source whose tokenizer has ids beyond its embedding rows before any compute.
    _check_vocab_fits(source_vocab, paths["source_vocab"], paths["source"])
    source = load_embeddings(paths["source"], trust_remote_code=trust_remote_code,
                             allow_pickle=allow_pickle)
    inputs = TransferInputs(
        source_input=source.input,
        source_output=source.output,
        source_vocab=source_vocab,
        target_vocab=target_vocab,
        overlap=read_overlap(paths["overlap"]),
        seed=seed,
    )
    neighbor_stats: dict[str, Any] = {}
    for kind in ("word", "token"):
        if f"neighbors_{kind}" in paths:
            table, stats = read_neighbors(paths[f"neighbors_{kind}"])
            inputs.neighbors[kind] = Neighbors.from_table(table)
            neighbor_stats[kind] = {
                k: stats.get(k) for k in ("k", "support", "degenerate", "truncated", "missing")
            }
    if "plm" in paths:
        _check_vocab_fits(target_vocab, paths["target_vocab"], paths["plm"])
        plm = load_embeddings(paths["plm"], trust_remote_code=trust_remote_code,
                              allow_pickle=allow_pickle)
        inputs.plm_input, inputs.plm_output = plm.input, plm.output
    if "projected" in paths:
        # refuses coefficients whose source ids do not fit this source, naming the file
        inputs.projected = read_coefficients(paths["projected"], source.input.shape[0])
    if "aligned" in paths:
        inputs.aligned = read_aligned(paths["aligned"])[0]
        if "aligned_search" in paths:  # searched once for WECHSEL and OFA (share_search)
            read_search(paths["aligned_search"], inputs.aligned)
    if "source_tokenizer" in paths:
        inputs.source_tokenizer = load_tokenizer(
            paths["source_tokenizer"], trust_remote_code=trust_remote_code
        )
    if "truth" in paths:
        inputs.truth = read_truth(paths["truth"])
    return inputs, neighbor_stats


def _check_vocab_fits(vocab: Any, vocab_path: str, model_dir: str) -> None:
    """Refuse a model with fewer embedding rows than its vocabulary table has ids (the table
    has one row per id of its tokenizer: counting them builds no tokenizer, which took
    seconds a job for Gemma 3's 262,145 ids)."""
    check_id_count(len(vocab), f"{vocab_path} (its vocabulary table)", model_dir)


def run_transfer_job(
    method: str, paths: dict[str, str], out_dir: str, options: dict[str, Any], mode: str,
    seed: int, trust_remote_code: bool = False, context: dict[str, Any] | None = None,
    allow_pickle: bool = False,
) -> dict[str, Any]:
    start = time.perf_counter()
    inputs, neighbor_stats = load_inputs(paths, seed, trust_remote_code, allow_pickle)
    load_seconds = time.perf_counter() - start
    result = run_method(method, inputs, options, mode)
    report = dict(result.report)
    report.update(
        context or {},
        neighbors=neighbor_stats,
        source_tied=inputs.source_output is None,
        target_vocab_size=inputs.n_target,
        source_vocab_size=int(inputs.source_input.shape[0]),
        versions=versions(),
        config_hash=config_hash(
            {"method": method, "options": options, "mode": mode, "seed": seed, **(context or {})}
        ),
    )
    report["seconds"] = dict(report["seconds"], load=round(load_seconds, 4))
    write_start = time.perf_counter()
    # transfer.json holds no timings (they are returned for the job's log): reruns are
    # byte-identical.
    written = write_transferred_checkpoint(
        paths["source"], paths["target_tokenizer"], result.input_rows, result.output_rows,
        out_dir, mode=mode, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
        metadata=without_run_values(report), row_labels=result.labels,
        **({"new_target_ids": result.token_ids} if mode == "extend" else {}),
    )
    report["seconds"]["write"] = round(time.perf_counter() - write_start, 4)
    # the check of the new rows travels on to the checkpoint's zero-shot record (the report)
    report["row_check"] = written["row_check"]
    return report

