"""embtransfer.core.workspace: the one reusable-buffer class (SALT's solve and application,
the sparsemax fallback)."""

from __future__ import annotations

import numpy as np
import torch

from embtransfer.core.workspace import Workspace


def test_a_buffer_is_reused_until_a_request_needs_more() -> None:
    work = Workspace()
    first = work.matrix("x", torch.float64, 4, 3)
    assert first.shape == (4, 3) and first.is_contiguous()
    smaller = work.matrix("x", torch.float64, 2, 5)
    assert smaller.shape == (2, 5) and smaller.data_ptr() == first.data_ptr()
    larger = work.matrix("x", torch.float64, 5, 3)
    assert larger.data_ptr() != first.data_ptr()
    # another name or dtype is another buffer
    assert work.matrix("y", torch.float64, 2, 3).data_ptr() != larger.data_ptr()
    assert work.matrix("x", torch.float32, 2, 3).data_ptr() != larger.data_ptr()


def test_min_rows_sizes_the_first_allocation() -> None:
    work = Workspace("cpu", min_rows=10)
    first = work.matrix("x", torch.float32, 2, 4)
    assert work.matrix("x", torch.float32, 10, 4).data_ptr() == first.data_ptr()


def test_a_numpy_view_writes_into_the_buffer() -> None:
    work = Workspace()
    view = work.matrix("x", torch.float64, 2, 3).numpy()
    view[:] = 7.0
    assert (work.matrix("x", torch.float64, 2, 3) == 7.0).all()


def test_gather_equals_indexing_and_widens_in_reused_memory() -> None:
    rng = np.random.default_rng(0)
    matrix = torch.from_numpy(rng.standard_normal((20, 6)).astype(np.float32))
    ids = np.array([3, 3, 0, 19, 7])
    work = Workspace(min_rows=8)
    same = work.gather("a", matrix, ids, torch.float32)
    assert same.dtype == torch.float32 and torch.equal(same, matrix[torch.from_numpy(ids)])
    wide = work.gather("a", matrix, ids, torch.float64)
    assert wide.dtype == torch.float64
    assert torch.equal(wide, matrix[torch.from_numpy(ids)].to(torch.float64))
    again = work.gather("a", matrix, ids[:2], torch.float64)
    assert again.data_ptr() == wide.data_ptr()
    assert torch.equal(again, matrix[torch.from_numpy(ids[:2])].to(torch.float64))
