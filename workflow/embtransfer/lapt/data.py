"""LAPT's training data: the packed blocks of every text, and which rows each step trains on.

:func:`corpus_blocks` tokenises the training, validation and replay texts once (rank 0
builds, the others wait; :mod:`embtransfer.lapt.blocks`) and checks that the model's
positions and the corpus fit the settings. :class:`TrainingRows` indexes target and
replay blocks as one array; :func:`epoch_order` fixes the order of an epoch, with
replay at an exact ratio; :class:`GlobalBatches` slices it into the steps' global batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embtransfer.lapt.blocks import blocks_for
from embtransfer.lapt.distributed import Ranks, main_first
from embtransfer.lapt.settings import LaptSettings
from embtransfer.models.hf import position_limit


class CorpusTooSmallError(ValueError):
    pass


def replay_count(n_target: int, ratio: float) -> int:
    """Replay sequences per epoch so that replay / (target + replay) == ratio, rounded."""
    return round(n_target * ratio / (1.0 - ratio)) if ratio > 0 else 0


def epoch_order(
    n_target: int, n_replay_blocks: int, ratio: float, seed: int, epoch: int
) -> np.ndarray:
    """Indices into ``cat(target_blocks, replay_blocks)`` for one epoch.

    Every target block once, in a permutation seeded by (seed, epoch); plus
    :func:`replay_count` replay blocks (cycled through permutations if the replay
    file is shorter) at evenly spread positions, so every prefix of the epoch holds
    ``floor(k * n_replay / n)`` of them.
    """
    rng = np.random.default_rng([seed, epoch])
    target = rng.permutation(n_target)
    n_rep = replay_count(n_target, ratio) if n_replay_blocks > 0 else 0
    if n_rep == 0:
        return target
    reps = (
        np.concatenate(
            [rng.permutation(n_replay_blocks) for _ in range(-(-n_rep // n_replay_blocks))]
        )[:n_rep]
        + n_target
    )
    n = n_target + n_rep
    pos = np.arange(n, dtype=np.int64)
    is_rep = ((pos + 1) * n_rep // n - pos * n_rep // n).astype(bool)
    order = np.empty(n, dtype=np.int64)
    order[is_rep] = reps
    order[~is_rep] = target
    return order


class TrainingRows:
    """Target (and replay) blocks, memory-mapped, indexed by one epoch order."""

    def __init__(self, target: np.ndarray, replay: np.ndarray | None):
        self.target, self.replay = target, replay
        self.n_target = len(target)
        self.n_replay = 0 if replay is None else len(replay)

    def rows(self, idx: np.ndarray) -> torch.Tensor:
        out = np.empty((len(idx), self.target.shape[1]), dtype=np.int64)
        is_t = idx < self.n_target
        out[is_t] = self.target[idx[is_t]]
        if not is_t.all():
            out[~is_t] = self.replay[idx[~is_t] - self.n_target]
        return torch.from_numpy(out)


class GlobalBatches:
    """The global batch of each step: a slice of its epoch's order (one epoch cached)."""

    def __init__(
        self,
        training: TrainingRows,
        batch_size: int,
        steps_per_epoch: int,
        replay_ratio: float,
        seed: int,
    ):
        self.training, self.batch_size = training, batch_size
        self.steps_per_epoch, self.replay_ratio, self.seed = steps_per_epoch, replay_ratio, seed
        self.orders: dict[int, np.ndarray] = {}

    def at(self, step: int) -> np.ndarray:
        size, training = self.batch_size, self.training
        epoch, offset = divmod(step * size, max(1, self.steps_per_epoch) * size)
        if epoch not in self.orders:
            self.orders = {
                epoch: epoch_order(
                    training.n_target, training.n_replay, self.replay_ratio, self.seed, epoch
                )
            }
        return self.orders[epoch][offset : offset + size]


@dataclass(frozen=True)
class CorpusBlocks:
    """The run's blocks: training rows, held-out blocks, and each text's sidecar."""

    training: TrainingRows
    valid: np.ndarray
    metas: dict[str, dict[str, Any]]  # "train", "valid" (and "replay") -> blocks sidecar


def corpus_blocks(
    model: Any,
    tokenizer: Any,
    sources: dict[str, str | Path],
    settings: LaptSettings,
    work: Path,
    ranks: Ranks,
) -> CorpusBlocks:
    """Memory-mapped blocks of every text, tokenised once (rank 0 builds, the others wait)."""
    max_pos = position_limit(model.config)
    if max_pos is not None and settings.max_length > max_pos:
        raise ValueError(f"max_length {settings.max_length} exceeds the model's {max_pos} "
                         "positions")  # fmt: skip
    config_eos = getattr(model.config, "eos_token_id", None)

    def build() -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        blocks, metas = {}, {}
        for name, src in sources.items():
            blocks[name], metas[name] = blocks_for(
                src, tokenizer, config_eos, settings.max_length, work / "blocks", name
            )
        return blocks, metas

    blocks, metas = main_first(ranks, build)
    _check_corpus_size(int(metas["train"]["tokens"]), sources["train"], settings)
    return CorpusBlocks(
        training=TrainingRows(blocks["train"], blocks.get("replay")),
        valid=blocks["valid"],
        metas=metas,
    )


def _check_corpus_size(n_tokens: int, train_source: str | Path, settings: LaptSettings) -> None:
    """At least one global batch of whole blocks in the training text."""
    batch_size, length = settings.global_batch_size, settings.max_length
    if n_tokens // length < batch_size:
        raise CorpusTooSmallError(
            f"{train_source}: {n_tokens} tokens, fewer than one global batch "
            f"({batch_size} sequences x {length} tokens = {batch_size * length}); lower "
            f"global_batch_size or max_length, or give more text"
        )
