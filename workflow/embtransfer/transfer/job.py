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
from collections import Counter
from dataclasses import replace
from importlib import metadata
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.core.atomic import write_parquet
from embtransfer.core.logs import without_run_values
from embtransfer.core.vocab_modes import method_modes
from embtransfer.evaluation.heldout_rows import contrast_scores, retrieval_scores
from embtransfer.models.loading import (
    check_id_count,
    load_embeddings,
    load_tokenizer,
)
from embtransfer.neighbors.search import Neighbors, read_neighbors
from embtransfer.transfer.aligned import read_aligned, read_search
from embtransfer.transfer.glove import read_glove
from embtransfer.transfer.method_runner import run_method
from embtransfer.transfer.methods.base import TransferInputs
from embtransfer.transfer.methods.common import column_sum
from embtransfer.transfer.methods.omp import read_fits
from embtransfer.transfer.regression import read_coefficients
from embtransfer.transfer.transferred_model import write_transferred_checkpoint
from embtransfer.vocab.canonical import read_vocab
from embtransfer.vocab.holdout import held_out_targets, hidden_source_ids, read_holdout
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
        source_dir=paths["source"],
        corpus=paths.get("corpus"),
        source_loading={"trust_remote_code": trust_remote_code, "allow_pickle": allow_pickle},
    )
    if "holdout" in paths:  # a held-out transfer: hide the held-out source ids
        inputs.hidden = hidden_source_ids(read_holdout(paths["holdout"]), inputs.overlap)
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
        # a held-out source token is no candidate of WECHSEL's and OFA's search
        missing = inputs.aligned.source_missing.copy()
        missing[inputs.hidden[inputs.hidden < missing.size]] = True
        inputs.aligned.source_missing = missing
        if "aligned_search" in paths and inputs.hidden.size:
            raise ValueError("a held-out transfer searches anew: the shared search "
                             f"{paths['aligned_search']} saw the held-out source tokens")
        if "aligned_search" in paths:  # searched once for WECHSEL and OFA (share_search)
            read_search(paths["aligned_search"], inputs.aligned)
    if "omp_solve" in paths:  # omp's and omp_salt_k's fits, solved once for both
        if inputs.hidden.size:
            raise ValueError("a held-out transfer solves anew: the shared OMP solve "
                             f"{paths['omp_solve']} saw the held-out tokens as candidates")
        read_fits(paths["omp_solve"], inputs)
    if "source_tokenizer" in paths:
        inputs.source_tokenizer = load_tokenizer(
            paths["source_tokenizer"], trust_remote_code=trust_remote_code
        )
    if "truth" in paths:
        inputs.truth = read_truth(paths["truth"])
    if "glove_target" in paths:
        inputs.glove = {side: read_glove(paths[f"glove_{side}"]) for side in ("source", "target")}
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



def score_held_out(inputs: TransferInputs, result: Any, targets: pd.DataFrame) -> pd.DataFrame:
    """Per held-out target token and side: the method's row for it scored against the token's
    true source row (:mod:`embtransfer.evaluation.heldout_rows`): its retrieval among every
    text row of the source (the held-out ones too, as any source token is a candidate answer)
    and its contrast, centred on the mean of those rows; with the token's kind and the label
    of how the method made the row (a fallback shows here)."""
    candidates = replace(inputs, hidden=np.zeros(0, np.int64)).statistic_ids()
    ids = targets["target_id"].to_numpy(np.int64)
    true_ids = targets["source_id"].to_numpy(np.int64)
    # the result's rows are those of its token ids (every target id where the vocabulary is
    # replaced, the appended ones where it is extended), ascending
    at = np.searchsorted(result.token_ids, ids)
    if (at >= result.token_ids.size).any() or (result.token_ids[np.minimum(
            at, result.token_ids.size - 1)] != ids).any():
        raise ValueError("the method's result holds no row for some held-out target tokens")
    parts = []
    for side in result.report["sides"]:
        rows = result.input_rows if side == "input" else result.output_rows
        matrix = inputs.source_matrix(side)
        predicted = rows[at]
        centre = column_sum(matrix, candidates) / candidates.size
        retrieval = retrieval_scores(predicted, matrix, true_ids, candidates)
        contrast = contrast_scores(predicted, matrix, true_ids, centre)
        parts.append(pd.concat([
            targets.assign(side=side, how=result.labels[at]).reset_index(drop=True),
            retrieval.drop(columns="source_id"), contrast.drop(columns="source_id")], axis=1))
    return pd.concat(parts, ignore_index=True)


def run_holdout_job(method: str, paths: dict[str, str], out_path: str,
                    options: dict[str, Any], seed: int, trust_remote_code: bool = False,
                    context: dict[str, Any] | None = None, allow_pickle: bool = False
                    ) -> dict[str, Any]:
    """One method's held-out transfer: the method runs on the held-out overlap with the
    held-out source ids hidden (``paths`` as :func:`run_transfer_job`'s, the held-out
    neighbour tables and regression among them, and ``holdout``, the split); only its rows
    for the held-out tokens are kept, scored against their true source rows, and written
    to ``out_path`` (parquet). No checkpoint is written. Returns the job's record."""
    start = time.perf_counter()
    inputs, _ = load_inputs(paths, seed, trust_remote_code, allow_pickle)
    targets = held_out_targets(read_holdout(paths["holdout"]))
    if targets.empty:
        raise ValueError(f"{paths['holdout']} holds no token out: raise transfer.holdout.share")
    inputs.scored = targets["target_id"].to_numpy(np.int64)
    # a method of extended vocabularies runs as one: the held-out tokens are among the
    # tokens it appends, and its rows are read by target id as every method's
    mode = "replace" if "replace" in method_modes(method) else "extend"
    result = run_method(method, inputs, options, mode)
    scores = score_held_out(inputs, result, targets)
    record = {**(context or {}), "method": method, "held_out": int(len(targets)),
              "hidden_source_ids": int(inputs.hidden.size), "sides": result.report["sides"],
              "labels": dict(sorted(Counter(scores.loc[scores["side"] == "input", "how"]
                                            ).items())),
              "config_hash": config_hash({"method": method, "options": options, "seed": seed,
                                          **(context or {})})}
    write_parquet(out_path, scores, metadata=record)
    record["seconds"] = round(time.perf_counter() - start, 4)
    return record
