"""TokAlign (embtransfer.transfer.methods.tokalign) against a direct reimplementation of its
reference's logic (ZNLP/TokAlign, src/cal_trans_matrix.py: dictionaries of GloVe vectors,
relative representations, the argmax loop) on random vectors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from embtransfer.transfer.method_runner import run_method
from embtransfer.transfer.methods.base import TransferInputs
from embtransfer.transfer.methods.tokalign import pick_pivots, token_map

V_S, V_T, H, D = 60, 45, 6, 8


def _normalize(x):
    return x / np.linalg.norm(x)


def reference_map(target_glove: dict, source_glove: dict, gold: dict, pivot_targets: list,
                  vocab_size: int) -> dict:
    """The reference's main loop, as written there: dictionaries keyed by id strings, the
    relative representations of every token with a vector, sim = rep1 @ rep2.T, the
    argmax of a target token's row (random draws aside: None here)."""
    ids1, ids2 = list(target_glove), list(source_glove)
    p1 = np.stack([_normalize(target_glove[p]) for p in pivot_targets])
    p2 = np.stack([_normalize(source_glove[str(gold[p])]) for p in pivot_targets])
    rep1 = np.stack([_normalize(target_glove[k]) for k in ids1]) @ p1.T
    rep2 = np.stack([_normalize(source_glove[k]) for k in ids2]) @ p2.T
    sim = rep1 @ rep2.T
    out = {}
    for tid in map(str, range(vocab_size)):
        if tid in gold:
            out[tid] = gold[tid]
        elif tid not in ids1:
            out[tid] = None
        else:
            out[tid] = int(ids2[int(np.argmax(sim[ids1.index(tid)]))])
    return out


def make_inputs(seed: int, hidden=()) -> TransferInputs:
    rng = np.random.default_rng(seed)
    source_missing = rng.random(V_S) < 0.15
    target_missing = rng.random(V_T) < 0.15
    source_vectors = rng.standard_normal((V_S, D)).astype(np.float32)
    target_vectors = rng.standard_normal((V_T, D)).astype(np.float32)
    source_vectors[source_missing] = 0
    target_vectors[target_missing] = 0
    shared_t = np.sort(rng.choice(V_T, 15, replace=False))
    shared_s = rng.choice([s for s in range(V_S) if s not in hidden], 15, replace=False)
    return TransferInputs(
        source_input=rng.standard_normal((V_S, H)).astype(np.float32),
        source_output=rng.standard_normal((V_S, H)).astype(np.float32),
        source_vocab=pd.DataFrame({"id": np.arange(V_S)}),
        target_vocab=pd.DataFrame({"id": np.arange(V_T)}),
        overlap=pd.DataFrame({"target_id": shared_t, "source_id": shared_s, "how": "exact"}),
        seed=seed, hidden=np.asarray(sorted(hidden), np.int64),
        glove={"source": (source_vectors, source_missing),
               "target": (target_vectors, target_missing)})


@pytest.mark.parametrize("seed", range(5))
def test_the_map_is_the_references_argmax_over_relative_representations(seed):
    inputs = make_inputs(seed)
    params = {"pivots": 6}
    mapped, how, pivots = token_map(inputs, params)
    (source, source_missing), (target, target_missing) = inputs.glove["source"], \
        inputs.glove["target"]
    shared_t, shared_s = inputs.shared()
    pivot_t, _ = pick_pivots(shared_t, shared_s, target_missing, source_missing, 6,
                             np.random.default_rng([seed, 0x70CA]))
    assert pivots == pivot_t.size == 6
    gold = {str(t): int(s) for t, s in zip(shared_t, shared_s, strict=True)}
    want = reference_map({str(i): target[i] for i in range(V_T) if not target_missing[i]},
                         {str(i): source[i] for i in range(V_S) if not source_missing[i]},
                         gold, [str(t) for t in pivot_t], V_T)
    for tid in range(V_T):
        if want[str(tid)] is None:  # no GloVe vector: a random source token
            assert how[tid] == "random_token" and 0 <= mapped[tid] < V_S
        else:
            assert mapped[tid] == want[str(tid)], tid
    assert set(how[shared_t]) == {"copied"}
    assert (how == "aligned").sum() == sum(
        1 for t in range(V_T) if str(t) not in gold and not target_missing[t])


def test_pivots_are_shared_tokens_with_a_vector_on_both_sides_in_a_seeded_order():
    gold_t, gold_s = np.arange(10), np.arange(10) + 100
    target_missing = np.zeros(20, bool)
    target_missing[[2, 5]] = True
    source_missing = np.zeros(120, bool)
    source_missing[107] = True
    t, s = pick_pivots(gold_t, gold_s, target_missing, source_missing, 4,
                       np.random.default_rng(0))
    assert t.size == 4 and not set(t.tolist()) & {2, 5, 7}
    np.testing.assert_array_equal(s, t + 100)
    again, _ = pick_pivots(gold_t, gold_s, target_missing, source_missing, 4,
                           np.random.default_rng(0))
    np.testing.assert_array_equal(t, again)


def test_rows_are_the_mapped_source_rows_on_both_sides_and_never_a_held_out_one():
    hidden = (3, 4, 5, 6, 7)
    inputs = make_inputs(7, hidden)
    out = run_method("tokalign", inputs, {"pivots": 5}, "replace")
    mapped, _, _ = token_map(make_inputs(7, hidden), {"pivots": 5})
    np.testing.assert_array_equal(out.input_rows, inputs.source_input[mapped])
    np.testing.assert_array_equal(out.output_rows, inputs.source_output[mapped])
    assert not set(mapped.tolist()) & set(hidden)


def test_without_a_pivot_the_method_says_what_to_do():
    inputs = make_inputs(1)
    source, missing = inputs.glove["source"]
    inputs.glove["source"] = (source, np.ones_like(missing))
    with pytest.raises(ValueError, match="pivot"):
        run_method("tokalign", inputs, {}, "replace")
