"""Buffers reused from one batch to the next."""

from __future__ import annotations

import numpy as np
import torch


class Workspace:
    """Named buffers, reused across batches instead of allocated afresh for each.

    A fresh large tensor or array costs page faults: the kernel maps and zeroes its memory
    on first touch, which on CPU cost more than the arithmetic done in it (SALT's gathered
    rows: 4x). A buffer is kept per (name, dtype) and allocated again only when a request
    needs more elements than it holds; ``min_rows`` sizes the first allocation, so a caller
    that knows its largest batch allocates once.
    """

    def __init__(self, device: str | torch.device = "cpu", min_rows: int = 0) -> None:
        self.device = torch.device(device)
        self.min_rows = int(min_rows)
        self._buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def matrix(self, name: str, dtype: torch.dtype, rows: int, width: int) -> torch.Tensor:
        """A contiguous (rows, width) tensor in the reused buffer ``name``; its contents
        are whatever an earlier batch left there."""
        needed = rows * width
        buffer = self._buffers.get((name, dtype))
        if buffer is None or buffer.numel() < needed:
            size = max(needed, self.min_rows * width)
            buffer = torch.empty(size, dtype=dtype, device=self.device)
            self._buffers[(name, dtype)] = buffer
        return buffer[:needed].view(rows, width)

    def gather(
        self, name: str, matrix: torch.Tensor, ids: np.ndarray, dtype: torch.dtype
    ) -> torch.Tensor:
        """``matrix[ids]`` as ``dtype``, (len(ids), width), gathered and widened in reused
        buffers."""
        rows, width = ids.size, matrix.shape[1]
        index = torch.from_numpy(ids).to(self.device)
        raw = self.matrix(name, matrix.dtype, rows, width)
        torch.index_select(matrix, 0, index, out=raw)
        if matrix.dtype == dtype:
            return raw
        return self.matrix(name, dtype, rows, width).copy_(raw)
