"""The inputs of the regression stage: paired embeddings of the shared tokens.

For every shared (target id, source id) pair the target PLM's input embedding
row and the source LLM's input row (and output row, when the source's LM head
is untied) are stacked in overlap order. The SALT regression (docs/design.md §4.3) and
the global least-squares map both start from these matrices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.atomic import atomic_path, check_finite, write_json


def _rows(matrix: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
    if ids.size and (ids.min() < 0 or ids.max() >= matrix.shape[0]):
        bad = ids[(ids < 0) | (ids >= matrix.shape[0])]
        raise ValueError(
            f"{what}: token ids {bad[:5].tolist()} are outside the embedding matrix "
            f"({matrix.shape[0]} rows); the tokenizer and the model disagree"
        )
    return matrix[ids]


def build_regression_inputs(
    overlap: pd.DataFrame,
    target_input: np.ndarray,
    source_input: np.ndarray,
    source_output: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """Stack the shared tokens' embeddings; ``source_output`` is None for tied sources."""
    target_ids = overlap["target_id"].to_numpy(np.int64)
    source_ids = overlap["source_id"].to_numpy(np.int64)
    arrays = {
        "shared_target_ids": target_ids,
        "shared_source_ids": source_ids,
        "target_input": _rows(target_input, target_ids, "target PLM input embeddings"),
        "source_input": _rows(source_input, source_ids, "source LLM input embeddings"),
    }
    if source_output is not None:
        arrays["source_output"] = _rows(source_output, source_ids, "source LLM output embeddings")
    for name, array in arrays.items():
        check_finite(name, array)
    return {k: np.ascontiguousarray(v) for k, v in arrays.items()}


def write_regression_inputs(
    arrays: dict[str, np.ndarray], meta: dict[str, Any], tensors_path: str | Path,
    meta_path: str | Path,
) -> None:
    from safetensors.numpy import save_file

    with atomic_path(tensors_path) as tmp:
        save_file(arrays, str(tmp))
    write_json(meta_path, meta)


def describe(arrays: dict[str, np.ndarray], tied: bool) -> dict[str, Any]:
    return {
        "n_shared": int(arrays["shared_target_ids"].shape[0]),
        "target_dim": int(arrays["target_input"].shape[1]),
        "source_dim": int(arrays["source_input"].shape[1]),
        "source_tied": tied,
        "arrays": {k: list(v.shape) for k, v in arrays.items()},
    }
