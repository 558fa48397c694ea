"""Run one initialisation method on both embedding sides and check what it made.

The runner is the single place that (a) merges a method's defaults with the
config's options (:func:`embtransfer.transfer.method_catalog.resolve_options` checks them),
(b) calls it for the input and, for untied sources, the output embeddings,
(c) refuses NaN/Inf rows naming the tokens, and (d) picks the rows the vocabulary
mode keeps (``replace``: every target token; ``extend``: the target tokens the
source lacks, appended after its vocabulary).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embtransfer.core.vocab_modes import method_modes
from embtransfer.models.loading import name_rows, nonfinite_rows
from embtransfer.transfer.method_catalog import resolve_options
from embtransfer.transfer.methods.base import SideResult, TransferInputs, get_method


class NonFiniteRowsError(ValueError):
    """A method produced NaN or Inf; nothing is written."""


@dataclass
class TransferOutput:
    input_rows: np.ndarray
    output_rows: np.ndarray | None
    token_ids: np.ndarray  # target ids the rows belong to, in row order
    labels: np.ndarray  # the method's label of each row (copied, projected, ...), row order
    report: dict[str, Any] = field(default_factory=dict)


def _tokens(vocab: Any) -> Any:
    return vocab["token"].to_numpy() if "token" in vocab else None


def check_inputs(inputs: TransferInputs) -> None:
    """Refuse NaN/Inf in the matrices a method reads, naming the bad rows, before compute."""
    matrices = [("source input embeddings", inputs.source_input, inputs.source_vocab),
                ("source output embeddings", inputs.source_output, inputs.source_vocab),
                ("target PLM input embeddings", inputs.plm_input, inputs.target_vocab)]
    for name, matrix, vocab in matrices:
        if matrix is None:
            continue
        bad = nonfinite_rows(matrix)
        if bad.size:
            raise NonFiniteRowsError(
                f"refusing to transfer: the {name} hold NaN/Inf in {bad.size} rows, ids and "
                f"tokens {name_rows(bad, _tokens(vocab))}; that checkpoint is damaged: "
                "download, copy or train it again"
            )


def check_rows(name: str, rows: np.ndarray, inputs: TransferInputs) -> None:
    """Raise :class:`NonFiniteRowsError` naming the first target tokens with bad rows."""
    bad = nonfinite_rows(rows)
    if bad.size:
        raise NonFiniteRowsError(
            f"refusing to write: {name} has non-finite values in {bad.size} rows, "
            f"for target tokens {name_rows(bad, _tokens(inputs.target_vocab))}"
        )


def run_method(
    method: str, inputs: TransferInputs, options: dict[str, Any] | None = None,
    mode: str = "replace",
) -> TransferOutput:
    if mode not in method_modes(method):
        raise ValueError(
            f"method {method!r} works with transfer.vocab_mode {' or '.join(method_modes(method))}"
            f", not {mode!r}: drop it from transfer.methods or change the mode")
    spec = get_method(method)
    params = resolve_options(method, options)
    check_inputs(inputs)
    sides = ["input"] + (["output"] if inputs.source_output is not None else [])
    results: dict[str, SideResult] = {}
    seconds: dict[str, float] = {}
    for side in sides:
        start = time.perf_counter()
        result = spec.fn(inputs, params, side)
        seconds[side] = round(time.perf_counter() - start, 4)
        expected = (inputs.n_target, inputs.source_matrix(side).shape[1])
        if result.rows.shape != expected:
            raise ValueError(
                f"method {method!r} returned rows of shape {result.rows.shape}, want {expected}"
            )
        if (result.how == "unset").any():
            raise ValueError(f"method {method!r} left {(result.how == 'unset').sum()} rows unset")
        check_rows(f"{method} {side} embeddings", result.rows, inputs)
        results[side] = result

    if mode == "replace":
        token_ids = np.arange(inputs.n_target, dtype=np.int64)
    elif mode == "extend":
        # Appended: the target's ordinary tokens the source lacks; special tokens
        # keep the source's (they are the source's roles in an extended model).
        shared = set(inputs.overlap["target_id"].tolist())
        kinds = (
            inputs.target_vocab["kind"].to_numpy()
            if "kind" in inputs.target_vocab else np.full(inputs.n_target, "normal")
        )
        token_ids = np.array(
            [i for i in range(inputs.n_target) if i not in shared and kinds[i] != "special"],
            dtype=np.int64,
        )
    else:
        raise ValueError(f"vocabulary mode must be 'replace' or 'extend', got {mode!r}")

    how = results["input"].how
    report = {
        "method": method,
        "params": params,
        "vocab_mode": mode,
        "sides": sides,
        "rows": int(token_ids.size),
        "counts": dict(sorted(Counter(how[token_ids].tolist()).items())),
        "counts_all_target_tokens": dict(sorted(Counter(how.tolist()).items())),
        "seconds": seconds,
        "stats": {side: results[side].stats for side in sides},
    }
    return TransferOutput(
        input_rows=results["input"].rows[token_ids].astype(np.float32, copy=False),
        output_rows=(
            results["output"].rows[token_ids].astype(np.float32, copy=False)
            if "output" in results else None
        ),
        token_ids=token_ids,
        report=report,
        labels=how[token_ids],
    )
