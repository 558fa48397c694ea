"""Extractive-QA answer scoring (exact match and token F1) of MLQA and XQuAD, each by its own
published protocol (``task_catalog.DATASET_PROTOCOL``); the other protocol is a config option
(``evaluation.scoring.{mlqa,xquad}``), so a score can be compared with either literature.

Two protocols, named in every record (``scoring.protocol``) and under the report's tables:

* ``squad_v1.1``: SQuAD v1.1's ``evaluate-v1.1.py`` (rajpurkar/SQuAD-explorer), as XQuAD
  prescribes.
  Language-blind: lower-case; drop the ASCII punctuation of ``string.punctuation`` (other
  punctuation, such as German „“ or Arabic ،, stays); replace the English articles
  ``a an the`` by a space; split on whitespace.
* ``mlqa_official``: MLQA's official script (facebookresearch/MLQA ``mlqa_evaluation_v1.py``),
  per answer language, described below.

MLQA's normalisation of an answer in answer language ``lang`` (the context's), in order:

1. lower-case;
2. drop every punctuation character: Unicode category P* plus Python's
   ``string.punctuation`` (so the ASCII symbols ``$ + < = > ^ ` | ~`` go too);
3. replace the language's articles by a space: en ``a an the``; es ``un una unos unas el la
   los las``; de ``ein eine einen einem eines einer der die das den dem des``; vi ``của là
   cái chiếc những``; ar: *every* occurrence of ``ال``, also inside a word (the official
   pattern ``\\sال^|ال``: its first branch can never match, so the second removes the
   letters wherever they stand); hi and zh: none;
4. split into tokens: whitespace, except zh, where every CJK character (U+4E00-U+9FA5)
   is a token of its own; tokens are joined by single spaces.

Both protocols: EM is equality of the normalised strings; F1 the harmonic mean of
precision and recall of the two bags of tokens, 0 when they share none, so an empty
normalised prediction or gold (e.g. the gold "the") gets F1 0 but EM 1 against an equally
empty one, as in both scripts. Several golds: the maximum over them. The prediction is the
generation stripped of surrounding whitespace (as lm-eval's MLQA task does).

Languages MLQA's script does not know (XQuAD's el, ro, ru, th, tr) are scored under
``mlqa_official`` with whitespace tokens and no article removal: an extension
(docs/evaluation.md).

``nfc=True`` (config ``evaluation.scoring.nfc``; off by default, as in both scripts)
first brings prediction and golds to Unicode NFC, so a decomposed Vietnamese diacritic
(e.g. "của" typed as u + U+0309 + ...) matches its precomposed form.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

MLQA = "mlqa_official"
SQUAD_V1 = "squad_v1.1"
PROTOCOLS = (MLQA, SQUAD_V1)

_ASCII_PUNCT = frozenset(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")
ARTICLES: dict[str, re.Pattern[str] | None] = {
    "en": re.compile(r"\b(a|an|the)\b"),
    "es": re.compile(r"\b(un|una|unos|unas|el|la|los|las)\b"),
    "hi": None,  # Hindi has no articles
    "vi": re.compile(r"\b(của|là|cái|chiếc|những)\b"),
    "de": re.compile(r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b"),
    "ar": re.compile(r"\sال^|ال"),  # the official pattern, verbatim: removes every ال
    "zh": None,  # Chinese has no articles
}
OFFICIAL_LANGS = tuple(ARTICLES)
# XQuAD languages outside MLQA: whitespace tokens, no articles (not the official script's).
EXTENDED_LANGS = ("el", "ro", "ru", "th", "tr")
_CJK = re.compile(r"[\u4e00-\u9fa5]")


def is_punct(ch: str) -> bool:
    """The official script's PUNCT: Unicode category P* or ASCII ``string.punctuation``."""
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def _check_lang(lang: str) -> None:
    if lang not in ARTICLES and lang not in EXTENDED_LANGS:
        raise ValueError(
            f"answer language {lang!r} has no MLQA/XQuAD normalisation "
            f"(known: {', '.join(OFFICIAL_LANGS + EXTENDED_LANGS)})")


def _mixed_segmentation(text: str) -> list[str]:
    """zh: every CJK character (and punctuation) a token, whitespace splits the rest."""
    tokens: list[str] = []
    pending = ""
    for ch in text:
        if _CJK.match(ch) or is_punct(ch):
            tokens.extend(pending.split())
            pending = ""
            tokens.append(ch)
        else:
            pending += ch
    tokens.extend(pending.split())
    return tokens


def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown answer-scoring protocol {protocol!r} (known: {PROTOCOLS})")


def normalize_answer(text: str, lang: str, *, protocol: str = MLQA, nfc: bool = False) -> str:
    """``text`` normalised by ``protocol`` (MLQA's script for answer language ``lang``, or
    SQuAD v1.1's, which ignores ``lang``)."""
    _check_protocol(protocol)
    if nfc:
        text = unicodedata.normalize("NFC", text)
    if protocol == SQUAD_V1:
        text = "".join(ch for ch in text.lower() if ch not in _ASCII_PUNCT)
        return " ".join(_SQUAD_ARTICLES.sub(" ", text).split())
    _check_lang(lang)
    text = "".join(ch for ch in text.lower() if not is_punct(ch))
    pattern = ARTICLES.get(lang)
    if pattern is not None:
        text = pattern.sub(" ", text)
    tokens = _mixed_segmentation(text) if lang == "zh" else text.split()
    return " ".join(t for t in tokens if t.strip())


def exact_match(prediction: str, gold: str, lang: str, *, protocol: str = MLQA,
                nfc: bool = False) -> float:
    return float(normalize_answer(prediction, lang, protocol=protocol, nfc=nfc)
                 == normalize_answer(gold, lang, protocol=protocol, nfc=nfc))


def f1(prediction: str, gold: str, lang: str, *, protocol: str = MLQA, nfc: bool = False
       ) -> float:
    pred = normalize_answer(prediction, lang, protocol=protocol, nfc=nfc).split()
    ref = normalize_answer(gold, lang, protocol=protocol, nfc=nfc).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:  # also when either side is empty (the official script's rule)
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def score(prediction: str, golds: Iterable[str], lang: str, *, protocol: str, nfc: bool = False
          ) -> dict[str, float]:
    """``{"exact_match", "f1"}`` (0..1) of ``prediction`` by ``protocol``, each the maximum
    over ``golds``."""
    golds = list(golds)
    if not golds:
        raise ValueError("no gold answers to score against")
    prediction = prediction.strip()
    how = {"protocol": protocol, "nfc": nfc}
    return {"exact_match": max(exact_match(prediction, g, lang, **how) for g in golds),
            "f1": max(f1(prediction, g, lang, **how) for g in golds)}


def gold_answers(doc: dict[str, Any]) -> list[str]:
    """The gold answer strings of an MLQA/XQuAD document: ``answers`` as the hub datasets
    hold it (``{"text": [...], "answer_start": [...]}``) or as lm-eval's MLQA
    ``process_docs`` leaves it (the list of texts)."""
    answers = doc["answers"]
    return list(answers["text"] if isinstance(answers, dict) else answers)


def process_results_for(lang: str, *, protocol: str, nfc: bool = False
                        ) -> Callable[[dict[str, Any], list[str]], dict[str, float]]:
    """An lm-eval ``process_results`` scoring answers in ``lang`` (the context's language)
    by ``protocol``."""
    _check_protocol(protocol)
    if protocol == MLQA:
        _check_lang(lang)

    def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
        return score(results[0], gold_answers(doc), lang, protocol=protocol, nfc=nfc)

    process_results.__name__ = f"process_results_{protocol}_{lang}{'_nfc' if nfc else ''}"
    return process_results
