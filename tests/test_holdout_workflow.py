"""Integration: the held-out shared tokens are hidden from every method (no copy, no anchor,
no neighbour, no regression row, no candidate, no statistic, no piece), and each method's
rows for them are scored against their true source rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from test_seeds_workflow import RUN, SEEDS, seeded_run  # noqa: F401  (the fixture)

from embtransfer.config.validation import validate_config
from embtransfer.core import paths
from embtransfer.transfer.inputs import holdout_transfer_inputs
from embtransfer.transfer.job import load_inputs
from embtransfer.transfer.method_catalog import DEFAULT_METHODS
from embtransfer.transfer.method_runner import run_method
from embtransfer.vocab.holdout import held_out_targets, read_holdout
from embtransfer.vocab.overlap import read_overlap

pytestmark = pytest.mark.slow

SEED = SEEDS[0]


def _inputs(workdir, method, monkeypatch):
    monkeypatch.chdir(workdir)
    config = validate_config(yaml.safe_load((workdir / "test_config.yaml").read_text()))
    files = holdout_transfer_inputs(config, {**RUN, "method": method, "seed": str(SEED)})
    inputs, _ = load_inputs(files, SEED)
    return inputs, files


def _with_noise(inputs, ids, seed=0):
    """``inputs`` with the rows of source ids ``ids`` replaced by large noise, both sides."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("source_input", "source_output"):
        matrix = getattr(inputs, name)
        if matrix is None:
            continue
        noisy = matrix.copy()
        noisy[ids] = 10 * rng.standard_normal((len(ids), matrix.shape[1])).astype(noisy.dtype)
        out[name] = noisy
    return replace(inputs, memo={}, **out)


def _rows(output, ids):
    rows = [output.input_rows[ids]]
    if output.output_rows is not None:
        rows.append(output.output_rows[ids])
    return np.concatenate(rows, axis=1)


@pytest.mark.parametrize("method", DEFAULT_METHODS)
def test_no_method_reads_the_held_out_rows(seeded_run, method, monkeypatch):  # noqa: F811
    """Noise in place of the held-out tokens' true source rows leaves every method's rows
    for them unchanged (bit for bit), and none of them is copied."""
    inputs, files = _inputs(seeded_run, method, monkeypatch)
    targets = held_out_targets(read_holdout(files["holdout"]))
    ids = targets["target_id"].to_numpy()
    assert ids.size >= 5 and inputs.hidden.size
    clean = run_method(method, inputs, {}, "replace")
    noisy = run_method(method, _with_noise(inputs, inputs.hidden), {}, "replace")
    np.testing.assert_array_equal(_rows(clean, ids), _rows(noisy, ids))
    assert "copied" not in set(clean.labels[ids])


def test_the_test_catches_a_method_that_reads_them(seeded_run, monkeypatch):  # noqa: F811
    """The same check on the full overlap (no token hidden) sees the copied rows change."""
    inputs, files = _inputs(seeded_run, "mean", monkeypatch)
    full = replace(inputs, overlap=read_overlap(paths.OVERLAP.fill(**RUN)),
                   hidden=np.zeros(0, np.int64))
    ids = held_out_targets(read_holdout(files["holdout"]))["target_id"].to_numpy()
    clean = run_method("mean", full, {}, "replace")
    noisy = run_method("mean", _with_noise(full, inputs.hidden), {}, "replace")
    assert not np.array_equal(_rows(clean, ids), _rows(noisy, ids))


def test_every_method_is_scored_on_the_held_out_tokens(seeded_run):  # noqa: F811
    for seed in SEEDS:
        split = read_holdout(seeded_run / paths.HOLDOUT.fill(**RUN, seed=seed))
        held = held_out_targets(split)
        scores = {m: pd.read_parquet(seeded_run / paths.HOLDOUT_SCORES.fill(
            **RUN, method=m, seed=seed)) for m in ("salt", "focus", "wechsel", "tokalign",
                                                   "random")}
        for method, table in scores.items():
            for side, part in table.groupby("side"):
                assert part["target_id"].tolist() == held["target_id"].tolist(), (method, side)
                assert "copied" not in set(part["how"])
                assert ((part["rank"] >= 1) & (part["hit_1"] <= part["hit_10"])).all()
        # the held-out neighbour tables never use a held-out token as a neighbour
        table = pd.read_parquet(seeded_run / paths.HOLDOUT_NEIGHBORS.fill(
            **RUN, vectors="word", seed=seed))
        hidden = set(split.loc[split["held_out"], "source_id"])
        used = set(np.concatenate([np.asarray(v) for v in table["neighbor_source_ids"]]
                                  ).tolist())
        assert not used & hidden
