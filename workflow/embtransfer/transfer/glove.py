"""GloVe vectors of a token stream (Pennington et al. 2014), as TokAlign trains them on a
corpus tokenized by each tokenizer (its ``script/train_glove.sh``: Stanford's C tools).

No maintained GloVe package installs here, so this is the objective written out:

- **co-occurrence** (Stanford's ``cooccur``): every pair of kept tokens within ``window``
  positions of each other on one line adds 1 / distance to X[a, b] and to X[b, a]; tokens
  seen fewer than ``min_count`` times are dropped from the stream first (``vocab_count
  -min-count``), so they take no window position;
- **the objective** (``glove``): J = sum over X_ab > 0 of f(X_ab) (w_a . v_b + b_a + c_b
  - log X_ab)^2, f(x) = min(1, (x / x_max)^0.75);
- **the fit**: AdaGrad at ``learning_rate`` for ``iterations`` passes over the non-zero
  entries in a seeded order, the parameters initialised uniform in [-0.5, 0.5] / dim and the
  squared-gradient sums at 1, as ``glove`` does; Stanford's threads update entries one at a
  time without locks, here a pass updates them in mini-batches of ``batch`` entries;
- **the vectors**: w + v (``glove``'s default ``-model 2``); a token without a kept
  occurrence has none (``missing``).

:func:`glove_loss` is the objective itself, which the tests minimise by brute force.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from embtransfer.core.atomic import atomic_path
from embtransfer.models.hf import encode_texts

#: f(x) = min(1, (x / x_max) ** ALPHA), GloVe's and Stanford's exponent.
ALPHA = 0.75
#: The fit's arithmetic (the objective is evaluated in float64 after each pass).
DTYPE = torch.float32


def cooccurrence(lines: Sequence[Sequence[int]], vocab_size: int, window: int,
                 min_count: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, values, counts): the non-zero entries of the symmetric co-occurrence
    matrix of ``lines`` (token ids below ``vocab_size``; a window never crosses a line),
    sorted by (row, col), and each id's count before ``min_count`` drops the rare ones."""
    if window < 1:
        raise ValueError(f"the GloVe window must be at least 1, not {window}")
    flat = np.concatenate([np.asarray(line, np.int64) for line in lines]) if lines else (
        np.zeros(0, np.int64))
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        raise ValueError(f"token ids outside 0..{vocab_size - 1}")
    counts = np.bincount(flat, minlength=vocab_size)
    kept = counts >= min_count
    line_of = np.repeat(np.arange(len(lines)), [len(line) for line in lines])
    keep = kept[flat]
    flat, line_of = flat[keep], line_of[keep]
    keys, weights = [], []
    for d in range(1, window + 1):
        same = line_of[:-d] == line_of[d:]
        a, b = flat[:-d][same], flat[d:][same]
        keys += [a * vocab_size + b, b * vocab_size + a]
        weights += [np.full(2 * a.size, 1.0 / d)]
    if not keys:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0), counts
    key = np.concatenate(keys)
    unique, inverse = np.unique(key, return_inverse=True)
    values = np.bincount(inverse, weights=np.concatenate(weights))
    return unique // vocab_size, unique % vocab_size, values, counts


def glove_loss(w: np.ndarray, v: np.ndarray, bw: np.ndarray, bv: np.ndarray,
               rows: np.ndarray, cols: np.ndarray, values: np.ndarray, x_max: float) -> float:
    """J of GloVe at (w, v, bw, bv) over the entries (rows, cols, values), in float64."""
    weight = np.minimum(1.0, (values / x_max) ** ALPHA)
    error = np.einsum("ij,ij->i", w[rows], v[cols]) + bw[rows] + bv[cols] - np.log(values)
    return float(np.sum(weight * error**2))


def train_glove(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, vocab_size: int,
                dim: int, iterations: int, x_max: float, learning_rate: float = 0.05,
                seed: int = 0, batch: int = 1024) -> tuple[np.ndarray, dict[str, Any]]:
    """(vectors (vocab_size, dim) float32 = w + v, record): GloVe fitted by AdaGrad to the
    entries, with the objective after each pass in the record. Ids without an entry keep
    their initial parameters; :func:`glove_vectors` marks them missing."""
    if dim < 1 or iterations < 0 or batch < 1:
        raise ValueError(f"GloVe needs dim >= 1, iterations >= 0, batch >= 1, not {dim}, "
                         f"{iterations}, {batch}")
    generator = torch.Generator().manual_seed(int(seed))

    def init(*shape: int) -> torch.Tensor:
        return ((torch.rand(*shape, generator=generator, dtype=torch.float64) - 0.5) / dim
                ).to(DTYPE)

    params = [init(vocab_size, dim), init(vocab_size, dim), init(vocab_size), init(vocab_size)]
    squares = [torch.ones_like(p) for p in params]  # AdaGrad's sums start at 1, as glove's
    r, c = torch.from_numpy(np.asarray(rows, np.int64)), torch.from_numpy(
        np.asarray(cols, np.int64))
    x = torch.from_numpy(np.asarray(values, np.float64)).to(DTYPE)
    f = torch.clamp((x / x_max) ** ALPHA, max=1.0)
    logx = torch.log(x)
    losses = []
    for _ in range(iterations):
        order = torch.randperm(x.numel(), generator=generator)
        for start in range(0, order.numel(), batch):
            i = order[start : start + batch]
            w, v, bw, bv = params
            ri, ci = r[i], c[i]
            diff = (w[ri] * v[ci]).sum(dim=1) + bw[ri] + bv[ci] - logx[i]
            g = f[i] * diff  # half the gradient of f * diff^2, as glove's update uses
            grads = [(g[:, None] * v[ci], ri), (g[:, None] * w[ri], ci), (g, ri), (g, ci)]
            for param, square, (grad, index) in zip(params, squares, grads, strict=True):
                square.index_add_(0, index, grad * grad)
                param.index_add_(0, index, -learning_rate * grad / torch.sqrt(square[index]))
        losses.append(glove_loss(*(p.double().numpy() for p in params), rows, cols, values,
                                 x_max))
    w, v = params[0].double().numpy(), params[1].double().numpy()
    record = {"entries": int(x.numel()), "loss": [round(v_, 6) for v_ in losses],
              "dim": dim, "iterations": iterations, "x_max": x_max,
              "learning_rate": learning_rate}
    return (w + v).astype(np.float32), record


def glove_vectors(lines: Sequence[Sequence[int]], vocab_size: int, dim: int, window: int,
                  min_count: int, iterations: int, x_max: float, learning_rate: float = 0.05,
                  seed: int = 0, batch: int = 1024
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(vectors, missing, record) of one tokenization of a corpus: ``missing[i]`` where id i
    has no entry (too rare, or never seen), its vector zero."""
    rows, cols, values, counts = cooccurrence(lines, vocab_size, window, min_count)
    vectors, record = train_glove(rows, cols, values, vocab_size, dim, iterations, x_max,
                                  learning_rate, seed, batch)
    missing = np.ones(vocab_size, bool)
    missing[rows] = False
    vectors[missing] = 0.0
    record.update(tokens=int(counts.sum()), kept_ids=int((~missing).sum()),
                  min_count=min_count, window=window)
    if not math.isfinite(record["loss"][-1] if record["loss"] else 0.0):
        raise FloatingPointError("GloVe diverged: lower transfer.options.tokalign."
                                 "learning_rate")
    return vectors, missing, record


def corpus_glove(tokenizer: Any, corpus: str | os.PathLike, options: dict[str, Any],
                 vocab_size: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """:func:`glove_vectors` of ``corpus`` (one document per line; the first ``max_lines``
    non-empty ones) tokenized by ``tokenizer`` without special tokens, with TokAlign's
    options (:data:`embtransfer.transfer.method_catalog.METHODS`)."""
    with open(corpus, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    if options.get("max_lines"):
        lines = lines[: int(options["max_lines"])]
    ids = encode_texts(tokenizer, lines)
    vectors, missing, record = glove_vectors(
        ids, vocab_size, int(options["dim"]), int(options["window"]),
        int(options["min_count"]), int(options["iterations"]), float(options["x_max"]),
        float(options["learning_rate"]), seed, int(options["batch"]))
    record["lines"] = len(lines)
    return vectors, missing, record


def write_glove(path: str | os.PathLike, vectors: np.ndarray, missing: np.ndarray,
                record: dict[str, Any]) -> None:
    """The vectors and missing mask as one safetensors file (the record in its metadata)."""
    with atomic_path(path) as tmp:
        save_file({"vectors": np.ascontiguousarray(vectors, np.float32),
                   "missing": np.ascontiguousarray(missing, bool)}, str(tmp),
                  metadata={"record": json.dumps(record, sort_keys=True)})


def read_glove(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, missing) of :func:`write_glove`'s file."""
    arrays = load_file(str(path))
    return arrays["vectors"], arrays["missing"].astype(bool)
