"""Random baselines (docs/design.md §4.4): ``random`` and ``random_copy``.

``random``       every target row, shared ones too, drawn from N(mean, std) of the
                 source rows (per dimension, population std), label ``random``.
``random_copy``  shared tokens copy their source row; the others as ``random``.

Rows are drawn in target-id order from ``inputs.rng(name, side)``, so a run is
reproducible from the seed, the two sides get independent streams, and the
order the overlap table lists its pairs in does not matter.

The small helpers at the bottom are shared by the other baseline modules.
"""

from __future__ import annotations

from typing import Any

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    empty_result,
    nonshared_ids,
    source_normal,
)


@register("random")
def random_all(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    rows, how = empty_result(inputs, side)
    rows[:] = source_normal(inputs, side, inputs.rng("random", side), inputs.n_target)
    how[:] = "random"
    return SideResult(rows, how, {"counts": count_labels(how)})


@register("random_copy")
def random_copy(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)
    rows[todo] = source_normal(inputs, side, inputs.rng("random_copy", side), todo.size)
    how[todo] = "random"
    return SideResult(rows, how, {"counts": count_labels(how)})
