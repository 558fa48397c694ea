"""analysis/probe_copying.py runs, and its baseline holds: the miniature source's
architecture learns to copy exact repeats within a few hundred steps (the contrast
`docs/design.md` §8 draws with name-to-value binding, which the script shows not forming)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _probe():
    spec = importlib.util.spec_from_file_location("probe_copying",
                                                  REPO / "analysis" / "probe_copying.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_source_architecture_learns_to_copy_repeats(capsys):
    _probe().main(["--task", "repeat", "--steps", "300", "--eval-every", "300"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert float(last.split("accuracy")[1]) >= 0.9, last


def test_probe_questions_have_one_right_answer_among_their_candidates():
    import random

    probe = _probe()
    rng = random.Random(0)
    for task in ("binding", "relation"):
        for _ in range(50):
            text, question, answer, candidates = probe._passage(rng, task)
            assert answer in candidates and len(set(candidates)) == len(candidates)
            # The question's passage is the statements; the answer is stated in it.
            assert answer in question
            if task == "relation":  # only the answer is stated among the candidates
                assert sum(c in question for c in candidates) == 1
