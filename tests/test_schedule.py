"""The one learning-rate schedule equals transformers' cosine schedule with warm-up."""

import pytest
import torch
from transformers import get_cosine_schedule_with_warmup

from embtransfer.core.schedule import cosine_scheduler, cosine_with_warmup


@pytest.mark.parametrize(("warmup", "total"), [(0, 1), (0, 7), (2, 10), (30, 120), (5, 5)])
def test_equals_transformers_schedule_up_to_the_last_step(warmup: int, total: int) -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    reference = get_cosine_schedule_with_warmup(optimizer, warmup, total)
    for step in range(total + 1):
        expected = reference.lr_lambdas[0](step)
        assert cosine_with_warmup(step, warmup, total) == pytest.approx(expected, abs=1e-15)


def test_warms_up_from_zero_and_stays_at_zero_past_the_end() -> None:
    assert cosine_with_warmup(0, 4, 20) == 0.0
    assert cosine_with_warmup(2, 4, 20) == 0.5
    assert cosine_with_warmup(4, 4, 20) == 1.0
    # transformers' formula climbs back up past total; the runs never go there, and a
    # schedule that did would be a bug, so it stays at 0
    assert cosine_with_warmup(40, 4, 20) == 0.0


def test_the_scheduler_steps_the_optimizer_through_the_schedule() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    scheduler = cosine_scheduler(optimizer, 3, 10)
    for step in range(11):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(
            0.5 * cosine_with_warmup(step, 3, 10)
        )
        optimizer.step()
        scheduler.step()
