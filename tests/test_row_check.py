"""The check of a transferred checkpoint's new rows (embtransfer.transfer.row_check): blown-up
and zero rows are counted per side and named, healthy methods are never flagged, the
checkpoint's transfer.json and log say so, and the report marks the checkpoint (the zero-shot
summary line's ``flags`` and the findings' anomaly line)."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pandas as pd
import pytest
import torch
import transformers as tf
from test_zeroshot_comparison import record as zeroshot_record
from test_zeroshot_comparison import zeroshot

from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer
from embtransfer.report.comparisons import lookup
from embtransfer.report.findings import anomaly_lines, findings_markdown
from embtransfer.report.setting_tables import setting_table
from embtransfer.transfer.method_runner import run_method
from embtransfer.transfer.methods.base import TransferInputs
from embtransfer.transfer.row_check import BLOWN_UP, check_new_rows
from embtransfer.transfer.transferred_model import write_transferred_checkpoint

H = 64


def _tokens(ids: list[int]) -> list[str]:
    return [f"t{i}" for i in ids]


def _source(n: int, seed: int, equal_norms: bool = False) -> np.ndarray:
    """Rows with a common direction, unequal dimensions and a spread of norms, as trained
    embeddings have; ``equal_norms``: every row of norm 1 (the hardest case for a draw from
    N(mean, std) against the longest row, which is then the typical row)."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(0.05, 1.0, (n, H)) * np.linspace(0.3, 1.5, H)
    rows *= rng.lognormal(0.0, 0.4, (n, 1))
    if equal_norms:
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def _check(source_in, source_out, rows_in, rows_out, labels=None, method="salt") -> dict:
    ids = np.arange(rows_in.shape[0]) + 1000  # the rows' token ids differ from row numbers
    return check_new_rows(source_in, source_out, rows_in, rows_out, ids, _tokens, labels,
                          method)


def _convex(source: np.ndarray, n: int, seed: int) -> np.ndarray:
    """FOCUS-like rows: sparse convex combinations of source rows, the first one the longest
    source row itself (weight 1)."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, source.shape[1]), np.float32)
    for i in range(n):
        picked = rng.choice(source.shape[0], size=rng.integers(1, 8), replace=False)
        rows[i] = rng.dirichlet(np.ones(picked.size)) @ source[picked]
    rows[0] = source[np.argmax(np.linalg.norm(source, axis=1))]
    return rows


def test_one_blown_up_output_row_is_counted_and_named():
    src_in, src_out = _source(800, 0), _source(800, 1)
    rows_in, rows_out = _convex(src_in, 300, 2), _convex(src_out, 300, 3)
    longest = np.linalg.norm(src_out, axis=1).max()
    rows_out[7] = rows_out[7] / np.linalg.norm(rows_out[7]) * 100 * longest
    check = _check(src_in, src_out, rows_in, rows_out)
    assert check["flagged"] and check["flagged_rows"] == 1
    assert check["input"]["flagged"] == 0 and check["input"]["max_ratio"] <= 1 + 1e-6
    out = check["output"]
    assert (out["blown_up"], out["zero"], out["new_rows"]) == (1, 0, 300)
    assert out["share"] == pytest.approx(1 / 300)
    assert out["max_ratio"] == pytest.approx(100, rel=1e-5)
    assert out["worst"] == [{"id": 1007, "token": "t1007", "label": "new",
                             "ratio": pytest.approx(100, rel=1e-5)}]
    assert "1 of the 300 new output rows" in check["message"]
    assert "1007 't1007'" in check["message"] and "max_neighbors" in check["message"]


def test_just_past_ten_times_the_longest_source_row_is_blown_up_and_just_below_is_not():
    src = _source(500, 4)
    rows = _convex(src, 50, 5)
    longest = np.linalg.norm(src, axis=1).max()
    rows[3] = rows[0] * (BLOWN_UP * 1.01)  # rows[0] is the longest source row
    rows[4] = rows[0] * (BLOWN_UP * 0.99)
    check = _check(src, None, rows, None)
    assert check["input"]["blown_up"] == 1 and check["input"]["worst"][0]["id"] == 1003
    assert check["input"]["source_longest_norm"] == pytest.approx(longest)
    assert "output" not in check  # a tied model has one matrix


def test_sides_are_counted_separately():
    src_in, src_out = _source(600, 6), _source(600, 7)
    rows_in, rows_out = _convex(src_in, 200, 8), _convex(src_out, 200, 9)
    rows_in[[10, 20]] *= 500
    rows_out[[30, 40, 50]] *= 500
    rows_out[60] = 0
    check = _check(src_in, src_out, rows_in, rows_out, method="ofa")
    assert (check["input"]["blown_up"], check["input"]["zero"]) == (2, 0)
    assert (check["output"]["blown_up"], check["output"]["zero"]) == (3, 1)
    assert check["flagged_rows"] == 6
    # blown-up rows first, longest first, then the zero rows
    worst = [w["id"] for w in check["output"]["worst"]]
    assert sorted(worst[:3]) == [1030, 1040, 1050] and worst[3] == 1060
    assert "transfer.options.ofa" in check["message"]  # no method-specific advice for OFA


def test_a_zero_row_is_flagged_but_a_copied_source_row_is_not():
    src = _source(500, 10)
    src[5] = 0  # a source row that is zero (an unused token): copying it is no fault
    rows = _convex(src, 100, 11)
    rows[8] = 0
    rows[9] = src[5]
    rows[10] = 1e-6 * rows[1]  # far below 1e-4 of the median row: nothing
    labels = np.array(["weighted"] * 100, dtype=object)
    labels[9] = "copied"
    check = _check(src, None, rows, None, labels)
    side = check["input"]
    assert (side["zero"], side["blown_up"], side["new_rows"]) == (2, 0, 99)
    assert side["flagged_labels"] == {"weighted": 2}
    assert {w["id"] for w in side["worst"]} == {1008, 1010}
    assert check["flagged"]


def _inputs(source: np.ndarray, output: np.ndarray, n_target: int = 1500) -> TransferInputs:
    shared = np.arange(0, n_target, 3)
    return TransferInputs(
        source_input=source,
        source_output=output,
        source_vocab=pd.DataFrame({"id": range(source.shape[0])}),
        target_vocab=pd.DataFrame({"id": range(n_target),
                                   "token": [f"t{i}" for i in range(n_target)]}),
        overlap=pd.DataFrame({"target_id": shared, "source_id": shared * 2,
                              "how": ["exact"] * shared.size}),
        seed=5,
    )


@pytest.mark.parametrize("equal_norms", [False, True])
@pytest.mark.parametrize("method", ["random", "random_copy", "mean", "multivariate"])
def test_healthy_methods_never_flag(method, equal_norms):
    """The project's own random and mean methods (their scale as they draw it) on a source
    with unequal norms and on one whose rows all have the same norm."""
    inputs = _inputs(_source(3000, 12, equal_norms), _source(3000, 13, equal_norms))
    out = run_method(method, inputs)
    check = check_new_rows(inputs.source_input, inputs.source_output, out.input_rows,
                           out.output_rows, out.token_ids, _tokens, out.labels, method)
    assert not check["flagged"], check["message"]
    copied = int((out.labels == "copied").sum())
    assert copied == (0 if method == "random" else 500)
    for side in ("input", "output"):
        assert check[side]["new_rows"] == 1500 - copied
        if method == "mean":  # the mean row is a convex combination of source rows
            assert check[side]["max_ratio"] <= 1
    assert "within the source's own rows' scale" in check["message"]


def test_convex_combinations_never_exceed_the_longest_source_row():
    src = _source(2000, 14)
    check = _check(src, None, _convex(src, 2000, 15), None)
    assert not check["flagged"] and check["input"]["max_ratio"] == pytest.approx(1)


# -- the checkpoint: transfer.json and the job's log -------------------------------------------


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("row_check")
    text = root / "text.txt"
    text.write_text("\n".join(["the cat sat on the mat", "water in the green river"] * 30) + "\n")
    tok = train_tokenizer("bytelevel_bpe", [str(text)], 300, "gpt2")
    ids = {k: v for k, v in special_token_ids(tok).items() if k in ("bos_token_id",
                                                                      "eos_token_id")}
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=H, n_layer=1, n_head=2, n_positions=32,
                                             vocab_size=len(tok), tie_word_embeddings=False,
                                             **ids))
    model.save_pretrained(root / "source")
    tok.save_pretrained(root / "source")
    return {"dir": root / "source", "input": model.get_input_embeddings().weight.detach().numpy(),
            "output": model.get_output_embeddings().weight.detach().numpy(), "n": len(tok)}


def test_transfer_json_records_the_check_and_the_log_warns(untied, tmp_path, caplog):
    rows_in, rows_out = untied["input"].copy(), untied["output"].copy()
    rows_out[11] *= 400
    labels = np.array(["projected"] * untied["n"], dtype=object)
    with caplog.at_level(logging.WARNING, logger="embtransfer"):
        record = write_transferred_checkpoint(
            untied["dir"], untied["dir"], rows_in, rows_out, tmp_path / "ckpt",
            metadata={"method": "salt"}, row_labels=labels)
    written = json.loads((tmp_path / "ckpt" / "transfer.json").read_text())
    assert written["row_check"] == record["row_check"]
    check = written["row_check"]
    assert check["flagged"] and (check["input"]["flagged"], check["output"]["blown_up"]) == (0, 1)
    assert check["output"]["worst"][0]["id"] == 11
    assert check["output"]["flagged_labels"] == {"projected": 1}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [check["message"]] and "salt made absurd rows" in warned[0]


def test_a_healthy_checkpoint_is_not_flagged_and_nothing_is_logged(untied, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="embtransfer"):
        record = write_transferred_checkpoint(
            untied["dir"], untied["dir"], untied["input"], untied["output"],
            tmp_path / "ckpt", metadata={"method": "random"})
    assert not record["row_check"]["flagged"] and record["row_check"]["flagged_rows"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# -- the report --------------------------------------------------------------------------------


def _records(flagged_rows: int) -> list[dict]:
    rng = np.random.default_rng(16)
    n_bytes = rng.integers(30, 200, size=40)
    base = n_bytes * rng.gamma(6.0, 0.5, size=40)
    records = [zeroshot_record("random", base * 1.5, n_bytes),
               zeroshot_record("salt", base * 9.0, n_bytes),
               zeroshot_record("omp", base * 1.0, n_bytes),
               zeroshot_record("source_model", base * 0.9, n_bytes, target=None)]
    for rec in records:
        rec["perplexity"] = math.exp(rec["loss"])
    for rec in records[:3]:
        rec["row_check"] = {"flagged": rec["method"] == "salt" and flagged_rows > 0,
                            "flagged_rows": flagged_rows if rec["method"] == "salt" else 0}
    return records


def test_the_report_shows_a_flagged_checkpoint_with_its_flag_unranked(tmp_path):
    summaries, decided = zeroshot(tmp_path, _records(12), seed=1)
    flags = summaries.set_index("method")["flags"]
    assert flags.to_dict() == {"random": "", "salt": "12 rows flagged", "omp": "",
                               "source_model": ""}  # no check: no claim
    rank = summaries.set_index("method")["rank"]
    assert math.isnan(rank["salt"]) and (rank["omp"], rank["random"]) == (1, 2)
    assert "salt" not in set(decided["method"]) | set(decided["other"])
    table = setting_table(summaries[summaries["target"] == "gpt2_x"], lookup(decided))
    assert "| flags |" in table.splitlines()[0]
    salt_line = next(line for line in table.splitlines() if line.startswith("| salt"))
    assert salt_line.rstrip(" |").endswith("12 rows flagged")
    said = [line for line in anomaly_lines(decided, summaries) if "Rows blown up" in line]
    assert said == ["**Rows blown up or zero** (1 checkpoint: xx gpt2_x salt): the row check "
                    "flags them; their scores say what those rows did."]
    assert said[0] in findings_markdown(decided, summaries)


def test_the_report_is_unchanged_where_no_row_is_flagged(tmp_path):
    summaries, decided = zeroshot(tmp_path, _records(0), seed=1)
    assert not summaries["flags"].astype(bool).any()
    table = setting_table(summaries[summaries["target"] == "gpt2_x"], lookup(decided))
    assert "flags" not in table and "rows flagged" not in table
    assert "Rows blown up" not in findings_markdown(decided, summaries)


@pytest.mark.parametrize("kind", ["float64", "float32", "bfloat16 tensor", "float32 tensor"])
def test_row_norms_equal_a_plain_float64_norm_and_survive_huge_float64_rows(kind):
    """Against numpy's norm of the rows in float64, across block edges; float64 rows whose
    squares overflow still get a finite norm (the scaled path)."""
    from embtransfer.transfer.row_check import _BLOCK_ROWS, row_norms

    rng = np.random.default_rng(3)
    rows = rng.standard_normal((_BLOCK_ROWS + 7, 24)) * rng.uniform(1e-3, 1e3, (1, 24))
    matrix = {"float64": rows, "float32": rows.astype(np.float32),
              "bfloat16 tensor": torch.from_numpy(rows).to(torch.bfloat16),
              "float32 tensor": torch.from_numpy(rows).float()}[kind]
    exact = (np.linalg.norm(matrix.double().numpy(), axis=1) if torch.is_tensor(matrix)
             else np.linalg.norm(np.asarray(matrix, np.float64), axis=1))
    np.testing.assert_allclose(row_norms(matrix), exact, rtol=1e-13)
    if kind == "float64":
        huge = np.full((2, 4), 1e200)
        np.testing.assert_allclose(row_norms(huge), [2e200, 2e200], rtol=1e-15)
