"""The miniature world's benchmarks as local lm-eval tasks (JSONL + task YAML, no network).

For a target language ``L`` of the world (source language ``S``), :func:`build_world_tasks`
writes one directory per task key under ``out_dir`` (``results/benchmarks/{L}/{key}/``):
``test.jsonl``, ``train.jsonl`` (the few-shot pool) and ``{key}.yaml`` (an lm-eval
``multiple_choice`` task named ``{key}_{L}``; fields ``text``, ``choices``, ``gold``).

* ``world_facts`` / ``world_facts_en``: facts of the fact base whose answers are shared
  material (names, cities, companies, numbers, loanwords) as cloze questions
  (:func:`embtransfer.world.corpus.fact_question`) in ``L`` / in ``S``: knowledge that must
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
from pathlib import Path
from typing import Any

import yaml

from embtransfer.core.atomic import atomic_path
from embtransfer.world.corpus import fact_frame, fact_question, passage_facts, render
from embtransfer.world.languages import value_pool

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


def fact_docs(world: dict[str, Any], lang: str, size: int | None, seed: int,
              split: str, words: bool = False) -> list[dict[str, Any]]:
    """Cloze questions on the fact base in ``lang``: ``size`` test facts (None: all), the
    rest (up to ``size``) as the few-shot pool (``split`` = test/train).

    ``words=False``: the facts whose answers are shared material (names, cities, companies,
    numbers, loanwords), which the source and target vocabularies share. ``words=True``: the
    facts whose answers are native lexicon words, with native distractors of the same class,
    which only non-shared target tokens spell."""
    facts = [f for f in world["facts"] if word_answer(world, f) == words]
    order = list(range(len(facts)))
    _rng(seed, "world_words" if words else "world_facts").shuffle(order)
    n_test = len(facts) if size is None else min(size, len(facts))
    chosen = sorted(order[:n_test]) if split == "test" else sorted(order[n_test:][:size])
    docs = []
    for i in chosen:
        pool = native_words(world, facts[i]["value_type"]) if words else None
        q = fact_question(world, facts[i], lang, pool)
        docs.append({"id": q["id"], "text": q["query"], "choices": q["choices"],
                     "gold": q["gold"], "relation": q["relation"],
                     "values": [str(v) for v in q["values"]]})
    return docs


def passage_items(world: dict[str, Any], n: int, seed: int, split: str,
                  passage_people: int) -> list[dict[str, Any]]:
    """Language-independent passages (:func:`embtransfer.world.corpus.passage_facts`): per
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


def world_task_docs(world: dict[str, Any], lang: str, seed: int,
                    sizes: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """key -> split -> documents, for every world task key of target language ``lang``."""
    sizes = {**DEFAULT_SIZES, **sizes}
    src = world["source_language"]
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for key, q_lang, words in (("world_facts", lang, False), ("world_facts_en", src, False),
                               ("world_words", lang, True), ("world_words_en", src, True)):
        out[key] = {split: fact_docs(world, q_lang, sizes["fact_questions"], seed, split, words)
                    for split in ("test", "train")}
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
                      sizes: dict[str, Any], num_fewshot: dict[str, int]) -> dict[str, Any]:
    """Write every world task of ``lang`` under ``out_dir`` (see the module docstring).

    ``out_dir`` is written in place; wrap the call in ``atomic_path(directory=True)``.
    Returns a manifest (key -> task name, document counts).
    """
    if lang not in world["languages"]:
        raise ValueError(f"{lang!r} is not a language of the miniature world")
    out_dir = Path(out_dir)
    manifest: dict[str, Any] = {"lang": lang, "source_language": world["source_language"],
                                "seed": seed, "sizes": {**DEFAULT_SIZES, **sizes}, "tasks": {}}
    for key, splits in world_task_docs(world, lang, seed, sizes).items():
        task_dir = out_dir / key
        task_dir.mkdir(parents=True, exist_ok=True)
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
