"""Top-k with ties broken by column index, the same on every machine.

``torch.topk`` returns equal values in the order its kernel meets them, which is not the
column order (a row of 3,000 values in 5 levels: every row out of order) and may change
with the torch version, the CPU's instruction set or the block a row is in. Neighbour
tables, WECHSEL/OFA's neighbours (a zero vector ties with every key) and CLP's top-k are
artifacts or feed sums whose order sets the last bits, so their ties are made canonical:
values descending, equal values by ascending index, and where equal values straddle the
k-th place, the lowest indices among them.
"""

from __future__ import annotations

import torch


def topk_lowest_index(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of each row of the 2-D ``x`` and their column indices,
    sorted descending, ties by ascending column index (see the module docstring)."""
    # one value more than asked: a row whose (k+1)-th value is below its k-th has no tie
    # across the cut, so only the others are compared in full (a full-row pass took a fifth
    # of a top-k search's time)
    extra = int(k < x.shape[1])
    v, i = torch.topk(x, k + extra, dim=1, largest=True, sorted=True)
    if k == 0 or x.shape[0] == 0:
        return v[:, :k], i[:, :k]
    suspects = torch.nonzero(v[:, k] == v[:, k - 1]).flatten().tolist() if extra else []
    v, i = v[:, :k], i[:, :k]
    if suspects:
        i = i.clone()
        cut = v[:, -1]
        for r in suspects:
            n = int((v[r] == cut[r]).sum())  # kept equal to the k-th: keep the lowest indices
            i[r, k - n :] = torch.nonzero(x[r] == cut[r]).flatten()[:n]
    # index order first, then a stable sort by value keeps it among equal values
    i, by_index = torch.sort(i, dim=1)
    v, by_value = torch.sort(torch.gather(v, 1, by_index), dim=1, descending=True, stable=True)
    return v, torch.gather(i, 1, by_value)
