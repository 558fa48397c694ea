"""Token Distillation (Dobler et al., ICLR 2026) as a transfer method of extended
vocabularies: the algorithm is :mod:`embtransfer.transfer.token_distillation`.

Shared tokens copy their source row. Every other target token starts as Subword-mean does
(the mean of its pieces' source rows; a token with no usable piece is drawn at random,
label ``random``); then the input rows of the tokens with enough snippets in the target
language's training text, the most frequent first and at most ``max_tokens`` of them, are
trained so that the frozen source model reads each one as it reads its pieces (label
``distilled``). Output rows of an untied head keep the pieces' mean. The method runs the
source model itself, so it works only where the source keeps its vocabulary
(``transfer.vocab_mode: extend``; :func:`embtransfer.core.vocab_modes.method_modes`).

In a held-out transfer the held-out shared tokens are new tokens like the others: their
pieces and every snippet are encoded without the held-out source ids (Subword-mean's
``encode_avoiding``), so neither the teacher nor the student reads a held-out row, and the
budget goes to the tokens scored (``TransferInputs.scored``).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import count_labels
from embtransfer.transfer.methods.mean import encode_avoiding, subword_mean, token_texts
from embtransfer.transfer.token_distillation import (
    DISTILLED,
    DistillOptions,
    distill,
    find_snippets,
)
from embtransfer.transfer.transferred_model import load_source_model

#: Options that act here rather than in :class:`DistillOptions`.
_LOCAL = ("max_lines",)


def distill_options(params: dict[str, Any], seed: int) -> DistillOptions:
    """The catalog options as :class:`DistillOptions`, seeded by the run."""
    return DistillOptions(**{k: v for k, v in params.items() if k not in _LOCAL}, seed=seed)


def read_lines(path: str, max_lines: int | None) -> list[str]:
    """The first ``max_lines`` lines of the text (all where None)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in islice(f, max_lines)]


@register("token_distillation")
def token_distillation(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    start = subword_mean(inputs, {}, side)
    if side == "output":  # distillation trains input rows; the head keeps the pieces' mean
        return start
    if inputs.source_dir is None or inputs.corpus is None:
        raise ValueError("token_distillation needs the source checkpoint and the target "
                         "language's text (inputs.source_dir, inputs.corpus)")
    rows, how = start.rows, start.how
    todo = np.flatnonzero(how == "subword_mean")
    if inputs.scored is not None:  # a held-out transfer: only the scored rows are read
        todo = todo[np.isin(todo, inputs.scored)]
    texts = token_texts(inputs.target_vocab, todo)
    options = distill_options(params, int(inputs.rng("token_distillation", side).integers(2**31)))
    hidden = inputs.hidden
    snippets = find_snippets(read_lines(inputs.corpus, params["max_lines"]), texts,
                             inputs.source_tokenizer, options,
                             lambda tokenizer, batch: encode_avoiding(tokenizer, batch, hidden))
    model = load_distilled_model(inputs)
    distilled, report = distill(model, snippets.pieces, snippets, options)
    chosen = np.array([h == DISTILLED for h in report["how"]], bool)
    rows[todo[chosen]] = distilled[chosen]
    how[todo[chosen]] = "distilled"
    stats = {
        **{k: v for k, v in start.stats.items() if k != "counts"},
        "counts": count_labels(how),
        "distillation": {k: report[k] for k in (
            "tokens", "distilled", "too_few_snippets", "capped", "snippets", "steps",
            "pass_losses")},
        "occurrences_median": float(np.median(snippets.counts)) if snippets.counts else 0.0,
    }
    return SideResult(rows, how, stats)


def load_distilled_model(inputs: TransferInputs) -> Any:
    """The source checkpoint, read as the run allows (``trust_remote_code``,
    ``allow_pickle``), in float32 (a CPU's fast precision)."""
    return load_source_model(Path(inputs.source_dir), **inputs.source_loading)[0].float()
