"""Token Distillation: input rows for new tokens distilled from the source model itself.

Dobler, Elliott and de Melo, "Token Distillation: Attention-aware Input Embeddings for New
Tokens" (ICLR 2026; reference code konstantinjdobler/token-distillation, MIT). For an
*extended* vocabulary (the source model keeps its vocabulary and gains new tokens) a new
token's meaning is often not in any single source row: the source model builds it from the
token's pieces in its first layers. So the new row is trained to make the frozen model
produce, after the new token, the hidden states it produces after the pieces:

1. :func:`find_snippets` finds each new token's surface string in raw text lines with
   Aho-Corasick (all occurrences, overlapping ones included, counted per token) and keeps
   a seeded sample of up to ``snippets_per_token`` of them as windows of ``snippet_length``
   source tokens around the occurrence, the token's pieces at a known place.
2. :func:`distill` starts every new row at the mean of its pieces' input rows
   (:func:`subtoken_means`) and trains the rows of the most frequent tokens with at least
   ``min_snippets`` snippets. Each snippet is read twice by the frozen model: by the
   *teacher* with the pieces, and by the *student* with the one new token in their place,
   its row a separate trainable tensor inserted through ``inputs_embeds`` (the model's
   parameters are never written). The loss is the mean squared error between the last
   layer's hidden states at aligned positions: a position before the token with itself, the
   token with the last piece, and a position after it with the teacher's position shifted
   by ``pieces - 1``. AdamW (no weight decay, constant learning rate) updates the rows.

Where this differs from the reference, and why:

* The search runs over raw text, not over the tokenised corpus: an occurrence is any match
  of the surface string (also inside a longer word), and its window is the text before it,
  the pieces and the text after it, each encoded on its own, so the pieces always sit where
  the occurrence is. The source tokenizer must encode text so that pieces concatenate
  (byte-level BPE without an added prefix space, as the ``extend`` mode requires);
  :func:`find_snippets` checks this. Windows stay inside their line; a line too short for a
  full window gives the whole line (the reference drops short snippets: a corpus of short
  sentence lines would lose most of them). Batches are right-padded and the padding is
  left out of the loss.
* The student has one new token per snippet, the occurrence the snippet was found at (the
  reference merges every new token it finds in a snippet): a token's loss depends on its
  own row only.
* The model runs in eval mode (the reference trains in train mode: dropout, where the
  model has any, in teacher and student alike) and on whatever device it is on, in its own
  dtype; ``mixed_precision`` turns on bfloat16 autocast on that device (the reference
  always autocasts on CUDA). Hidden states come from the base model, so the LM head's
  logits over the whole vocabulary are never computed.
* A partial last batch is kept (the reference drops it).

Output rows: distillation trains input rows only. For an untied LM head this project sets
the new output rows to the subtoken mean of the output matrix,
``subtoken_means(model.get_output_embeddings().weight, new_pieces)``; the reference's
option of training them with next-token cross-entropy is left out, as it needs the
logits over the whole extended vocabulary at every position.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ahocorasick
import numpy as np
import torch
import torch.nn.functional as F

from embtransfer.models.hf import encode_texts

#: How a new token's row was made (``report["how"]``).
DISTILLED, TOO_FEW_SNIPPETS, CAPPED = "distilled", "too_few_snippets", "capped"


@dataclass(frozen=True)
class DistillOptions:
    """Settings of one distillation; the defaults are the reference's where it has one."""

    snippets_per_token: int = 100  # the reference package's default; its paper code: 25
    snippet_length: int = 50  # source tokens per window (the reference adds BOS, as here)
    # constant, as in the reference package (its paper code: 5e-5 over 3 epochs, with
    # linear warm-up and decay)
    learning_rate: float = 1e-4
    epochs: int = 1  # passes over all snippets, each in a new order
    steps: int | None = None  # if set: exactly this many optimizer steps, passes repeated
    batch_size: int = 1  # the reference's default (its README's example: 16)
    max_tokens: int | None = None  # distil at most this many tokens (not in the reference)
    # fewer snippets than this: the token keeps its subtoken mean. None: snippets_per_token,
    # the reference's rule (it skips a token without a full set of snippets)
    min_snippets: int | None = None
    seed: int = 42
    mixed_precision: bool = False  # the reference: bfloat16 autocast on CUDA, always on

    def __post_init__(self) -> None:
        positive = {"snippets_per_token": self.snippets_per_token,
                    "snippet_length": self.snippet_length, "epochs": self.epochs,
                    "batch_size": self.batch_size}
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be at least 0, got {self.steps}")
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"max_tokens must be at least 0, got {self.max_tokens}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 1 <= self.required_snippets <= self.snippets_per_token:
            raise ValueError(
                f"min_snippets must lie in 1..snippets_per_token ({self.snippets_per_token}),"
                f" got {self.min_snippets}")

    @property
    def required_snippets(self) -> int:
        """The fewest snippets a token needs to be distilled."""
        return self.snippets_per_token if self.min_snippets is None else self.min_snippets


@dataclass(frozen=True)
class Snippet:
    """A window of source-token ids holding one occurrence of a new token."""

    ids: tuple[int, ...]  # the window (no BOS)
    start: int  # index in ``ids`` of the first of the token's pieces
    line: int  # where it was found: the line's index and the occurrence's first character
    char: int


@dataclass(frozen=True)
class Snippets:
    """What :func:`find_snippets` found, per new token (in the order of its strings)."""

    pieces: list[list[int]]  # the token's source pieces
    windows: list[list[Snippet]]  # its sampled snippets, in corpus order
    counts: list[int]  # its occurrences in the corpus (overlapping ones included)
    bos_id: int | None  # prepended to every window by :func:`distill`, as the reference does


# --- the snippet search ------------------------------------------------------------------------


def iter_occurrences(
    lines: Iterable[str], token_strings: Sequence[str]
) -> Iterator[tuple[int, int, int, str]]:
    """(token index, line index, first character, line) of every occurrence of every
    non-empty token string, overlapping ones included, line by line.

    One Aho-Corasick pass per line finds all strings at once; a string given twice is
    reported for each of its indices.
    """
    automaton = ahocorasick.Automaton()
    by_string: dict[str, list[int]] = {}
    for i, s in enumerate(token_strings):
        if s:
            by_string.setdefault(s, []).append(i)
    if not by_string:
        return
    for s, indices in by_string.items():
        automaton.add_word(s, (len(s), indices))
    automaton.make_automaton()
    for line_no, line in enumerate(lines):
        for end, (length, indices) in automaton.iter(line):
            for i in indices:
                yield i, line_no, end - length + 1, line


def _check_concatenates(tokenizer: Any) -> None:
    """Refuse a tokenizer whose encoding of a text is not that of its parts, or that adds
    a space before a text: the windows are encoded in three parts (before, pieces, after)."""
    whole, first, second, bare = encode_texts(tokenizer, ["ab cd", "ab", " cd", "cd"])
    if whole != first + second or bare == second:
        raise ValueError(
            "the source tokenizer encodes 'ab cd' unlike 'ab' then ' cd', or 'cd' like ' cd'"
            " (an added prefix space?): token distillation needs a byte-level BPE source "
            "tokenizer that encodes a text part by part")


def _bos_id(tokenizer: Any) -> int | None:
    for name in ("bos_token_id", "cls_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return None


def find_snippets(
    lines: Iterable[str],
    token_strings: Sequence[str],
    source_tokenizer: Any,
    options: DistillOptions,
    encode: Callable[[Any, list[str]], list[list[int]]] | None = None,
) -> Snippets:
    """Each new token's pieces, occurrence count and snippets in ``lines`` (raw text).

    ``token_strings`` are the tokens' surface strings (a word-start token with its leading
    space, ``" Kranken"``); one that is empty or never found gets no snippets. Of a token's
    occurrences a uniform sample of up to ``snippets_per_token`` is kept (reservoir
    sampling, one generator per token seeded from ``options.seed`` and the token's index,
    so a token's sample does not depend on the other tokens). A window holds the token's
    pieces and ``snippet_length - pieces`` tokens of context, half before where the line
    allows, the rest after; a line with fewer tokens gives all of them. ``encode`` (the
    tokenizer and texts to ids; the tokenizer's own encoding by default) encodes the pieces
    and the windows: a held-out transfer's keeps the held-out source ids out of both.
    """
    _check_concatenates(source_tokenizer)
    encode = encode or encode_texts
    n = len(token_strings)
    cap = options.snippets_per_token
    counts = [0] * n
    samples: list[list[tuple[int, int, str]]] = [[] for _ in range(n)]
    rngs: dict[int, random.Random] = {}
    for i, line_no, char, line in iter_occurrences(lines, token_strings):
        counts[i] += 1
        if len(samples[i]) < cap:
            samples[i].append((line_no, char, line))
            continue
        rng = rngs.get(i)
        if rng is None:
            rng = rngs[i] = random.Random(f"token-distillation:{options.seed}:{i}")
        slot = rng.randrange(counts[i])
        if slot < cap:
            samples[i][slot] = (line_no, char, line)
    pieces = [encode(source_tokenizer, [s])[0] if s else [] for s in token_strings]
    windows = [
        _windows(source_tokenizer, sorted(samples[i], key=lambda x: x[:2]),
                 len(token_strings[i]), pieces[i], options.snippet_length, encode)
        for i in range(n)
    ]
    return Snippets(pieces=pieces, windows=windows, counts=counts,
                    bos_id=_bos_id(source_tokenizer))


def _windows(
    tokenizer: Any,
    found: list[tuple[int, int, str]],
    n_chars: int,
    pieces: list[int],
    length: int,
    encode: Callable[[Any, list[str]], list[list[int]]] = encode_texts,
) -> list[Snippet]:
    """The windows of one token's sampled occurrences (line index, first character, line)."""
    if not found:
        return []
    # Encode only the text near the occurrence: 16 characters per token of context is
    # ample for any real text; a cut is moved to a space, where the byte-level
    # pre-tokenizer splits anyway, and a side that comes out short is encoded whole.
    budget = 16 * length
    lefts: list[str] = []
    rights: list[str] = []
    cut_left: list[bool] = []
    cut_right: list[bool] = []
    for _, char, line in found:
        left, right = line[:char], line[char + n_chars:]
        cut_left.append(len(left) > budget)
        if cut_left[-1]:
            space = left.find(" ", len(left) - budget)
            left = left[space:] if space >= 0 else left
        cut_right.append(len(right) > budget)
        if cut_right[-1]:
            space = right.rfind(" ", 0, budget)
            right = right[:space] if space > 0 else right
        lefts.append(left)
        rights.append(right)
    left_ids = encode(tokenizer, lefts)
    right_ids = encode(tokenizer, rights)
    free = max(length - len(pieces), 0)
    out = []
    for j, (line_no, char, line) in enumerate(found):
        if cut_left[j] and len(left_ids[j]) < free:
            left_ids[j] = encode(tokenizer, [line[:char]])[0]
        if cut_right[j] and len(right_ids[j]) < free:
            right_ids[j] = encode(tokenizer, [line[char + n_chars:]])[0]
        left, right = left_ids[j], right_ids[j]
        after = min(len(right), free - min(len(left), free // 2))
        before = min(len(left), free - after)
        ids = left[len(left) - before:] + pieces + right[:after]
        out.append(Snippet(ids=tuple(ids), start=before, line=line_no, char=char))
    return out


# --- the distillation --------------------------------------------------------------------------


def subtoken_means(
    matrix: torch.Tensor | np.ndarray, pieces: Sequence[Sequence[int]]
) -> np.ndarray:
    """Float32 mean of each token's pieces' rows of ``matrix`` (input or output
    embeddings): the starting row of every new token, and the final row of one that is not
    distilled. Only the rows used are copied (a source matrix may hold 100,000s)."""
    n_rows = matrix.shape[0]
    for i, ids in enumerate(pieces):
        if len(ids) == 0:
            raise ValueError(f"new token {i} has no pieces")
        if min(ids) < 0 or max(ids) >= n_rows:
            raise ValueError(f"new token {i}: a piece id outside the matrix's {n_rows} rows")
    used = sorted({int(p) for ids in pieces for p in ids})
    if isinstance(matrix, torch.Tensor):
        index = torch.tensor(used, dtype=torch.long, device=matrix.device)
        rows = matrix.detach()[index].to("cpu", torch.float32).numpy()
    else:
        rows = np.asarray(matrix)[np.asarray(used, np.int64)].astype(np.float32)
    where = {p: k for k, p in enumerate(used)}
    out = np.empty((len(pieces), matrix.shape[1]), np.float32)
    for i, ids in enumerate(pieces):
        out[i] = rows[[where[int(p)] for p in ids]].mean(axis=0, dtype=np.float64)
    return out


@dataclass(frozen=True)
class _Example:
    row: int  # index of the token's trainable row
    teacher: tuple[int, ...]  # BOS (if any) + window
    start: int  # first piece in ``teacher``
    width: int  # number of pieces


@dataclass(frozen=True)
class _Batch:
    teacher_ids: torch.Tensor  # (B, Lt), right-padded
    student_ids: torch.Tensor  # (B, Ls), the new token's place holding a stand-in id
    new_at: torch.Tensor  # (B,) the new token's position in the student
    rows: torch.Tensor  # (B,) its trainable row
    b: torch.Tensor  # aligned pairs, flat: batch index, student and teacher positions
    s: torch.Tensor
    t: torch.Tensor


def _collate(examples: Sequence[_Example], device: torch.device) -> _Batch:
    """Pad a batch on the right and list its aligned (student, teacher) positions.

    Right padding needs no attention mask in a causal model: no real position sees it.
    """
    lt = max(len(e.teacher) for e in examples)
    ls = max(len(e.teacher) - e.width + 1 for e in examples)
    teacher = np.zeros((len(examples), lt), np.int64)
    student = np.zeros((len(examples), ls), np.int64)
    b: list[np.ndarray] = []
    s: list[np.ndarray] = []
    t: list[np.ndarray] = []
    for i, e in enumerate(examples):
        ids = np.asarray(e.teacher, np.int64)
        last = e.start + e.width - 1
        teacher[i, : len(ids)] = ids
        merged = np.concatenate([ids[: e.start], ids[last:]])  # the last piece: a stand-in
        student[i, : len(merged)] = merged
        pos = np.arange(len(merged))
        b.append(np.full(len(merged), i))
        s.append(pos)
        t.append(np.where(pos < e.start, pos, pos + e.width - 1))

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).to(device)

    return _Batch(
        teacher_ids=tensor(teacher), student_ids=tensor(student),
        new_at=tensor(np.array([e.start for e in examples], np.int64)),
        rows=tensor(np.array([e.row for e in examples], np.int64)),
        b=tensor(np.concatenate(b)), s=tensor(np.concatenate(s)), t=tensor(np.concatenate(t)))


def _embedding_scale(embedding: torch.nn.Module, probe: torch.Tensor) -> torch.Tensor | None:
    """The factor the input-embedding module applies to its rows (Gemma 3's
    ``embed_scale``), checked on ``probe`` ids: a module that does anything else is
    refused, since the trained rows are inserted after it."""
    scale = getattr(embedding, "embed_scale", None)
    weight = embedding.weight
    with torch.no_grad():
        got = embedding(probe)
        expected = weight[probe]
        if scale is not None:
            scale = torch.as_tensor(scale, device=weight.device)
            expected = expected * scale.to(weight.dtype)
    if not torch.allclose(got.float(), expected.float(), rtol=1e-3, atol=1e-6):
        raise ValueError(
            f"{type(embedding).__name__} does more than look up (and scale) its rows: "
            "cannot insert trained rows after it")
    return scale


@contextmanager
def _frozen(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode with no parameter requiring a gradient, restored after."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    training = model.training
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        model.eval()
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        model.train(training)


def _batch_loss(
    base: torch.nn.Module,
    embedding: torch.nn.Module,
    scale: torch.Tensor | None,
    rows: torch.Tensor,
    batch: _Batch,
    mixed_precision: bool,
) -> torch.Tensor:
    """Mean squared error between student and teacher last hidden states, over every
    aligned position and hidden unit of the batch (the reference's reduction)."""
    device = batch.teacher_ids.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision):
        with torch.no_grad():
            teacher = base(input_ids=batch.teacher_ids).last_hidden_state
        embeds = embedding(batch.student_ids)
        new = rows[batch.rows]
        if scale is not None:
            new = new * scale.to(new.dtype)
        where = (torch.arange(len(batch.rows), device=device), batch.new_at)
        embeds = embeds.index_put(where, new.to(embeds.dtype))
        student = base(inputs_embeds=embeds).last_hidden_state
    return F.mse_loss(student[batch.b, batch.s].float(), teacher[batch.b, batch.t].float())


def _choose(snippets: Snippets, options: DistillOptions) -> list[str]:
    """Each token's fate: distilled, too few snippets, or over ``max_tokens`` (the most
    frequent eligible tokens are distilled first; ties by index)."""
    how = [TOO_FEW_SNIPPETS] * len(snippets.windows)
    eligible = [i for i, w in enumerate(snippets.windows) if len(w) >= options.required_snippets]
    eligible.sort(key=lambda i: -snippets.counts[i])  # stable: ties keep index order
    keep = len(eligible) if options.max_tokens is None else options.max_tokens
    for rank, i in enumerate(eligible):
        how[i] = DISTILLED if rank < keep else CAPPED
    return how


def distill(
    model: Any,
    new_pieces: Sequence[Sequence[int]],
    snippets: Snippets,
    options: DistillOptions,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Input rows (float32, one per new token) and a report of how they were made.

    ``model`` is a Hugging Face causal LM with the source vocabulary, on any device and in
    any dtype; its parameters, gradient flags and train/eval mode are as before after the
    call. ``new_pieces[i]`` are token ``i``'s source ids (``snippets.pieces`` for snippets
    from :func:`find_snippets`; each window must hold them at its ``start``). A token with
    fewer than ``min_snippets`` snippets, or beyond ``max_tokens``, keeps the subtoken mean.
    The snippets of the distilled tokens are shuffled together (seeded with
    ``options.seed``) into batches; one AdamW step per batch over the distilled rows.

    The report: ``tokens``, ``distilled``, ``too_few_snippets``, ``capped`` (counts),
    ``how`` (each token's label), ``snippets`` and ``steps`` (used), ``pass_losses`` (the
    mean batch loss of each pass over the snippets) and ``seconds``. For an untied LM head
    the new output rows are :func:`subtoken_means` of the output matrix (see the module's
    docstring).
    """
    started = time.perf_counter()
    if len(new_pieces) != len(snippets.windows):
        raise ValueError(f"{len(new_pieces)} tokens' pieces but {len(snippets.windows)} tokens'"
                         " snippets")
    means = subtoken_means(model.get_input_embeddings().weight, new_pieces)
    how = _choose(snippets, options)
    chosen = [i for i, h in enumerate(how) if h == DISTILLED]
    examples = _examples(chosen, new_pieces, snippets)
    rows_out = means.copy()
    pass_losses: list[float] = []
    steps = 0
    if examples:
        probe = sorted({p for i in chosen for p in new_pieces[i]})
        rows, steps, pass_losses = _train(model, means[chosen], examples, probe, options)
        rows_out[chosen] = rows
    report = {
        "tokens": len(how),
        DISTILLED: how.count(DISTILLED),
        TOO_FEW_SNIPPETS: how.count(TOO_FEW_SNIPPETS),
        CAPPED: how.count(CAPPED),
        "how": how,
        "snippets": len(examples),
        "steps": steps,
        "pass_losses": pass_losses,
        "seconds": time.perf_counter() - started,
    }
    return rows_out, report


def _examples(chosen: list[int], new_pieces: Sequence[Sequence[int]],
              snippets: Snippets) -> list[_Example]:
    """Every snippet of the chosen tokens, the row it trains numbered in ``chosen``'s order;
    refuses a window that does not hold its token's pieces at its start."""
    bos = [] if snippets.bos_id is None else [snippets.bos_id]
    examples = []
    for row, i in enumerate(chosen):
        pieces = list(new_pieces[i])
        for w in snippets.windows[i]:
            if list(w.ids[w.start: w.start + len(pieces)]) != pieces:
                raise ValueError(f"a snippet of token {i} lacks its pieces at its start")
            examples.append(_Example(row=row, teacher=tuple(bos) + w.ids,
                                     start=len(bos) + w.start, width=len(pieces)))
    return examples


def _train(model: Any, start: np.ndarray, examples: list[_Example], probe: list[int],
           options: DistillOptions) -> tuple[np.ndarray, int, list[float]]:
    """The rows trained from ``start`` on ``examples`` with the model frozen: the rows
    (float32), the optimizer steps taken and each pass's mean batch loss. ``probe``: source
    ids the embedding's scale is read from."""
    embedding = model.get_input_embeddings()
    device = embedding.weight.device
    rows = torch.nn.Parameter(torch.from_numpy(start).to(device))
    optimizer = torch.optim.AdamW([rows], lr=options.learning_rate, weight_decay=0.0)
    rng = np.random.default_rng(options.seed)
    size = options.batch_size
    per_pass = -(-len(examples) // size)
    total = options.steps if options.steps is not None else options.epochs * per_pass
    steps, pass_losses = 0, []
    with _frozen(model):
        scale = _embedding_scale(embedding, torch.tensor(probe, device=device))
        while steps < total:
            order = rng.permutation(len(examples))
            losses = []
            for at in range(0, len(order), size):
                if steps == total:
                    break
                batch = _collate([examples[k] for k in order[at: at + size]], device)
                loss = _batch_loss(model.base_model, embedding, scale, rows, batch,
                                   options.mixed_precision)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
                steps += 1
            pass_losses.append(float(np.mean(losses)))
    return rows.detach().to("cpu", torch.float32).numpy(), steps, pass_losses
