"""The world's fact questions: a fact of the fact base asked as a cloze multiple-choice
question in any of its languages, the statement rendered with the true value and with
distractors of the same type (:mod:`embtransfer.world.running_text` renders them)."""

from __future__ import annotations

from typing import Any

from embtransfer.world.languages import value_pool
from embtransfer.world.running_text import _rng, fact_frame, render


def fact_question(world: dict[str, Any], fact: dict[str, Any], lang: str,
                  pool: list[Any] | None = None) -> dict[str, Any]:
    """A cloze multiple-choice question about ``fact`` in ``lang``.

    The statement is rendered with the gold value and with distractor values of the same
    type; ``query`` is their common leading words and each choice is the rest of its sentence
    (so word order and morphology of the value never leak the answer). Score a choice as the
    continuation ``query + " " + choice`` (``query`` may be empty in object-first orders).
    ``pool``: the values distractors are drawn from (default: every value of the type).
    """
    n_choices = world["config"]["n_choices"]
    pool = [v for v in (value_pool(world, fact["value_type"]) if pool is None else pool)
            if v != fact["value"]]
    # Seeded by the fact only: the same question has the same choices in every language.
    rng = _rng(world["seed"], "question", fact["id"])
    values = [fact["value"], *rng.sample(pool, min(n_choices - 1, len(pool)))]
    rng.shuffle(values)
    sentences = [render(world, fact_frame(world, fact, v), lang).split(" ") for v in values]
    common = 0
    while all(len(s) > common + 1 and s[common] == sentences[0][common] for s in sentences):
        common += 1
    return {
        "id": fact["id"],
        "relation": fact["relation"],
        "value_type": fact["value_type"],
        "query": " ".join(sentences[0][:common]),
        "choices": [" ".join(s[common:]) for s in sentences],
        "values": values,
        "gold": values.index(fact["value"]),
    }
