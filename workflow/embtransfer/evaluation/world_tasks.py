"""The miniature world's benchmarks as local lm-eval tasks (JSONL + task YAML, no network).

For a target language ``L`` of the world (source language ``S``), :func:`build_world_tasks`
writes one directory per task key under ``out_dir`` (``results/benchmarks/{L}/{key}/``):
``test.jsonl``, ``train.jsonl`` (the few-shot pool) and ``{key}.yaml`` (an lm-eval
``multiple_choice`` task named ``{key}_{L}``; fields ``text``, ``choices``, ``gold``).

* ``world_facts`` / ``world_facts_en``: facts of the fact base whose answers are shared
  material (names, cities, companies, numbers, loanwords) as cloze questions
  (:func:`embtransfer.world.questions.fact_question`) in ``L`` / in ``S``: knowledge that must
  transfer from the source model, answered by tokens both vocabularies share.
* ``world_words`` / ``world_words_en``: the facts whose answers are native lexicon words
  (professions, foods, animals, objects no language borrows), with native distractors of the
  same class: answered only by target tokens the source does not share, so they measure the
  rows a method makes rather than the rows it copies.
* ``world_mrc`` / ``world_mrc_en``: reading comprehension. A passage states one relation
  each (where someone lives, what they own, ...) of ``passage_people`` people who are
  *not* in the fact base; the cloze question asks one of them. The choices are the stated
  value and other values of its type, so only reading the passage answers it (no value of
  a passage is a fact the model could know). Passage and question in ``L`` / in ``S``.
* ``world_xl_ctx_en`` / ``world_xl_ctx_target``: the same passages and questions
  cross-lingually: passage in ``S`` and question in ``L``, or passage in ``L`` and question
  in ``S`` (the reference's ``context=en,question=target`` and the reverse).

Everything is deterministic in (world, seed, sizes): documents and distractors are drawn
from ``random.Random`` streams seeded by the config seed and the document's index, and
are the same in every language (only the rendering differs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from embtransfer.core.atomic import atomic_path
from embtransfer.world.languages import value_pool
from embtransfer.world.questions import fact_question
from embtransfer.world.running_text import fact_frame, passage_facts, render

DEFAULT_SIZES = {"size": 100, "fact_questions": None, "fewshot_pool": 20, "passage_people": 3}


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


def cloze(world: dict[str, Any], fact: dict[str, Any], values: list[Any],
          lang: str) -> tuple[str, list[str]]:
    """``fact``'s statement rendered with each of ``values``: the common leading words (the
    query) and each sentence's remainder (the choices), as in ``fact_question``."""
    sentences = [render(world, fact_frame(world, fact, v), lang).split(" ") for v in values]
    common = 0
    while all(len(s) > common + 1 and s[common] == sentences[0][common] for s in sentences):
        common += 1
    return " ".join(sentences[0][:common]), [" ".join(s[common:]) for s in sentences]


def _join(context: str, query: str) -> str:
    return f"{context} {query}" if context else query


# --- documents ------------------------------------------------------------------------------


def native_words(world: dict[str, Any], value_type: str) -> list[str]:
    """The concepts of a lexicon class that no language borrows: every target language has a
    native word of its own for them, which the source's vocabulary does not spell."""
    loans = {c["id"] for c in world["concepts"] if c["loan"]}
    return [v for v in value_pool(world, value_type) if v not in loans]


def word_answer(world: dict[str, Any], fact: dict[str, Any]) -> bool:
    """Whether a fact's answer is a native lexicon word (a profession, food, animal or object
    no language borrows), not shared material (a name, a number, a loanword)."""
    classes = {c["class"] for c in world["concepts"]}
    return fact["value_type"] in classes and fact["value"] in native_words(
        world, fact["value_type"])


#: How one target tokenizer spells text, and which of its ids it shares with a source:
#: (encode: texts -> ids per text, shared target ids).
Speller = tuple[Callable[[list[str]], list[list[int]]], set[int]]


def answer_tokens(encode: Callable[[list[str]], list[list[int]]],
                  choices: list[str]) -> list[set[int]]:
    """The ids that tell each choice apart: its ids (after the space lm-eval puts before a
    choice) less those every choice has."""
    ids = [set(t) for t in encode([" " + c for c in choices])]
    common = set.intersection(*ids)
    return [i - common for i in ids]


def unshared(spellers: list[Speller], choices: list[str]) -> bool:
    """Whether, for every target tokenizer, every choice is told apart by tokens of its own
    and none of them is shared with a source: only the rows a method makes answer."""
    for encode, shared in spellers:
        distinct = answer_tokens(encode, choices)
        if any(not d or d & shared for d in distinct):
            return False
    return True


def _spelt_unshared(world: dict[str, Any], fact: dict[str, Any], value: str, lang: str,
                    spellers: list[Speller]) -> bool:
    """Whether ``value`` in ``fact``'s statement is told apart from another native value of
    its class by unshared tokens only (the test a value must pass to be a choice)."""
    other = next(v for v in native_words(world, fact["value_type"]) if v != value)
    choices = cloze(world, fact, [value, other], lang)[1]
    return all(d and not d & shared
               for encode, shared in spellers for d in answer_tokens(encode, choices)[:1])


def fact_docs(world: dict[str, Any], lang: str, size: int | None, seed: int,
              split: str, words: bool = False,
              spellers: list[Speller] | None = None) -> list[dict[str, Any]]:
    """Cloze questions on the fact base in ``lang``: ``size`` test facts (None: all), the
    rest (up to ``size``) as the few-shot pool (``split`` = test/train).

    ``words=False``: the facts whose answers are shared material (names, cities, companies,
    numbers, loanwords), which the source and target vocabularies share. ``words=True``: the
    facts whose answers are native lexicon words, with native distractors of the same class,
    which only non-shared target tokens spell. With ``spellers`` (the run's target tokenizers
    of ``lang`` and their shared ids), the word questions keep only answers and distractors
    that no tokenizer spells with a shared token (:func:`unshared`): in the miniature world
    the source saw some target text, so its vocabulary holds pieces of target words."""
    facts = [f for f in world["facts"] if word_answer(world, f) == words]
    if words and spellers:
        facts = [f for f in facts if _spelt_unshared(world, f, f["value"], lang, spellers)]
    order = list(range(len(facts)))
    _rng(seed, "world_words" if words else "world_facts").shuffle(order)
    n_test = len(facts) if size is None else min(size, len(facts))
    chosen = sorted(order[:n_test]) if split == "test" else sorted(order[n_test:][:size])
    docs = []
    for i in chosen:
        pool = native_words(world, facts[i]["value_type"]) if words else None
        if words and spellers:
            pool = [v for v in pool if _spelt_unshared(world, facts[i], v, lang, spellers)]
        q = fact_question(world, facts[i], lang, pool)
        if words and spellers and not unshared(spellers, q["choices"]):
            continue  # two choices share a piece after all: the question is left out
        docs.append({"id": q["id"], "text": q["query"], "choices": q["choices"],
                     "gold": q["gold"], "relation": q["relation"],
                     "values": [str(v) for v in q["values"]]})
    return docs


def _ask_in(world: dict[str, Any], fact: dict[str, Any], doc: dict[str, Any],
            lang: str) -> dict[str, Any]:
    """``doc``'s question (the same fact and choices, in the same order) asked in ``lang``."""
    query, choices = cloze(world, fact, doc["values"], lang)
    return {**doc, "text": query, "choices": choices}


def passage_items(world: dict[str, Any], n: int, seed: int, split: str,
                  passage_people: int) -> list[dict[str, Any]]:
    """Language-independent passages (:func:`embtransfer.world.running_text.passage_facts`): per
    item the stated facts, the asked one and the ordered choice values (its value and
    others of its type, which the passage does not state)."""
    n_choices = world["config"]["n_choices"]
    items = []
    for i in range(n):
        rng = _rng(seed, "world_mrc", split, i)
        facts = passage_facts(world, rng, max(1, passage_people))
        asked = rng.randrange(len(facts))
        fact = facts[asked]
        others = [v for v in value_pool(world, fact["value_type"]) if v != fact["value"]]
        choices = [fact["value"], *rng.sample(others, min(n_choices - 1, len(others)))]
        rng.shuffle(choices)
        items.append({"id": f"{split}_{i:04d}", "facts": facts, "asked": asked,
                      "relation": fact["relation"], "choices": choices,
                      "gold": choices.index(fact["value"])})
    return items


def passage_doc(world: dict[str, Any], item: dict[str, Any], context_lang: str,
                question_lang: str) -> dict[str, Any]:
    passage = " ".join(render(world, fact_frame(world, f), context_lang) for f in item["facts"])
    query, choices = cloze(world, item["facts"][item["asked"]], item["choices"], question_lang)
    return {"id": item["id"], "text": _join(passage, query), "choices": choices,
            "gold": item["gold"], "relation": item["relation"],
            "values": [str(v) for v in item["choices"]],
            "context_language": context_lang, "question_language": question_lang}


# --- the task directories ----------------------------------------------------------------


def task_yaml(name: str, test: Path, train: Path | None, num_fewshot: int) -> dict[str, Any]:
    """The task's lm-eval config. Its data files are named relative to the YAML's own
    directory, so the file does not depend on where it was built (the atomic write builds
    in a temporary directory); :func:`relocated_include_dir` makes them absolute for
    lm-eval, which reads relative paths from the working directory."""
    files = {"test": test.name}
    if train is not None:
        files["train"] = train.name
    spec: dict[str, Any] = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": files},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "text",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": " ",
        "num_fewshot": num_fewshot,
        "metric_list": [
            {"metric": m, "aggregation": "mean", "higher_is_better": True}
            for m in ("acc", "acc_norm")
        ],
        "metadata": {"version": 1.0},
    }
    if train is not None:
        spec["fewshot_split"] = "train"
    return spec


def _write_jsonl(path: Path, docs: list[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")


def world_task_docs(world: dict[str, Any], lang: str, seed: int, sizes: dict[str, Any],
                    spellers: list[Speller] | None = None
                    ) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """key -> split -> documents, for every world task key of target language ``lang``
    (``spellers``: see :func:`fact_docs`; the source-language variant asks the same facts)."""
    sizes = {**DEFAULT_SIZES, **sizes}
    src = world["source_language"]
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for key, q_lang, words in (("world_facts", lang, False), ("world_facts_en", src, False)):
        out[key] = {split: fact_docs(world, q_lang, sizes["fact_questions"], seed, split, words)
                    for split in ("test", "train")}
    asked = {split: fact_docs(world, lang, sizes["fact_questions"], seed, split, True, spellers)
             for split in ("test", "train")}
    out["world_words"] = asked
    facts = {f["id"]: f for f in world["facts"]}
    out["world_words_en"] = {split: [_ask_in(world, facts[d["id"]], d, src) for d in docs]
                             for split, docs in asked.items()}
    items = {
        "test": passage_items(world, sizes["size"], seed, "test", sizes["passage_people"]),
        "train": passage_items(world, sizes["fewshot_pool"], seed, "train",
                               sizes["passage_people"]),
    }
    for key, c_lang, q_lang in (("world_mrc", lang, lang), ("world_mrc_en", src, src),
                                ("world_xl_ctx_en", src, lang),
                                ("world_xl_ctx_target", lang, src)):
        out[key] = {split: [passage_doc(world, it, c_lang, q_lang) for it in its]
                    for split, its in items.items()}
    return out


def build_world_tasks(world: dict[str, Any], lang: str, out_dir: str | Path, seed: int,
                      sizes: dict[str, Any], num_fewshot: dict[str, int],
                      spellers: list[Speller] | None = None) -> dict[str, Any]:
    """Write every world task of ``lang`` under ``out_dir`` (see the module docstring).

    ``out_dir`` is written in place; wrap the call in ``atomic_path(directory=True)``.
    Returns a manifest (key -> task name, document counts).
    """
    if lang not in world["languages"]:
        raise ValueError(f"{lang!r} is not a language of the miniature world")
    out_dir = Path(out_dir)
    manifest: dict[str, Any] = {"lang": lang, "source_language": world["source_language"],
                                "seed": seed, "sizes": {**DEFAULT_SIZES, **sizes}, "tasks": {}}
    for key, splits in world_task_docs(world, lang, seed, sizes, spellers).items():
        task_dir = out_dir / key
        task_dir.mkdir(parents=True, exist_ok=True)
        if not splits["test"] and key.startswith("world_words"):
            raise ValueError(
                f"{key}: no fact's answer is spelt by target tokens that no source shares: the "
                "source tokenizers hold the target's answer words (trained on a mix that "
                "restates the facts); train them on their own language (models.<source>."
                "tokenizer.text: language) or drop world_words from evaluation.tasks")
        if not splits["test"]:
            raise ValueError(f"{key}: no test documents (world too small?)")
        _write_jsonl(task_dir / "test.jsonl", splits["test"])
        train = None
        if splits["train"]:
            train = task_dir / "train.jsonl"
            _write_jsonl(train, splits["train"])
        name = f"{key}_{lang}"
        spec = task_yaml(name, task_dir / "test.jsonl", train, num_fewshot.get(key, 0))
        with atomic_path(task_dir / f"{key}.yaml") as tmp:
            tmp.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
        manifest["tasks"][key] = {"task": name, "test": len(splits["test"]),
                                  "train": len(splits["train"])}
    return manifest


def relocated_include_dir(task_dir: str | Path, tmp_dir: str | Path) -> Path:
    """Copies of the task YAMLs under ``task_dir`` with their data files pointed at the JSONL
    files beside each YAML (absolute paths), in ``tmp_dir``: what lm-eval reads (the YAMLs
    name their files relative to themselves, so a moved or copied results directory keeps
    working)."""
    task_dir, tmp_dir = Path(task_dir), Path(tmp_dir)
    for path in sorted(task_dir.glob("*/*.yaml")):
        spec = yaml.safe_load(path.read_text())
        files = spec.get("dataset_kwargs", {}).get("data_files", {})
        for split, old in files.items():
            files[split] = str((path.parent / Path(old).name).resolve())
        target = tmp_dir / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return tmp_dir
