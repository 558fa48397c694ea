"""The held-out share of the shared tokens (embtransfer.vocab.holdout)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from embtransfer.vocab.holdout import counts_by_kind, holdout_split
from embtransfer.vocab.kinds import KINDS


def _overlap(seed: int, n: int = 600) -> tuple[pd.DataFrame, pd.Series]:
    """A fuzzy overlap: target ids 10.., some source ids shared by two target ids, two
    special tokens; kinds drawn per target id."""
    rng = np.random.default_rng(seed)
    source = rng.choice(5000, size=n, replace=True)  # repeats: fuzzy matches
    overlap = pd.DataFrame({"target_id": np.arange(10, 10 + n), "source_id": source,
                            "how": "fuzzy"})
    special = pd.DataFrame({"target_id": [0, 1], "source_id": [0, 1], "how": "special"})
    kinds = pd.Series(rng.choice(KINDS, size=n, p=[0.4, 0.3, 0.1, 0.1, 0.05, 0.05]),
                      index=np.arange(10, 10 + n), dtype=object)
    return pd.concat([special, overlap], ignore_index=True), kinds


@pytest.mark.parametrize("seed", range(4))
def test_a_held_out_source_id_is_hidden_with_every_target_token_that_shares_it(seed):
    overlap, kinds = _overlap(seed)
    split = holdout_split(overlap, kinds, 0.15, seed)
    by_source = split[split["kind"] != ""].groupby("source_id")["held_out"].agg(["min", "max"])
    assert (by_source["min"] == by_source["max"]).all()
    assert not split.loc[split["how"] == "special", "held_out"].any()
    assert split["held_out"].any()


@pytest.mark.parametrize("seed", range(4))
def test_each_kind_keeps_its_share(seed):
    overlap, kinds = _overlap(seed)
    split = holdout_split(overlap, kinds, 0.15, seed)
    # per kind, the held-out source ids are 15 % of its source ids, rounded (a source id
    # takes the kind of its lowest target id, counted apart here)
    text = split[split["kind"] != ""].sort_values("target_id")
    first = text.drop_duplicates("source_id")
    for kind, part in first.groupby("kind"):
        expected = min(max(round(0.15 * len(part)), 1), len(part) - 1)
        assert int(part["held_out"].sum()) == expected, kind
    table = counts_by_kind(split)
    assert table["shared"].sum() == len(text) and table["held_out"].sum() == text["held_out"].sum()


def test_the_split_is_seeded_and_does_not_depend_on_row_order():
    overlap, kinds = _overlap(0)
    a = holdout_split(overlap, kinds, 0.2, 7)
    shuffled = overlap.sample(frac=1.0, random_state=3)
    b = holdout_split(shuffled, kinds, 0.2, 7).sort_values("target_id")
    assert a.sort_values("target_id")["held_out"].tolist() == b["held_out"].tolist()
    c = holdout_split(overlap, kinds, 0.2, 8)
    assert a["held_out"].tolist() != c["held_out"].tolist()


def test_adding_tokens_of_one_kind_leaves_the_other_kinds_draws_alone():
    overlap, kinds = _overlap(1)
    base = holdout_split(overlap, kinds, 0.2, 5)
    extra = pd.DataFrame({"target_id": [9000, 9001], "source_id": [9000, 9001], "how": "exact"})
    more = holdout_split(pd.concat([overlap, extra]),
                         pd.concat([kinds, pd.Series(["byte", "byte"], index=[9000, 9001])]),
                         0.2, 5)
    keep = base["kind"].isin(["word", "piece", "name", "digits", "punct"])
    merged = base[keep].merge(more, on="target_id", suffixes=("", "_more"))
    assert (merged["held_out"] == merged["held_out_more"]).all()


def test_a_share_outside_the_unit_interval_is_refused():
    overlap, kinds = _overlap(0)
    with pytest.raises(ValueError, match="transfer.holdout.share"):
        holdout_split(overlap, kinds, 1.0, 0)
