"""The catalog of evaluation task sets: one key per benchmark variant, templates per language.

A *task key* (``arc``, ``mlqa_ctx_en``, ``world_facts`` ...) is what a config lists under
``evaluation.tasks`` and what names the result file (``.../{key}.json``). Each key says how
to find the lm-eval task for a language, what kind of benchmark it is (the paper's table it
feeds), which lm-eval metrics become which paper-style score, and how many shots it takes.

Three sources of tasks:

* ``stock``: tasks of the installed lm-eval (Okapi ARC/HellaSwag/TruthfulQA, Belebele,
  MLQA); :func:`stock_task_names` lists them for the download rule.
* ``shipped``: task configs this repository ships under ``workflow/lm_eval_tasks`` (XQuAD,
  whose stock lm-eval config no longer loads).
* ``world``: the miniature world's benchmarks, written by the ``world_benchmarks`` rule as
  local JSONL + task YAML under ``results/benchmarks/{lang}/`` (no network).

Stock and shipped tasks read their datasets from ``evaluation.datasets_dir``
(:mod:`embtransfer.evaluation.datasets`). Extractive QA (MLQA, XQuAD) is scored by
:mod:`embtransfer.evaluation.squad`, each dataset by its own published protocol unless
``evaluation.scoring.{mlqa,xquad}`` names the other.

Languages: a stock/shipped task is looked up by the config language's lm-eval language
code, ``evaluation.languages[lang]`` (ISO 639-1, e.g. ``de``), else the language key itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embtransfer.core.grid import evaluation_languages

SHIPPED_TASK_DIR = Path(__file__).resolve().parents[2] / "lm_eval_tasks"
# Each extractive-QA dataset's own published protocol (a squad.PROTOCOLS name): the default
# of evaluation.scoring.{dataset}. Written here, not imported from squad, so that editing the
# scoring reruns the jobs that score and not those that only read the catalog.
DATASET_PROTOCOL = {"mlqa": "mlqa_official", "xquad": "squad_v1.1"}
KINDS = ("knowledge", "mrc", "crosslingual")

OKAPI_LANGS = ("ar bn ca da de es eu fr gu hi hr hu hy id it kn ml mr ne nl pt ro ru sk sr "
               "sv ta te uk vi zh").split()
MLQA_LANGS = ("ar", "de", "en", "es", "hi", "vi", "zh")
XQUAD_LANGS = ("ar", "de", "el", "en", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")
# ISO 639-1 -> Belebele (FLORES-200) code, for the languages most transfer papers use.
BELEBELE = {
    "af": "afr_Latn", "ar": "arb_Arab", "bg": "bul_Cyrl", "bn": "ben_Beng", "ca": "cat_Latn",
    "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek", "en": "eng_Latn",
    "es": "spa_Latn", "et": "est_Latn", "eu": "eus_Latn", "fa": "pes_Arab", "fi": "fin_Latn",
    "fr": "fra_Latn", "he": "heb_Hebr", "hi": "hin_Deva", "hr": "hrv_Latn", "hu": "hun_Latn",
    "hy": "hye_Armn", "id": "ind_Latn", "is": "isl_Latn", "it": "ita_Latn", "ja": "jpn_Jpan",
    "ka": "kat_Geor", "ko": "kor_Hang", "lt": "lit_Latn", "mr": "mar_Deva", "nl": "nld_Latn",
    "no": "nob_Latn", "pl": "pol_Latn", "pt": "por_Latn", "ro": "ron_Latn", "ru": "rus_Cyrl",
    "sk": "slk_Latn", "sl": "slv_Latn", "sr": "srp_Cyrl", "sv": "swe_Latn", "sw": "swh_Latn",
    "ta": "tam_Taml", "te": "tel_Telu", "th": "tha_Thai", "tr": "tur_Latn", "uk": "ukr_Cyrl",
    "ur": "urd_Arab", "vi": "vie_Latn", "zh": "zho_Hans",
}


@dataclass(frozen=True)
class Benchmark:
    """One task key of the catalog.

    ``template`` is formatted with ``lang`` (the lm-eval language code; for world tasks the
    config language key) and ``flores`` (its Belebele code). ``languages`` lists the codes
    the template exists for (None: any; world tasks: any miniature-world language).
    ``metrics`` maps each paper-style score name to the lm-eval metrics that give it, in
    order of preference (the first one the task reports is used, and recorded).
    """

    key: str
    source: str  # stock | shipped | world
    kind: str  # knowledge | mrc | crosslingual
    eval_language: str  # target | english
    note: str
    template: str
    metrics: dict[str, tuple[str, ...]]
    num_fewshot: int = 0
    languages: tuple[str, ...] | None = None
    description: str = ""
    # Extractive QA: the language the answers are in (the context's), as a template like
    # ``template``, and the dataset whose scoring protocol applies (a key of
    # DATASET_PROTOCOL); scored by embtransfer.evaluation.squad. None: not extractive QA.
    answer_language: str | None = None
    qa_dataset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def task_name(self, lang: str) -> str:
        """The lm-eval task name for lm-eval language code (or world language key) ``lang``.

        Raises :class:`LookupError` when the benchmark has no version for ``lang``.
        """
        if self.languages is not None and lang not in self.languages:
            raise LookupError(
                f"task {self.key!r} has no version for language {lang!r} "
                f"(available: {', '.join(self.languages)})"
            )
        flores = BELEBELE.get(lang)
        if "{flores}" in self.template and flores is None:
            raise LookupError(
                f"task {self.key!r}: no Belebele (FLORES-200) code known for language {lang!r} "
                f"(known: {', '.join(sorted(BELEBELE))})"
            )
        return self.template.format(lang=lang, flores=flores)


def _b(key: str, source: str, kind: str, eval_language: str, note: str, template: str,
       metrics: dict[str, tuple[str, ...]], num_fewshot: int = 0,
       languages: tuple[str, ...] | list[str] | None = None, description: str = "",
       answer_language: str | None = None, qa_dataset: str | None = None) -> Benchmark:
    return Benchmark(key, source, kind, eval_language, note, template, metrics, num_fewshot,
                     tuple(languages) if languages is not None else None, description,
                     answer_language, qa_dataset)


ENGLISH = ("en",)
RC_SHOTS = 3  # the paper evaluates reading comprehension three-shot
# The miniature world's passage tasks one-shot: three shots overflow the miniature source's
# 256 positions (lm-eval cut 60-85 tokens off the left of most prompts, shots and passage
# alike) and took 6 s of a 7-s evaluation job.
WORLD_RC_SHOTS = 1

CATALOG: dict[str, Benchmark] = {b.key: b for b in [
    # --- the paper's knowledge benchmarks (Table 1, 4): Okapi translations -------------
    _b("arc", "stock", "knowledge", "target", "", "arc_{lang}", {"ARC": ("acc_norm",)},
       languages=OKAPI_LANGS, description="Okapi ARC-Challenge (translated), acc_norm"),
    _b("hellaswag", "stock", "knowledge", "target", "", "hellaswag_{lang}",
       {"HellaSwag": ("acc",)}, languages=OKAPI_LANGS,
       description="Okapi HellaSwag (translated), acc"),
    # lm-eval's Okapi TruthfulQA mc1 reports acc only; acc_norm is used where a version has it.
    _b("truthfulqa", "stock", "knowledge", "target", "", "truthfulqa_{lang}_mc1",
       {"TruthfulQA": ("acc_norm", "acc")}, languages=OKAPI_LANGS,
       description="Okapi TruthfulQA mc1 (translated), acc_norm if reported else acc"),
    _b("arc_en", "stock", "knowledge", "english", "eval_language=english", "arc_challenge",
       {"ARC (English)": ("acc_norm",)}, description="English ARC-Challenge"),
    _b("hellaswag_en", "stock", "knowledge", "english", "eval_language=english", "hellaswag",
       {"HellaSwag (English)": ("acc",)}, description="English HellaSwag"),
    _b("truthfulqa_en", "stock", "knowledge", "english", "eval_language=english",
       "truthfulqa_mc1", {"TruthfulQA (English)": ("acc_norm", "acc")},
       description="English TruthfulQA mc1"),
    # --- reading comprehension (Table 2), three-shot ------------------------------------
    _b("belebele", "stock", "mrc", "target", "eval_language=target", "belebele_{flores}",
       {"Belebele acc": ("acc",)}, RC_SHOTS, description="Belebele in the target language"),
    _b("belebele_en", "stock", "mrc", "english", "eval_language=english", "belebele_eng_Latn",
       {"Belebele acc": ("acc",)}, RC_SHOTS, description="Belebele in English"),
    _b("mlqa", "stock", "mrc", "target", "eval_language=target", "mlqa_{lang}_{lang}",
       {"MLQA EM": ("exact_match",), "MLQA F1": ("f1",)}, RC_SHOTS, MLQA_LANGS,
       description="MLQA, context and question in the target language",
       answer_language="{lang}", qa_dataset="mlqa"),
    _b("mlqa_en", "stock", "mrc", "english", "eval_language=english", "mlqa_en_en",
       {"MLQA EM": ("exact_match",), "MLQA F1": ("f1",)}, RC_SHOTS,
       description="MLQA in English", answer_language="en", qa_dataset="mlqa"),
    _b("xquad", "shipped", "mrc", "target", "eval_language=target", "embt_xquad_{lang}",
       {"XQuAD EM": ("exact_match",), "XQuAD F1": ("f1",)}, RC_SHOTS, XQUAD_LANGS,
       description="XQuAD (task config shipped here)", answer_language="{lang}",
       qa_dataset="xquad"),
    _b("xquad_en", "shipped", "mrc", "english", "eval_language=english", "embt_xquad_en",
       {"XQuAD EM": ("exact_match",), "XQuAD F1": ("f1",)}, RC_SHOTS,
       description="XQuAD in English", answer_language="en", qa_dataset="xquad"),
    # --- cross-lingual MLQA (Table 3): lm-eval's mlqa_{context}_{question} ---------------
    _b("mlqa_ctx_en", "stock", "crosslingual", "target", "context=en,question=target",
       "mlqa_en_{lang}", {"MLQA EM": ("exact_match",), "MLQA F1": ("f1",)}, RC_SHOTS,
       [c for c in MLQA_LANGS if c != "en"],
       description="MLQA, English context, target-language question",
       answer_language="en", qa_dataset="mlqa"),
    _b("mlqa_ctx_target", "stock", "crosslingual", "target", "context=target,question=en",
       "mlqa_{lang}_en", {"MLQA EM": ("exact_match",), "MLQA F1": ("f1",)}, RC_SHOTS,
       [c for c in MLQA_LANGS if c != "en"],
       description="MLQA, target-language context, English question",
       answer_language="{lang}", qa_dataset="mlqa"),
    # --- the miniature world (local tasks built from the world JSON) --------------------
    _b("world_facts", "world", "knowledge", "target", "", "world_facts_{lang}",
       {"Facts acc": ("acc",)},
       description="facts of the source-language corpus whose answers are shared material "
                   "(names, numbers, loanwords), asked in the target language "
                   "(multiple-choice cloze)"),
    _b("world_facts_en", "world", "knowledge", "english", "eval_language=english",
       "world_facts_en_{lang}", {"Facts acc (English)": ("acc",)},
       description="the same facts asked in the source language"),
    _b("world_words", "world", "knowledge", "target", "", "world_words_{lang}",
       {"Words acc": ("acc",)},
       description="facts whose answers are native words of the target language (no shared "
                   "token spells them), asked in the target language (multiple-choice cloze)"),
    _b("world_words_en", "world", "knowledge", "english", "eval_language=english",
       "world_words_en_{lang}", {"Words acc (English)": ("acc",)},
       description="the same facts asked in the source language"),
    _b("world_mrc", "world", "mrc", "target", "eval_language=target", "world_mrc_{lang}",
       {"MRC acc": ("acc",)}, WORLD_RC_SHOTS,
       description="reading comprehension: a short passage about people not in the fact "
                   "base, a cloze question on it, both in the target language"),
    _b("world_mrc_en", "world", "mrc", "english", "eval_language=english",
       "world_mrc_en_{lang}", {"MRC acc": ("acc",)}, WORLD_RC_SHOTS,
       description="the same passages and questions in the source language"),
    _b("world_xl_ctx_en", "world", "crosslingual", "target", "context=en,question=target",
       "world_xl_ctx_en_{lang}", {"XL acc": ("acc",)}, WORLD_RC_SHOTS,
       description="passage in the source language, question and choices in the target"),
    _b("world_xl_ctx_target", "world", "crosslingual", "target", "context=target,question=en",
       "world_xl_ctx_target_{lang}", {"XL acc": ("acc",)}, WORLD_RC_SHOTS,
       description="passage in the target language, question and choices in the source"),
]}

WORLD_TASKS = tuple(k for k, b in CATALOG.items() if b.source == "world")
PAPER_TASKS = ("arc", "hellaswag", "truthfulqa", "belebele", "belebele_en", "mlqa", "mlqa_en",
               "xquad", "xquad_en", "mlqa_ctx_en", "mlqa_ctx_target")


@dataclass(frozen=True)
class TaskSpec:
    """A task key resolved for one language: what the evaluation job runs and records."""

    key: str
    lm_eval_task: str
    source: str
    kind: str
    eval_language: str
    note: str
    metrics: dict[str, tuple[str, ...]]
    num_fewshot: int
    answer_language: str | None = None  # extractive QA: the answers' language code
    scoring_protocol: str | None = None  # extractive QA: a squad.PROTOCOLS name


def eval_language_code(config: dict[str, Any], lang: str) -> str:
    """The lm-eval language code of config language ``lang`` (``evaluation.languages``)."""
    return config.get("evaluation", {}).get("languages", {}).get(lang, lang)


def resolve(config: dict[str, Any], key: str, lang: str) -> TaskSpec:
    """Task key ``key`` for config language ``lang``. Raises KeyError/LookupError."""
    bench = CATALOG[key]
    code = lang if bench.source == "world" else eval_language_code(config, lang)
    shots = config.get("evaluation", {}).get("num_fewshot", {}).get(key, bench.num_fewshot)
    answers = bench.answer_language.format(lang=code) if bench.answer_language else None
    return TaskSpec(key, bench.task_name(code), bench.source, bench.kind, bench.eval_language,
                    bench.note, bench.metrics, int(shots), answers,
                    scoring_protocol(config, bench.qa_dataset))


def scoring_protocol(config: dict[str, Any], qa_dataset: str | None) -> str | None:
    """The protocol that scores ``qa_dataset``'s answers: ``evaluation.scoring.{qa_dataset}``,
    else the dataset's own published one; None for a task that is not extractive QA."""
    if qa_dataset is None:
        return None
    chosen = config.get("evaluation", {}).get("scoring", {}).get(qa_dataset)
    return chosen or DATASET_PROTOCOL[qa_dataset]


def stock_task_names(config: dict[str, Any]) -> list[str]:
    """The stock lm-eval task names ``config`` evaluates (sorted, unique).

    For a dataset pre-cache rule: each name resolves with ``lm_eval.tasks.TaskManager()``.
    Shipped tasks (:func:`shipped_task_names`) need ``TaskManager(include_path=
    SHIPPED_TASK_DIR)``; world tasks need no download.
    """
    return _names(config, "stock")


def shipped_task_names(config: dict[str, Any]) -> list[str]:
    """The task names ``config`` evaluates from ``workflow/lm_eval_tasks`` (SHIPPED_TASK_DIR)."""
    return _names(config, "shipped")


def _names(config: dict[str, Any], source: str) -> list[str]:
    tasks = config.get("evaluation", {}).get("tasks", [])
    names = {
        resolve(config, key, lang).lm_eval_task
        for key in tasks if CATALOG[key].source == source
        for lang in evaluation_languages(config)
    }
    return sorted(names)


def world_task_keys(config: dict[str, Any]) -> list[str]:
    return [k for k in config["evaluation"]["tasks"] if CATALOG[k].source == "world"]


def shipped_tasks_hash() -> str:
    """Hash of the shipped task configs (workflow/lm_eval_tasks), for rule params."""
    digest = hashlib.sha256()
    for path in sorted(SHIPPED_TASK_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(SHIPPED_TASK_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def spec_dicts(config: dict[str, Any], lang: str, keys: list[str] | None = None
               ) -> list[dict[str, Any]]:
    """The resolved task specs of ``lang`` as plain dicts (rule params)."""
    keys = config["evaluation"]["tasks"] if keys is None else keys
    out = []
    for key in keys:
        spec = asdict(resolve(config, key, lang))
        spec["metrics"] = {k: list(v) for k, v in spec["metrics"].items()}
        out.append(spec)
    return out
