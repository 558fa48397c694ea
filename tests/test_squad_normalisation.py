"""MLQA/XQuAD answer scoring: cases worked out by hand from the rules of MLQA's official
evaluation script (mlqa_evaluation_v1.py) in every paper language and of SQuAD v1.1's
evaluate-v1.1.py (XQuAD's protocol), agreement with the copy of MLQA's script that lm-eval's
MLQA task scores with, and the config key that picks a dataset's protocol."""

from __future__ import annotations

import copy
import importlib.util
import random
import unicodedata
from pathlib import Path

import pytest
import yaml

from embtransfer.config.validation import ConfigError, validate_config
from embtransfer.evaluation.squad import (
    MLQA,
    OFFICIAL_LANGS,
    PROTOCOLS,
    SQUAD_V1,
    exact_match,
    f1,
    normalize_answer,
    process_results_for,
    score,
)
from embtransfer.evaluation.task_catalog import (
    CATALOG,
    DATASET_PROTOCOL,
    SHIPPED_TASK_DIR,
    XQUAD_LANGS,
    resolve,
)

REPO = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- by hand, per language ------------------------------------------------------------------


def test_english():
    assert normalize_answer("The  Eiffel Tower!", "en") == "eiffel tower"
    assert normalize_answer("Theatre and anthem", "en") == "theatre and anthem"  # whole words
    # '$' and '+' are ASCII string.punctuation (Unicode category S, not P): removed too.
    assert normalize_answer("$100 + tax", "en") == "100 tax"
    # pred [eiffel, tower, in, paris], gold [eiffel, tower]: P 2/4, R 1, F1 2/3
    assert f1("Eiffel Tower in Paris", "the Eiffel Tower", "en") == pytest.approx(2 / 3)
    # bags of tokens: pred [x, x, y], gold [x, y, y]: common 2, P = R = 2/3
    assert f1("x x y", "x y y", "en") == pytest.approx(2 / 3)


def test_german_articles_and_quotes():
    # der/die/das/den/dem/des/ein... are removed as whole words only.
    assert exact_match("der Rhein", "Rhein", "de") == 1.0
    assert exact_match("Die Deutsche Bank", "deutsche Bank", "de") == 1.0
    assert normalize_answer("ein Einstein des Daseins", "de") == "einstein daseins"
    # German quotation marks „ (Ps) and “ (Pi) are punctuation.
    assert exact_match("„Faust“", "Faust", "de") == 1.0
    # English articles are not German ones.
    assert normalize_answer("the Rhein", "de") == "the rhein"
    # pred [kaiser, wilhelm] vs gold [kaisers]: nothing shared
    assert f1("dem Kaiser Wilhelm", "des Kaisers", "de") == 0.0


def test_arabic_al_anywhere():
    # The official pattern removes every "ال", at the start of a word and inside it.
    assert exact_match("القاهرة", "قاهرة", "ar") == 1.0
    assert normalize_answer("المال", "ar") == "م"  # ال + م + ال -> " م "
    # Arabic comma and question mark are punctuation (Po); أ (with hamza) is not ا.
    assert normalize_answer("برلين، ألمانيا؟", "ar") == "برلين ألمانيا"
    # pred [جامعة, قاهرة] vs gold [قاهرة]: P 1/2, R 1, F1 2/3
    assert f1("جامعة القاهرة", "القاهرة", "ar") == pytest.approx(2 / 3)


def test_vietnamese_articles_and_nfc():
    assert exact_match("những con mèo", "con mèo", "vi") == 1.0
    assert exact_match("thủ đô của Việt Nam", "thủ đô Việt Nam", "vi") == 1.0
    assert exact_match("Hà Nội.", "Hà Nội", "vi") == 1.0
    decomposed = unicodedata.normalize("NFD", "Hà Nội")
    assert decomposed != "Hà Nội"
    # Off by default, as in the official script: other code points, other answer.
    assert exact_match(decomposed, "Hà Nội", "vi") == 0.0
    assert exact_match(decomposed, "Hà Nội", "vi", nfc=True) == 1.0
    # The article "của" is found only in its precomposed form.
    nfd = unicodedata.normalize("NFD", "thủ đô của Việt Nam")
    assert exact_match(nfd, "thủ đô Việt Nam", "vi", nfc=True) == 1.0
    # Without NFC only "nam" (no diacritic) is shared, and "của" stays a token:
    # pred 5 tokens, gold 4, common 1: P 1/5, R 1/4, F1 2/9.
    assert f1(nfd, "thủ đô Việt Nam", "vi") == pytest.approx(2 / 9)


def test_other_official_languages():
    assert exact_match("la casa", "casa", "es") == 1.0
    assert normalize_answer("the", "hi") == "the"  # Hindi: no articles
    # zh: every CJK character is a token: [北, 京, 大, 学] vs [北, 京]: P 1/2, R 1
    assert f1("北京大学", "北京", "zh") == pytest.approx(2 / 3)
    assert normalize_answer("北京 university", "zh") == "北 京 university"


def test_empty_answers_as_the_official_script():
    # Both normalise to "": EM 1, but F1 0 (no shared token).
    assert exact_match("the", "a", "en") == 1.0 and f1("the", "a", "en") == 0.0
    assert f1("", "", "en") == 0.0 and exact_match("", "", "en") == 1.0
    assert score("", ["Paris"], "en", protocol=MLQA) == {"exact_match": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="no gold"):
        score("x", [], "en", protocol=MLQA)


def test_best_gold_and_unknown_language():
    result = score("  city of Paris ", ["Paris", "the city of Paris"], "en", protocol=MLQA)
    assert result == {"exact_match": 1.0, "f1": 1.0}
    # vs "Paris": P 1/3, R 1 -> 0.5; vs "Lyon": 0
    assert score("Paris France today", ["Paris", "Lyon"], "en", protocol=MLQA) == {
        "exact_match": 0.0, "f1": pytest.approx(0.5)}
    with pytest.raises(ValueError, match="'fr'.*known"):
        normalize_answer("x", "fr")
    # XQuAD languages outside MLQA: whitespace tokens, no articles.
    assert normalize_answer("Η Αθήνα.", "el") == "η αθήνα"


# --- SQuAD v1.1 (XQuAD's protocol) -----------------------------------------------------------


def test_squad_v1_rules():
    squad = {"protocol": SQUAD_V1}
    # English articles only, in every language; ASCII punctuation only.
    assert normalize_answer("The  Eiffel Tower!", "de", **squad) == "eiffel tower"
    assert normalize_answer("der Rhein", "de", **squad) == "der rhein"
    assert normalize_answer("„Faust“", "de", **squad) == "„faust“"  # Unicode quotes stay
    assert normalize_answer("برلين، ألمانيا؟", "ar", **squad) == "برلين، ألمانيا؟"
    assert normalize_answer("$100 + tax", "en", **squad) == "100 tax"
    assert normalize_answer("北京大学", "zh", **squad) == "北京大学"  # one whitespace token
    # pred [der, rhein] vs gold [rhein]: P 1/2, R 1, F1 2/3
    assert f1("der Rhein", "Rhein", "de", **squad) == pytest.approx(2 / 3)
    assert exact_match("the", "a", "en", **squad) == 1.0 and f1("the", "a", "en", **squad) == 0.0
    # Any language: XQuAD's el, ro, ... and languages neither script knows.
    assert normalize_answer("The Louvre", "fr", **squad) == "louvre"


@pytest.mark.parametrize(("pred", "gold", "lang", "mlqa_em", "squad_em"), [
    ("der Rhein", "Rhein", "de", 1.0, 0.0),  # German article: MLQA's German rules only
    ("„Faust“", "Faust", "de", 1.0, 0.0),  # Unicode punctuation: MLQA only
    ("the Rhein", "Rhein", "de", 0.0, 1.0),  # an English article in German: SQuAD only
    ("القاهرة", "قاهرة", "ar", 1.0, 0.0),  # Arabic ال: MLQA only
])
def test_the_protocols_disagree(pred, gold, lang, mlqa_em, squad_em):
    assert exact_match(pred, gold, lang, protocol=MLQA) == mlqa_em
    assert exact_match(pred, gold, lang, protocol=SQUAD_V1) == squad_em


def test_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="'squad'.*known"):
        normalize_answer("x", "en", protocol="squad")
    with pytest.raises(ValueError, match="'squad'.*known"):
        process_results_for("en", protocol="squad")


# --- which protocol scores which dataset ------------------------------------------------------


def test_each_dataset_defaults_to_its_own_protocol():
    assert DATASET_PROTOCOL == {"mlqa": MLQA, "xquad": SQUAD_V1}
    qa = {k: b.qa_dataset for k, b in CATALOG.items() if b.answer_language is not None}
    assert qa == {"mlqa": "mlqa", "mlqa_en": "mlqa", "mlqa_ctx_en": "mlqa",
                  "mlqa_ctx_target": "mlqa", "xquad": "xquad", "xquad_en": "xquad"}
    for key, dataset in qa.items():
        assert resolve({"evaluation": {}}, key, "de").scoring_protocol == DATASET_PROTOCOL[dataset]
    assert resolve({"evaluation": {}}, "arc", "de").scoring_protocol is None
    swapped = {"evaluation": {"scoring": {"mlqa": SQUAD_V1, "xquad": MLQA}}}
    assert resolve(swapped, "xquad_en", "de").scoring_protocol == MLQA
    assert resolve(swapped, "mlqa_ctx_en", "de").scoring_protocol == SQUAD_V1


def test_the_schema_offers_every_protocol_and_refuses_others():
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    schema = yaml.safe_load(
        (REPO / "workflow" / "schemas" / "evaluation.schema.yaml").read_text())
    options = schema["properties"]["scoring"]["properties"]
    assert {k for k in options if k != "nfc"} == set(DATASET_PROTOCOL)
    for dataset in DATASET_PROTOCOL:
        assert tuple(options[dataset]["enum"]) == PROTOCOLS
        config = copy.deepcopy(default)
        config["evaluation"]["scoring"] = {dataset: SQUAD_V1}
        validate_config(config)
        config = copy.deepcopy(default)
        config["evaluation"]["scoring"] = {dataset: "squad_v2"}
        with pytest.raises(ConfigError, match=f"evaluation.scoring.{dataset}"):
            validate_config(config)


def test_shipped_xquad_scores_by_squad_v1():
    """Run by plain lm-eval (without the runner's override) the shipped tasks score as
    XQuAD prescribes."""
    utils = _load(SHIPPED_TASK_DIR / "xquad" / "utils.py", "xq_utils")
    doc = {"answers": {"text": ["Rhein"], "answer_start": [0]}}
    assert utils.process_results(doc, [" der Rhein\n"]) == {
        "exact_match": 0.0, "f1": pytest.approx(2 / 3)}
    assert utils.process_results(doc, ["The Rhein."]) == {"exact_match": 1.0, "f1": 1.0}
    for lang in XQUAD_LANGS:  # every shipped task names that function
        text = (SHIPPED_TASK_DIR / "xquad" / f"embt_xquad_{lang}.yaml").read_text()
        assert "process_results: !function utils.process_results\n" in text


def _lm_eval_mlqa_utils():
    import lm_eval

    return _load(Path(lm_eval.__file__).parent / "tasks" / "mlqa" / "utils.py", "mlqa_utils")


def _random_answer(rng: random.Random, lang: str) -> str:
    words = {
        "en": ["the", "a", "an", "Paris", "Theatre", "anthem", "tower"],
        "es": ["la", "los", "unos", "casa", "el", "Elena"],
        "de": ["der", "Die", "einem", "Rhein", "Einstein", "Dasein", "Kaiser"],
        "vi": ["những", "của", "là", "cái", "Hà", "Nội", "chiếc", "mèo"],
        # No "ال" inside a word: there lm-eval deviates (test_lm_eval_arabic_deviation).
        "ar": ["القاهرة", "البيت", "برلين", "ألمانيا", "ال", "جامعة"],
        "hi": ["दिल्ली", "the", "भारत"],
        "zh": ["北京", "大学", "university", "上海"],
    }[lang]
    marks = list(".,;:!?\"'()[]$+<=>^`|~-") + ["،", "؟", "。", "„", "“", "«", "»", "—", "…"]
    parts = []
    for _ in range(rng.randint(0, 5)):
        word = rng.choice(words)
        if rng.random() < 0.3:
            word = rng.choice(marks) + word
        if rng.random() < 0.3:
            word += rng.choice(marks)
        parts.append(word)
    return rng.choice([" ", "  ", "\t", " \n"]).join(parts)


def test_lm_eval_arabic_deviation():
    """lm-eval's MLQA utils (0.4.13) remove "ال" only at the start of a word
    (``(?:^|\\s)ال``); the official script removes it everywhere. MLQA is therefore scored
    by embtransfer.evaluation.squad (the runner overrides the task's process_results)."""
    ref = _lm_eval_mlqa_utils()
    assert ref.normalize_answer("المال", "ar") == "مال"
    assert normalize_answer("المال", "ar") == "م"
    # "رجال" (men) ends in ال: the official rule leaves "رج".
    doc = {"answers": ["رج"]}
    assert ref.process_results_ar(doc, ["رجال"])["exact_match"] == 0
    assert process_results_for("ar", protocol=MLQA)(doc, ["رجال"])["exact_match"] == 1.0


@pytest.mark.parametrize("lang", OFFICIAL_LANGS)
def test_equals_lm_eval_mlqa_scoring(lang):
    """lm-eval's MLQA utils are a copy of the official script (Arabic aside, see above):
    same normalisation, EM, F1 and per-document results on random answers."""
    ref = _lm_eval_mlqa_utils()
    ours = process_results_for(lang, protocol=MLQA)
    rng = random.Random(lang)
    for _ in range(300):
        pred = _random_answer(rng, lang)
        golds = [_random_answer(rng, lang) for _ in range(rng.randint(1, 3))]
        assert normalize_answer(pred, lang) == ref.normalize_answer(pred, lang)
        for gold in golds:
            assert exact_match(pred, gold, lang) == float(ref.exact_match_score(pred, gold, lang))
            assert f1(pred, gold, lang) == pytest.approx(ref.f1_score(pred, gold, lang), abs=0)
        doc = {"answers": golds}
        expected = getattr(ref, f"process_results_{lang}")(doc, [pred])
        assert ours(doc, [pred]) == {k: float(v) for k, v in expected.items()}
