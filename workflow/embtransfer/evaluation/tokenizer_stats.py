"""Tokenizer statistics on the evaluation sets: fertility and the prompt-token ratio.

For each evaluation set (a task's documents, and the language's valid text) the *text* of
a document is what a zero-shot model reads and is scored on: the task's prompt
(``doc_to_text``), the target delimiter and the gold answer (the gold choice of a
multiple-choice task, the first gold answer of a generation task). For every tokenizer:

* ``tokens``: tokens of all texts (``add_special_tokens=False``);
* ``fertility``: tokens per whitespace-separated word; ``tokens_per_byte``: per UTF-8 byte;
* ``ratio_to_source[s]``: ``tokens / tokens of source tokenizer s`` on the same texts. The
  prompt-token ratio of Yamaguchi et al.: below 1 the target tokenizer needs fewer tokens
  than the source's (inference is about ``1 / ratio`` times faster per text).

Tokenizers are those of the source LLMs and the target PLMs (with ``transfer.vocab_mode:
replace`` the transferred checkpoints use the target PLM's tokenizer unchanged).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lm_eval.tasks import get_task_dict

from embtransfer.evaluation.zeroshot import token_counts
from embtransfer.models.loading import load_tokenizer


def _as_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    return str(value)


def task_texts(task: Any, limit: int | None = None) -> list[str]:
    """The zero-shot texts (prompt + delimiter + gold answer) of an lm-eval task object."""
    texts = []
    for i, doc in enumerate(task.eval_docs):
        if limit is not None and i >= limit:
            break
        prompt = _as_text(task.doc_to_text(doc))
        target = task.doc_to_target(doc)
        if task.OUTPUT_TYPE == "multiple_choice":
            choices = task.doc_to_choice(doc)
            if isinstance(target, list):
                target = target[0]
            answer = choices[target] if isinstance(target, int) else str(target)
        else:
            answer = _as_text(target)
        texts.append(prompt + task.config.target_delimiter + answer)
    return texts


def load_task_texts(specs: Sequence[str | dict[str, Any]], task_manager: Any,
                    limit: int | None = None) -> dict[str, list[str]]:
    """Task name -> texts, through lm-eval's task objects. ``specs``: task names, or full
    task configs (embtransfer.evaluation.runner.task_spec: local datasets)."""
    names = [s if isinstance(s, str) else s["task"] for s in specs]
    tasks = get_task_dict(list(specs), task_manager)
    return {name: task_texts(tasks[name], limit) for name in names}


def count(tokenizer: Any, texts: Sequence[str]) -> dict[str, float | int]:
    """Tokens, words, bytes, fertility and tokens per byte of ``texts``."""
    counts = token_counts(tokenizer, texts)
    if not counts["words"] or not counts["bytes"]:
        raise ValueError("no words to count tokens per word on")
    return counts


def tokenizer_stats(
    tokenizers: dict[str, str | os.PathLike | Any],
    roles: dict[str, str],
    sets: dict[str, list[str]],
    set_info: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Statistics of every tokenizer (name -> directory or tokenizer) on every text set.

    ``roles`` says which tokenizers are ``source`` (ratios are taken to each of them) and
    which ``target``.
    """
    loaded = {
        name: load_tokenizer(tok) if isinstance(tok, str | os.PathLike | Path) else tok
        for name, tok in tokenizers.items()
    }
    counts = {name: {s: count(tok, texts) for s, texts in sets.items()}
              for name, tok in loaded.items()}
    sources = [n for n in loaded if roles[n] == "source"]
    out: dict[str, Any] = {"sets": {}, "tokenizers": {}}
    for s, texts in sets.items():
        first = next(iter(counts.values()))[s]
        out["sets"][s] = {**(set_info or {}).get(s, {}), "documents": len(texts),
                          "words": first["words"], "bytes": first["bytes"]}
    for name in loaded:
        per_set = {}
        for s in sets:
            c = counts[name][s]
            per_set[s] = {
                "tokens": c["tokens"], "fertility": c["fertility"],
                "tokens_per_byte": c["tokens_per_byte"],
                "ratio_to_source": {
                    src: c["tokens"] / counts[src][s]["tokens"]
                    for src in sources if counts[src][s]["tokens"]
                },
            }
        out["tokenizers"][name] = {
            "role": roles[name],
            "path": str(tokenizers[name]) if not hasattr(tokenizers[name], "encode") else None,
            "sets": per_set,
        }
    return out

