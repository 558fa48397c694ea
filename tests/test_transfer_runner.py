"""The transfer runner: registry lookups, option checks, NaN refusal, vocabulary modes."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from embtransfer.config.validation import load_schema
from embtransfer.core.vocab_modes import method_modes
from embtransfer.transfer import method_catalog
from embtransfer.transfer.method_catalog import (
    DEFAULT_METHODS,
    METHODS,
    NEEDS,
    Option,
    OptionError,
    resolve_options,
)
from embtransfer.transfer.method_runner import NonFiniteRowsError, run_method
from embtransfer.transfer.methods import base, common
from embtransfer.transfer.methods.base import SideResult, TransferInputs, get_method


def make_inputs(untied: bool = True) -> TransferInputs:
    rng = np.random.default_rng(0)
    target_vocab = pd.DataFrame({
        "id": range(6), "token": [f"t{i}" for i in range(6)],
        "kind": ["normal", "normal", "normal", "normal", "normal", "special"],
    })
    return TransferInputs(
        source_input=rng.standard_normal((10, 4)).astype(np.float32),
        source_output=rng.standard_normal((10, 4)).astype(np.float32) if untied else None,
        source_vocab=pd.DataFrame({"id": range(10)}),
        target_vocab=target_vocab,
        overlap=pd.DataFrame({"target_id": [4, 1], "source_id": [7, 2], "how": ["exact"] * 2}),
        seed=3,
    )


@pytest.fixture()
def fake_method(monkeypatch):
    """Register a method ``fake`` whose behaviour a test chooses."""
    behaviour = {"poison": None}

    def fake(inputs: TransferInputs, params: dict, side: str) -> SideResult:
        rows, how = common.empty_result(inputs, side)
        common.copy_shared(inputs, side, rows, how)
        unset = how == "unset"
        rows[unset] = common.source_normal(inputs, side, inputs.rng("fake", side), int(unset.sum()))
        how[unset] = "random"
        if behaviour["poison"] is not None:
            rows[behaviour["poison"], 1] = np.nan
        return SideResult(rows, how, {"scale": params["scale"]})

    monkeypatch.setitem(METHODS, "fake", {
        "module": "base", "needs": [], "description": "a test's method",
        "options": {"scale": Option(1.0, {"type": "number"})},
    })
    monkeypatch.setitem(base.REGISTRY, "fake", fake)
    return behaviour


def test_catalog_and_registry_name_the_same_methods():
    # A method added to the catalog without a registered function (or registered
    # under a name the catalog lacks) fails here.
    registry = {name: get_method(name) for name in METHODS}  # imports every method module
    assert set(base.REGISTRY) == set(METHODS) == set(registry)
    for name, spec in registry.items():
        assert spec.fn is base.REGISTRY[name]
        assert spec.fn.__module__ == f"embtransfer.transfer.methods.{METHODS[name]['module']}", name
        assert spec.defaults == {k: o.default for k, o in METHODS[name]["options"].items()}
        assert set(METHODS[name]["needs"]) <= set(NEEDS) | {"neighbors"}, name
        assert spec.needs <= set(NEEDS) and spec.description, name
        assert resolve_options(name, None) == spec.defaults  # the defaults pass the checks
    with pytest.raises(ValueError, match="not in embtransfer.transfer.method_catalog.METHODS"):
        base.register("salty")


def test_method_modules_hold_no_catalog_data():
    """A module exports its function; names, options, defaults and needs are the catalog's."""
    for name in METHODS:
        get_method(name)  # imports its module
    for module in {spec["module"] for spec in METHODS.values()}:
        mod = sys.modules[f"embtransfer.transfer.methods.{module}"]
        for attr in ("DEFAULTS", "NEEDS", "VECTORS", "DESCRIPTION"):
            assert not hasattr(mod, attr), f"embtransfer.transfer.methods.{module}.{attr}"


def test_schema_method_names_come_from_the_catalog(monkeypatch):
    transfer = load_schema()["properties"]["transfer"]["properties"]
    assert transfer["methods"]["items"]["enum"] == list(METHODS)
    # the default: every method but the miniature world's own (world_oracle joins it on a
    # run of the world, in validate_config) and those of extended vocabularies only
    assert transfer["methods"]["default"] == [
        m for m in METHODS
        if not METHODS[m].get("world_only") and "replace" in method_modes(m)]
    assert "token_distillation" in METHODS and "token_distillation" not in DEFAULT_METHODS
    assert transfer["options"]["propertyNames"]["enum"] == list(METHODS)
    monkeypatch.setitem(METHODS, "new_method", {"module": "x", "needs": [], "options": {}})
    transfer = load_schema()["properties"]["transfer"]["properties"]
    assert "new_method" in transfer["methods"]["items"]["enum"]
    assert "new_method" in transfer["options"]["propertyNames"]["enum"]


@pytest.mark.parametrize(("options", "expected"), [
    ({"min_neighbours": 2}, r"transfer.options.salt: unknown option\(s\) \['min_neighbours'\]; "
                            r"salt takes: vectors, min_neighbors, "),
    ({"ridge": -1}, r"transfer.options.salt.ridge: -1 is less than the minimum of 0; salt takes"),
    ({"vectors": "tokn"}, r"transfer.options.salt.vectors: 'tokn' is not one of"),
    ({"max_neighbors": None, "rcond": 1e-8}, None),
])
def test_options_are_checked_in_one_place(options, expected):
    if expected is None:
        params = resolve_options("salt", options)
        assert params == {**method_catalog.defaults("salt"), **options}
        assert list(params) == list(METHODS["salt"]["options"])  # transfer.json's order
        return
    with pytest.raises(OptionError, match=expected):
        resolve_options("salt", options)
    with pytest.raises(OptionError, match=expected):  # the runner goes through it too
        run_method("salt", make_inputs(), options)


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown transfer method 'salty'; known methods: .*focus"):
        get_method("salty")


def test_unknown_option_is_named(fake_method):
    with pytest.raises(ValueError, match=r"fake: unknown option\(s\) \[.scael.\]; fake takes"):
        run_method("fake", make_inputs(), {"scael": 2})


def test_replace_mode_keeps_every_row_and_counts(fake_method):
    out = run_method("fake", make_inputs(), {"scale": 2.0})
    assert out.input_rows.shape == (6, 4) and out.output_rows.shape == (6, 4)
    inputs = make_inputs()
    np.testing.assert_array_equal(out.input_rows[4], inputs.source_input[7])
    np.testing.assert_array_equal(out.output_rows[1], inputs.source_output[2])
    assert out.report["counts"] == {"copied": 2, "random": 4}
    assert out.report["params"] == {"scale": 2.0}
    # Sides draw from independent streams.
    assert not np.allclose(out.input_rows[0], out.output_rows[0])


def test_extend_mode_keeps_the_rows_of_tokens_the_source_lacks(fake_method):
    out = run_method("fake", make_inputs(untied=False), mode="extend")
    assert out.token_ids.tolist() == [0, 2, 3]  # 1 and 4 are shared, 5 is special
    assert out.output_rows is None
    assert out.report["counts"] == {"random": 3}


def test_nan_rows_are_refused_naming_the_tokens(fake_method):
    fake_method["poison"] = [3, 5]
    with pytest.raises(NonFiniteRowsError, match=r"2 rows, for target tokens 3 't3', 5 't5'"):
        run_method("fake", make_inputs())


def test_same_seed_same_rows(fake_method):
    a = run_method("fake", make_inputs())
    b = run_method("fake", make_inputs())
    np.testing.assert_array_equal(a.input_rows, b.input_rows)


def test_drawing_no_rows_is_drawing_them_with_nothing_to_draw():
    """diagonal_normal's shortcut for n = 0 (no moments): the same empty rows, the generator
    where a draw of none leaves it, and the same refusal of a pool too small for a std."""
    matrix = np.random.default_rng(1).standard_normal((20, 4)).astype(np.float32)
    ids = np.arange(3, 15)
    shortcut, drawn = np.random.default_rng(2), np.random.default_rng(2)
    mean, std = common.column_moments(matrix, 1, ids)
    empty = common.diagonal_normal(matrix, shortcut, 0, ddof=1, ids=ids)
    reference = (mean + std * drawn.standard_normal((0, 4))).astype(np.float32)
    assert empty.shape == reference.shape and empty.dtype == reference.dtype
    np.testing.assert_array_equal(
        common.diagonal_normal(matrix, shortcut, 5, ddof=1, ids=ids),
        (mean + std * drawn.standard_normal((5, 4))).astype(np.float32),
    )
    for n in (0, 5):
        with pytest.raises(ValueError, match="need more than 1 rows"):
            common.diagonal_normal(matrix, shortcut, n, ddof=1, ids=ids[:1])


def test_rows_drawn_in_blocks_are_one_draws_rows():
    """diagonal_normal draws its rows block by block: over several blocks and a part block,
    bit for bit the rows of one draw of them all, and the generator left where it would be."""
    matrix = np.random.default_rng(3).standard_normal((50, 3)).astype(np.float32)
    n = 2 * common._DRAW_ROWS + 5
    blocked, whole = np.random.default_rng(4), np.random.default_rng(4)
    mean, std = common.column_moments(matrix)
    rows = common.diagonal_normal(matrix, blocked, n)
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(
        rows, (mean + std * whole.standard_normal((n, 3))).astype(np.float32))
    assert blocked.random() == whole.random()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_moments_equal_numpy_over_the_chosen_rows(dtype):
    """The moments the statistics methods draw from (Random, FOCUS's and CLP's fallbacks,
    Heuristics' pools, Mean) equal numpy's float64 mean and std over exactly the chosen rows,
    across block boundaries, with a column far from zero (mean 1e3 std, where a one-pass
    sum of squares would cancel) and unsorted, repeated ids."""
    rng = np.random.default_rng(7)
    matrix = (rng.standard_normal((1000, 6)) * [1, 0.01, 3, 1e-3, 1, 1]).astype(dtype)
    matrix[:, 3] += 1.0
    for ids in (None, rng.permutation(1000)[:613], np.r_[np.arange(10), np.arange(5)]):
        rows = matrix.astype(np.float64) if ids is None else matrix[ids].astype(np.float64)
        for ddof in (0, 1):
            mean, std = common.column_moments(matrix, ddof, ids, block_rows=128)
            np.testing.assert_allclose(mean, rows.mean(axis=0), rtol=1e-13, atol=0)
            np.testing.assert_allclose(std, rows.std(axis=0, ddof=ddof), rtol=1e-9, atol=0)
        np.testing.assert_allclose(common.column_sum(matrix, ids, block_rows=128),
                                   rows.sum(axis=0), rtol=1e-13)
