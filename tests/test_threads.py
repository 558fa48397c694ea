"""embtransfer.core.threads: torch's thread count for a block of work, then restored."""

from __future__ import annotations

import pytest
import torch

from embtransfer.core.threads import torch_threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_sets_then_restores(restore_threads: int) -> None:
    torch.set_num_threads(2)
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_restores_after_an_exception(restore_threads: int) -> None:
    torch.set_num_threads(2)
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2


def test_none_leaves_the_setting_and_a_count_is_at_least_one(restore_threads: int) -> None:
    torch.set_num_threads(2)
    with torch_threads(None):
        assert torch.get_num_threads() == 2
    with torch_threads(0):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
