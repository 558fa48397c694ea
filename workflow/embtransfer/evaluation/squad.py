"""SQuAD-style answer scoring (exact match and token F1), for the shipped XQuAD task.

Follows the SQuAD v1.1 evaluation script (which XQuAD uses): lower-case, drop punctuation,
drop the English articles a/an/the, collapse whitespace; EM is equality of the normalised
strings, F1 the harmonic mean of token precision and recall (bag of whitespace tokens);
with several gold answers the maximum over them counts. Two deliberate differences, both
neutral on English: punctuation is every Unicode punctuation character (category P*, so the
Arabic comma and CJK full stops go too), and F1 of two empty normalised strings is 1
(the v1.1 script divides by zero there; SQuAD v2 uses the same convention).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if not _is_punct(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(metric, prediction: str, golds: Iterable[str]) -> float:  # type: ignore[no-untyped-def]
    golds = list(golds)
    if not golds:
        raise ValueError("no gold answers to score against")
    return max(metric(prediction, g) for g in golds)


def score(prediction: str, golds: Iterable[str]) -> dict[str, float]:
    """``{"exact_match", "f1"}`` of ``prediction`` (0..1), each the max over ``golds``.

    Only the first line of the generation counts (generation stops at a newline anyway).
    """
    prediction = prediction.strip().split("\n", 1)[0].strip()
    golds = list(golds)
    return {"exact_match": best_over_golds(exact_match, prediction, golds),
            "f1": best_over_golds(f1, prediction, golds)}
