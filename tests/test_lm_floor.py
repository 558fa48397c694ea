"""The count-model floor of a pretrained LM (embtransfer.evaluation.lm_floor): add-one
unigram and interpolated Kneser–Ney bigram, against hand values and a brute force."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from embtransfer.evaluation.lm_floor import CountModels, floor_bits_per_byte

REAL = Path(__file__).parent / "fixtures" / "real"


def brute_kn(docs: list[list[int]], V: int, sep: int) -> tuple[dict, float, float]:
    """P(w|v) for every context v (and one never seen) and word w, from the definitions."""
    pairs: Counter = Counter()
    for ids in docs:
        seq = [sep, *ids, sep]
        pairs.update(zip(seq[:-1], seq[1:], strict=True))

    def ney(counts: list[int]) -> float:
        n1, n2 = counts.count(1), counts.count(2)
        return min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 + n2 else 0.95

    d2 = ney(list(pairs.values()))
    cont = {w: len({v for v, x in pairs if x == w}) for w in range(V)}
    d1 = ney([c for c in cont.values() if c])
    types, seen = len(pairs), sum(1 for c in cont.values() if c)
    pc = {w: max(cont[w] - d1, 0) / types + d1 * seen / types / V for w in range(V)}
    table = {}
    for v in range(V):
        c_v = sum(n for (a, _), n in pairs.items() if a == v)
        follow = len([1 for (a, _) in pairs if a == v])
        for w in range(V):
            if c_v == 0:
                table[v, w] = pc[w]
            else:
                table[v, w] = max(pairs[v, w] - d2, 0) / c_v + d2 * follow / c_v * pc[w]
    return table, d1, d2


def test_hand_computed_values() -> None:
    # stream: 0 1 2 0 1 3 0 2 0 (0 the separator); V = 5, id 4 never seen
    m = CountModels([[1, 2], [1, 3], [2]], vocab_size=5, sep=0)
    assert m.unigram(np.array([4, 1, 0])) == pytest.approx([1 / 13, 3 / 13, 4 / 13])
    assert (m.d1, m.d2) == pytest.approx((1 / 3, 1 / 2))
    got = m.bigram(np.array([0, 0, 4, 4]), np.array([1, 4, 1, 4]))
    assert got == pytest.approx([0.5 + 7 / 135, 2 / 135, 7 / 45, 2 / 45])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kneser_ney_equals_the_brute_force_and_sums_to_one(seed: int) -> None:
    rng = random.Random(seed)
    V, sep = 12, 0
    docs = [[rng.choice(range(1, 9)) for _ in range(rng.randint(1, 7))] for _ in range(15)]
    m = CountModels(docs, V, sep)
    table, d1, d2 = brute_kn(docs, V, sep)
    assert (m.d1, m.d2) == pytest.approx((d1, d2))
    contexts, words = zip(*table, strict=True)
    got = m.bigram(np.array(contexts), np.array(words))
    assert got == pytest.approx([table[k] for k in table])
    grid = got.reshape(V, V)
    assert grid.sum(axis=1) == pytest.approx(np.ones(V))  # ids 9..11 never seen: still mass
    assert (grid > 0).all()
    assert m.unigram(np.arange(V)).sum() == pytest.approx(1.0)


def test_bits_per_byte_sum_the_scored_tokens(tmp_path: Path) -> None:
    """On real text with a trained byte-level BPE: bits per byte is the documents' summed
    NLL (separators unscored, a document's first token after the separator) over their
    bytes, and the bigram beats the unigram on held-out English."""
    from embtransfer.models.tokenizer_training import train_tokenizer

    lines = (REAL / "en.txt").read_text(encoding="utf-8").splitlines()
    train, held = lines[:250], lines[250:]
    tok = train_tokenizer("bytelevel_bpe", [str(REAL / "en.txt")], 600, "llama", split_digits=True)
    out = floor_bits_per_byte(tok, train, held)
    ids = tok(train, add_special_tokens=False)["input_ids"]
    m = CountModels(ids, len(tok), tok.eos_token_id)
    nll_uni = nll_bi = 0.0
    for doc in tok(held, add_special_tokens=False)["input_ids"]:
        prev = tok.eos_token_id
        for w in doc:
            nll_uni -= math.log(m.unigram(np.array([w]))[0])
            nll_bi -= math.log(m.bigram(np.array([prev]), np.array([w]))[0])
            prev = w
    n_bytes = sum(len(x.encode("utf-8")) for x in held)
    assert out["bytes"] == n_bytes
    assert out["unigram_bits_per_byte"] == pytest.approx(nll_uni / math.log(2) / n_bytes)
    assert out["kn_bigram_bits_per_byte"] == pytest.approx(nll_bi / math.log(2) / n_bytes)
    assert sum(out["document_nll_nats"]["kn_bigram"]) == pytest.approx(nll_bi)
    assert out["kn_bigram_bits_per_byte"] < out["unigram_bits_per_byte"]


def test_floor_record_sets_a_model_beside_its_count_models(tmp_path: Path) -> None:
    """The record's model figure is the zero-shot evaluation's, the floor's are
    floor_bits_per_byte's on the same held-out documents, and clears_floor is the rule
    (25 % below the unigram and below the bigram); an untrained model does not clear it."""
    from embtransfer.evaluation.lm_floor import FLOOR_MARGIN, floor_record
    from embtransfer.evaluation.zeroshot import evaluate_text
    from embtransfer.models.pretrain import build_model, save_checkpoint
    from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer

    lines = (REAL / "en.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:250]) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(lines[250:]) + "\n", encoding="utf-8")
    tok = train_tokenizer("bytelevel_bpe", [str(tmp_path / "train.txt")], 500, "llama")
    model = build_model("llama", len(tok), {"hidden_size": 32}, None, special_token_ids(tok), 0)
    save_checkpoint(model, tok, tmp_path / "m", {})
    options = {"max_length": 64, "batch_size": 4, "max_lines": 30}
    rec = floor_record(str(tmp_path / "m"), str(tmp_path / "train.txt"),
                       str(tmp_path / "valid.txt"), options, "cpu")
    direct = evaluate_text(tmp_path / "m", tmp_path / "valid.txt", max_length=64,
                           batch_size=4, device="cpu", max_lines=30)
    floor = floor_bits_per_byte(tok, lines[:250], [x for x in lines[250:] if x.strip()][:30])
    assert rec["model_bits_per_byte"] == pytest.approx(direct["bits_per_byte"])
    assert rec["unigram_bits_per_byte"] == pytest.approx(floor["unigram_bits_per_byte"])
    assert rec["kn_bigram_bits_per_byte"] == pytest.approx(floor["kn_bigram_bits_per_byte"])
    assert rec["documents"] == 30 and rec["bytes"] == floor["bytes"]
    assert rec["clears_floor"] is (
        rec["model_bits_per_byte"] <= (1 - FLOOR_MARGIN) * rec["unigram_bits_per_byte"]
        and rec["model_bits_per_byte"] < rec["kn_bigram_bits_per_byte"]
    )
    assert rec["clears_floor"] is False  # random weights: about log2(V) bits a token
