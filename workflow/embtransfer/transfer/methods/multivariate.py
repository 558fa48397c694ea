"""Multivariate-normal baseline (Hewitt 2021, "Initializing new word embeddings
for pretrained language models"; docs/design.md §4.4).

Shared tokens copy their source row (label ``copied``); every other row is drawn
from N(mu, scale * Sigma) with mu the mean source row and Sigma the full
covariance of the source rows, normalised by n as in Hewitt's code (label
``random``). Source rows here are the text tokens' rows
(``TransferInputs.statistic_ids``: no special, placeholder or padding rows).

``scale`` defaults to 1 (the design: the source covariance itself). Hewitt's
post uses ``1e-5 * Sigma`` to keep new words' LM-head logits small; set
``scale: 1.0e-5`` to reproduce that.

Sampling is mu + z L^T with L the Cholesky factor of scale * Sigma, computed in
float64. Embedding covariances are often rank-deficient (V_s < h_s, or
collapsed directions), where Cholesky fails: then ``jitter * mean(diag Sigma)``
is added to the diagonal, starting at ``jitter`` (default 1e-6) and growing
10x per attempt (at most 8 attempts); the jitter used is reported in the stats.
Relative to the average variance this is far below the sampling noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    column_sum,
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    row_blocks,
)

_MAX_ATTEMPTS = 8
_BLOCK_ROWS = 8192


def covariance_cholesky(
    matrix: np.ndarray, scale: float = 1.0, jitter: float = 1e-6, ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """(mean, Cholesky factor of scale * covariance, relative jitter used), float64.

    Over ``matrix``'s rows, or only the rows ``ids``.
    """
    x = np.asarray(matrix)
    n = x.shape[0] if ids is None else ids.size
    # blocks of rows: a float64 copy of a 250k x 4096 source matrix would be 8 GB
    mean = column_sum(x, ids, _BLOCK_ROWS) / n
    cov = np.zeros((x.shape[1], x.shape[1]))
    for block in row_blocks(x, ids, _BLOCK_ROWS):
        centred = block - mean
        cov += centred.T @ centred
    cov *= scale / n
    level = float(np.mean(np.diag(cov))) or 1.0
    used = 0.0
    for attempt in range(_MAX_ATTEMPTS + 1):
        try:
            return mean, np.linalg.cholesky(cov + used * level * np.eye(cov.shape[0])), used
        except np.linalg.LinAlgError:
            used = jitter * 10.0**attempt
    raise np.linalg.LinAlgError(
        f"covariance not positive definite even with jitter {used:g} x mean variance"
    )


@register("multivariate")
def multivariate(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    scale = float(params["scale"])
    jitter = float(params["jitter"])
    if scale <= 0 or jitter <= 0:
        raise ValueError("multivariate: scale and jitter must be > 0")
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    mean, chol, used = covariance_cholesky(
        inputs.source_matrix(side), scale, jitter, inputs.statistic_ids()
    )
    rng = inputs.rng("multivariate", side)
    # in blocks (the stream is the same as one big draw) to bound the float64 temporaries
    for s in range(0, todo.size, _BLOCK_ROWS):
        ids = todo[s : s + _BLOCK_ROWS]
        rows[ids] = (mean + rng.standard_normal((ids.size, mean.size)) @ chol.T).astype(np.float32)
    how[todo] = "random"
    return SideResult(rows, how, {"counts": count_labels(how), "jitter": used, "scale": scale})
