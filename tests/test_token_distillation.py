"""Token Distillation (embtransfer.transfer.token_distillation) on tiny random models.

A byte-level BPE tokenizer is trained offline on generated lines of made-up words (300
ids: most words split into several pieces), and GPT-2 and Llama models of one layer and
width 16 are built from configs with seeded random weights.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from embtransfer.transfer.token_distillation import (
    CAPPED,
    DISTILLED,
    TOO_FEW_SNIPPETS,
    DistillOptions,
    Snippet,
    Snippets,
    distill,
    find_snippets,
    iter_occurrences,
    subtoken_means,
)

torch.set_num_threads(1)

SYLLABLES = ["ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "pe", "du"]
# The new tokens' surface strings (4 syllables: no made-up word has more than 3) and how
# many lines hold each (once per line)
NEW = {" kalomiru": 12, " tesanovi": 8, " pedulomi": 5, " vimikasa": 2}


def words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """40 lines of 20-40 words; the new words on the first lines that hold them, and a few
    lines short enough that their windows are shorter than the configured length."""
    rng = random.Random(0)
    lines = [" ".join(words(rng, rng.randint(20, 40))) for _ in range(40)]
    for word, n in NEW.items():
        for k in range(n):
            at = rng.randint(1, 10)
            ws = lines[k].split(" ")
            lines[k] = " ".join(ws[:at] + [word.strip()] + ws[at:])
    lines += ["tesanovi ka", "lo kalomiru", "kalomiru"]
    return lines


def train_tokenizer(lines: list[str], prefix_space: bool = False) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """Trained on other lines of the same words, without the new ones."""
    rng = random.Random(9)
    return train_tokenizer([" ".join(words(rng, 30)) for _ in range(40)])


def make_model(kind: str, vocab: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if kind == "gpt2":
        config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=vocab, n_positions=64,
                            bos_token_id=0, eos_token_id=0)
        return GPT2LMHeadModel(config)
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=vocab,
                         max_position_embeddings=64, tie_word_embeddings=False,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(config)


OPTIONS = DistillOptions(snippets_per_token=6, snippet_length=12, min_snippets=3,
                         learning_rate=1e-2, batch_size=2, epochs=2, seed=1)


# --- the snippet search ------------------------------------------------------------------------


def brute_force(lines: list[str], strings: list[str]) -> set[tuple[int, int, int]]:
    found = set()
    for i, s in enumerate(strings):
        for n, line in enumerate(lines if s else []):  # an empty string has no occurrences
            at = line.find(s)
            while at >= 0:
                found.add((i, n, at))
                at = line.find(s, at + 1)
    return found


def test_search_finds_every_occurrence_and_windows_hold_them(tokenizer):
    """On random text over a small alphabet (overlapping matches, one string inside
    another, lines long enough to cut): exactly the str.find loop's occurrences; every
    window holds its pieces where the text has them, between the encodings of the text
    before and after, and has the configured length."""
    rng = random.Random(3)
    lines = ["".join(rng.choices("abk ", k=rng.randint(0, 400))) for _ in range(30)]
    strings = ["ab", "aba", " b", "bab", "kk", "ab", "", "zzz"]
    expected = brute_force(lines, strings)
    found = [(i, n, c) for i, n, c, _ in iter_occurrences(lines, strings)]
    assert len(found) == len(set(found))
    assert set(found) == expected
    options = DistillOptions(snippets_per_token=10**6, snippet_length=8, min_snippets=1)
    snippets = find_snippets(iter(lines), strings, tokenizer, options)
    assert snippets.counts == [sum(1 for f in expected if f[0] == i) for i in range(len(strings))]
    assert snippets.counts[2] > 0 and snippets.counts[6:] == [0, 0]
    for i, s in enumerate(strings):
        pieces = snippets.pieces[i]
        assert pieces == (tokenizer.encode(s, add_special_tokens=False) if s else [])
        assert {(i, w.line, w.char) for w in snippets.windows[i]} == {
            f for f in expected if f[0] == i}
        for w in snippets.windows[i]:
            line = lines[w.line]
            assert line[w.char: w.char + len(s)] == s
            left = tokenizer.encode(line[: w.char], add_special_tokens=False)
            right = tokenizer.encode(line[w.char + len(s):], add_special_tokens=False)
            assert len(w.ids) == min(8, len(left) + len(pieces) + len(right))
            assert list(w.ids[w.start: w.start + len(pieces)]) == pieces
            assert list(w.ids[: w.start]) == left[len(left) - w.start:]
            end = w.start + len(pieces)
            assert list(w.ids[end:]) == right[: len(w.ids) - end]
    lengths = [len(w.ids) for ws in snippets.windows for w in ws]
    assert lengths.count(8) > 0.9 * len(lengths)  # most lines are long enough


def test_cap_per_token_and_seeded_sample(tokenizer):
    rng = random.Random(4)
    lines = [" ".join(words(rng, 10)) for _ in range(100)]
    strings = [" ka", " mi"]
    counts = [len([f for f in brute_force(lines, strings) if f[0] == i]) for i in range(2)]
    assert min(counts) > 50
    options = DistillOptions(snippets_per_token=5, snippet_length=10, seed=7)
    a = find_snippets(lines, strings, tokenizer, options)
    b = find_snippets(lines, strings, tokenizer, options)
    c = find_snippets(lines, strings, tokenizer, DistillOptions(
        snippets_per_token=5, snippet_length=10, seed=8))
    assert a.counts == c.counts == counts
    assert [len(w) for w in a.windows] == [5, 5]
    assert a == b
    assert a.windows != c.windows
    # a token's sample does not depend on the other tokens searched for
    assert find_snippets(lines, strings[:1], tokenizer, options).windows[0] == a.windows[0]


def test_short_line_gives_the_whole_line(tokenizer):
    snippets = find_snippets(["lo kalomiru te"], [" kalomiru"], tokenizer,
                             DistillOptions(snippets_per_token=3, snippet_length=50))
    (w,) = snippets.windows[0]
    assert list(w.ids) == tokenizer.encode("lo kalomiru te", add_special_tokens=False)
    assert w.start == len(tokenizer.encode("lo", add_special_tokens=False))


def test_a_tokenizer_that_adds_a_prefix_space_is_refused(corpus):
    with pytest.raises(ValueError, match="prefix space"):
        find_snippets(corpus, [" kalomiru"], train_tokenizer(corpus, prefix_space=True),
                      OPTIONS)


def test_options_are_checked():
    with pytest.raises(ValueError, match="min_snippets"):
        DistillOptions(snippets_per_token=5, min_snippets=6)
    with pytest.raises(ValueError, match="batch_size"):
        DistillOptions(batch_size=0)
    assert DistillOptions().required_snippets == 100


# --- the distillation --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def found(corpus, tokenizer) -> Snippets:
    snippets = find_snippets(corpus, list(NEW), tokenizer, OPTIONS)
    assert all(len(p) >= 2 for p in snippets.pieces)  # every new word is several pieces
    return snippets


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_only_the_new_rows_change_and_the_model_is_untouched(kind, tokenizer, found):
    model = make_model(kind, len(tokenizer))
    model.train()
    model.lm_head.weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {k: p.requires_grad for k, p in model.named_parameters()}
    rows, report = distill(model, found.pieces, found, OPTIONS)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k
    assert {k: p.requires_grad for k, p in model.named_parameters()} == flags
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    means = subtoken_means(model.get_input_embeddings().weight, found.pieces)
    assert rows.dtype == np.float32 and rows.shape == means.shape
    assert report["how"] == [DISTILLED, DISTILLED, DISTILLED, TOO_FEW_SNIPPETS]
    for i, how in enumerate(report["how"]):
        moved = np.abs(rows[i] - means[i]).max()
        assert (moved > 1e-3) if how == DISTILLED else (moved == 0)
    assert report["snippets"] == 6 + 6 + 5
    assert report["steps"] == 2 * 9  # two passes of ceil(17 / 2) batches
    assert len(report["pass_losses"]) == 2


def test_too_few_snippets_keeps_the_subtoken_mean(tokenizer, found):
    model = make_model("gpt2", len(tokenizer))
    rows, report = distill(model, found.pieces, found, OPTIONS)
    weight = model.get_input_embeddings().weight.detach().numpy()
    assert found.counts[3] == 2 < OPTIONS.required_snippets
    assert report[TOO_FEW_SNIPPETS] == 1 and report["how"][3] == TOO_FEW_SNIPPETS
    np.testing.assert_array_equal(rows[3], subtoken_means(weight, found.pieces[3:])[0])
    np.testing.assert_allclose(rows[3], weight[found.pieces[3]].mean(axis=0), rtol=0, atol=1e-7)


def test_max_tokens_keeps_the_most_frequent(tokenizer, found):
    model = make_model("gpt2", len(tokenizer))
    options = DistillOptions(**{**OPTIONS.__dict__, "max_tokens": 2})
    rows, report = distill(model, found.pieces, found, options)
    means = subtoken_means(model.get_input_embeddings().weight, found.pieces)
    assert found.counts[:3] == sorted(found.counts[:3], reverse=True)
    assert report["how"] == [DISTILLED, DISTILLED, CAPPED, TOO_FEW_SNIPPETS]
    assert (report[DISTILLED], report[CAPPED], report[TOO_FEW_SNIPPETS]) == (2, 1, 1)
    np.testing.assert_array_equal(rows[2:], means[2:])
    assert np.abs(rows[:2] - means[:2]).max() > 1e-3
    # the cap takes the counts, not the order of the tokens
    flipped = Snippets(pieces=found.pieces[::-1], windows=found.windows[::-1],
                       counts=found.counts[::-1], bos_id=found.bos_id)
    rows2, report2 = distill(model, flipped.pieces, flipped, options)
    assert report2["how"] == [TOO_FEW_SNIPPETS, CAPPED, DISTILLED, DISTILLED]


def test_same_seed_same_rows(tokenizer, found):
    model = make_model("llama", len(tokenizer))
    a, _ = distill(model, found.pieces, found, OPTIONS)
    b, _ = distill(model, found.pieces, found, OPTIONS)
    c, _ = distill(model, found.pieces, found, DistillOptions(**{**OPTIONS.__dict__, "seed": 2}))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[:3], c[:3])  # another batch order


def test_pieces_must_be_in_the_windows(tokenizer, found):
    model = make_model("gpt2", len(tokenizer))
    wrong = [list(p) for p in found.pieces]
    wrong[0] = wrong[0][::-1]
    with pytest.raises(ValueError, match="lacks its pieces"):
        distill(model, wrong, found, OPTIONS)


def hand_written(model: torch.nn.Module, bos: int, windows: list[Snippet], pieces: list[int],
                 lr: float, steps: int) -> np.ndarray:
    """AdamW on one row, full batch, with the loss spelled out snippet by snippet: the
    frozen LM's last hidden states (``output_hidden_states``), teacher on the pieces,
    student on ``inputs_embeds`` with the row in their place; squared error at positions
    before the token (with themselves), at the token (with the last piece) and after it
    (shifted by k - 1), averaged over every aligned position and unit."""
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    weight = model.get_input_embeddings().weight
    row = torch.nn.Parameter(weight[pieces].mean(0).clone())
    optimizer = torch.optim.AdamW([row], lr=lr, weight_decay=0.0)
    k = len(pieces)
    teachers = []
    for w in windows:
        ids = torch.tensor([bos, *w.ids])
        with torch.no_grad():
            teachers.append(model(ids[None], output_hidden_states=True).hidden_states[-1][0])
    for _ in range(steps):
        squared, positions = torch.zeros(()), 0
        for w, teacher in zip(windows, teachers, strict=True):
            ids = torch.tensor([bos, *w.ids])
            p = 1 + w.start
            embeds = torch.cat([weight[ids[:p]], row[None], weight[ids[p + k:]]])
            student = model(inputs_embeds=embeds[None], output_hidden_states=True)
            student = student.hidden_states[-1][0]
            squared = squared + ((student[:p] - teacher[:p]) ** 2).sum()
            squared = squared + ((student[p] - teacher[p + k - 1]) ** 2).sum()
            squared = squared + ((student[p + 1:] - teacher[p + k:]) ** 2).sum()
            positions += student.shape[0]
        loss = squared / (positions * row.shape[0])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return row.detach().numpy()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_equals_a_direct_minimisation_of_the_loss(kind, tokenizer, found):
    """One token, all its snippets in one batch (windows of unequal length: padding),
    15 steps: the same row as the hand-written loop, within 1e-6 (float32 rounding of
    batched vs one-by-one forward passes, through 15 Adam steps). The loss falls."""
    token = 0
    windows = found.windows[token]
    assert len({len(w.ids) for w in windows}) > 1
    one = Snippets(pieces=[found.pieces[token]], windows=[windows],
                   counts=[found.counts[token]], bos_id=found.bos_id)
    options = DistillOptions(snippets_per_token=6, snippet_length=12, min_snippets=1,
                             learning_rate=1e-2, batch_size=len(windows), steps=15)
    rows, report = distill(make_model(kind, len(tokenizer)), one.pieces, one, options)
    expected = hand_written(make_model(kind, len(tokenizer)), found.bos_id, windows,
                            found.pieces[token], options.learning_rate, 15)
    start = subtoken_means(make_model(kind, len(tokenizer)).get_input_embeddings().weight,
                           one.pieces)[0]
    assert np.abs(rows[0] - start).max() > 0.05  # it moved well beyond the tolerance
    np.testing.assert_allclose(rows[0], expected, rtol=0, atol=1e-6)
    assert report["steps"] == 15 and len(report["pass_losses"]) == 15
    assert report["pass_losses"][-1] < report["pass_losses"][0]


@pytest.mark.parametrize("how", ["bfloat16 model", "autocast"])
def test_low_precision_trains_float32_rows(how, tokenizer, found):
    """A bfloat16 model, or bfloat16 autocast over a float32 one (on the CPU here): the rows
    come back float32 and trained, the model's weights untouched."""
    model = make_model("llama", len(tokenizer))
    if how == "bfloat16 model":
        model = model.to(torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    options = DistillOptions(**{**OPTIONS.__dict__, "mixed_precision": how == "autocast"})
    rows, report = distill(model, found.pieces, found, options)
    assert rows.dtype == np.float32 and np.isfinite(rows).all()
    means = subtoken_means(model.get_input_embeddings().weight, found.pieces)
    assert np.abs(rows[:3] - means[:3]).max() > 1e-3
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


# --- the transfer method (extended vocabulary) --------------------------------------------------


def test_the_method_distils_the_new_tokens_of_an_extended_vocabulary(corpus, tokenizer,
                                                                     tmp_path):
    """``token_distillation`` in run_method: shared tokens copied, the frequent new tokens
    distilled, every other new token exactly Subword-mean's row, the untied head
    Subword-mean's; the source checkpoint unchanged; the replace mode refused."""
    from embtransfer.transfer.method_runner import run_method
    from embtransfer.transfer.methods.base import TransferInputs
    from embtransfer.vocab.canonical import vocab_table
    from embtransfer.vocab.overlap import compute_overlap

    source_dir = tmp_path / "source"
    model = make_model("llama", len(tokenizer))
    model.save_pretrained(source_dir)
    tokenizer.save_pretrained(source_dir)
    text = tmp_path / "train.txt"
    text.write_text("\n".join(corpus) + "\n")
    target = train_tokenizer(corpus)
    source_vocab, target_vocab = vocab_table(tokenizer), vocab_table(target)
    weight = model.model.embed_tokens.weight.detach().numpy().copy()
    head = model.lm_head.weight.detach().numpy().copy()

    def inputs() -> TransferInputs:
        return TransferInputs(
            source_input=weight, source_output=head, source_vocab=source_vocab,
            target_vocab=target_vocab, overlap=compute_overlap(source_vocab, target_vocab),
            seed=3, source_tokenizer=tokenizer, source_dir=str(source_dir), corpus=str(text))

    options = {"snippets_per_token": 6, "snippet_length": 12, "min_snippets": 3,
               "learning_rate": 1e-2, "batch_size": 2, "epochs": 2, "max_tokens": 5}
    result = run_method("token_distillation", inputs(), options, mode="extend")
    baseline = run_method("subword_mean", inputs(), {}, mode="extend")
    np.testing.assert_array_equal(result.token_ids, baseline.token_ids)
    distilled = result.labels == "distilled"
    assert distilled.sum() == 5 < distilled.size
    assert set(result.labels[~distilled]) <= {"subword_mean", "random"}
    np.testing.assert_array_equal(result.input_rows[~distilled],
                                  baseline.input_rows[~distilled])
    assert not np.allclose(result.input_rows[distilled], baseline.input_rows[distilled])
    np.testing.assert_array_equal(result.output_rows, baseline.output_rows)
    stats = result.report["stats"]["input"]["distillation"]
    assert stats["distilled"] == 5 and stats["capped"] > 0
    after = type(model).from_pretrained(source_dir)
    np.testing.assert_array_equal(after.model.embed_tokens.weight.detach().numpy(), weight)
    with pytest.raises(ValueError, match="vocab_mode extend"):
        run_method("token_distillation", inputs(), options, mode="replace")


@pytest.mark.parametrize("trust", [False, True])
def test_the_source_is_loaded_as_the_run_allows(trust, monkeypatch):
    """The source checkpoint is read with the run's ``trust_remote_code`` and
    ``allow_pickle`` (load_inputs puts them on the inputs: tests/test_seeds_workflow.py),
    not with fixed values."""
    from embtransfer.transfer.methods import distillation

    seen = {}

    class Stop(Exception):
        pass

    def fake_load(source_dir, trust_remote_code, allow_pickle=False):
        seen.update(trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
        raise Stop

    class Inputs:
        source_dir, corpus, source_loading = "source", "text", {
            "trust_remote_code": trust, "allow_pickle": trust}

    monkeypatch.setattr(distillation, "load_source_model", fake_load)
    with pytest.raises(Stop):
        distillation.load_distilled_model(Inputs())
    assert seen == {"trust_remote_code": trust, "allow_pickle": trust}
