"""The transfer runner: registry lookups, option checks, NaN refusal, vocabulary modes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from embtransfer import method_catalog
from embtransfer.methods import base
from embtransfer.methods.base import SideResult, TransferInputs, get_method, load_all
from embtransfer.transfer import NonFiniteRowsError, run_method


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
        rows, how = base.empty_result(inputs, side)
        base.copy_shared(inputs, side, rows, how)
        unset = how == "unset"
        rows[unset] = base.source_normal(inputs, side, inputs.rng("fake", side), int(unset.sum()))
        how[unset] = "random"
        if behaviour["poison"] is not None:
            rows[behaviour["poison"], 1] = np.nan
        return SideResult(rows, how, {"scale": params["scale"]})

    monkeypatch.setitem(method_catalog.METHODS, "fake", {"module": "base", "needs": []})
    monkeypatch.setitem(
        base.REGISTRY, "fake", base.MethodSpec("fake", fake, frozenset(), "", {"scale": 1.0})
    )
    return behaviour


def test_catalog_agrees_with_the_registry():
    registry = load_all()
    assert set(registry) == set(method_catalog.METHODS)
    for name, spec in registry.items():
        declared = method_catalog.method_needs(name, spec.defaults)
        assert spec.needs == declared, name
        if "options" in method_catalog.METHODS[name]:
            assert set(method_catalog.METHODS[name]["options"]) == set(spec.defaults), name


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown transfer method 'salty'; known methods: .*focus"):
        get_method("salty")


def test_unknown_option_is_named(fake_method):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['scael'\] for method 'fake'"):
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
