"""The paper's lm-eval tasks end to end, offline: the REAL task configs of the installed
lm-eval (Okapi ARC / HellaSwag / TruthfulQA mc1, Belebele, MLQA monolingual and
cross-lingual) and the shipped XQuAD run through embtransfer's runner on a tiny random
model, reading fixture data in each hub dataset's schema from a local datasets directory
(tests/fixtures/lm_eval, written by its make_fixtures.py). A renamed column, a renamed
split, a renamed prompt field or a wrong metric name fails."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from embtransfer.evaluation.datasets import DatasetMissing
from embtransfer.evaluation.record import ScoreError
from embtransfer.evaluation.runner import evaluate_checkpoint
from embtransfer.evaluation.task_catalog import SHIPPED_TASK_DIR, TaskSpec, resolve
from embtransfer.models.tokenizer_training import train_tokenizer

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lm_eval"
LANGS = ("de", "ar", "vi")
TARGET_KEYS = ("arc", "hellaswag", "truthfulqa", "belebele", "mlqa", "xquad", "mlqa_ctx_en",
               "mlqa_ctx_target")
ENGLISH_KEYS = ("arc_en", "hellaswag_en", "truthfulqa_en", "belebele_en", "mlqa_en",
                "xquad_en")
LIMIT = 2
META = {"stage": "source", "lang": "x", "source": "tiny", "target": None, "method": None}


def _spec(key: str, lang: str = "de") -> TaskSpec:
    return resolve({"evaluation": {}}, key, lang)


def all_specs() -> list[TaskSpec]:
    return [_spec(k, lang) for lang in LANGS for k in TARGET_KEYS] + [
        _spec(k) for k in ENGLISH_KEYS]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random GPT-2 with a byte-level BPE trained on the fixtures' text."""
    import transformers as tf

    out = tmp_path_factory.mktemp("lm_eval_model")
    text = out / "text.txt"
    text.write_text("\n".join(p.read_text(encoding="utf-8")
                              for p in sorted(FIXTURES.rglob("*.jsonl"))), encoding="utf-8")
    tok = train_tokenizer("bytelevel_bpe", [str(text)], 600, "gpt2")
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(
        n_embd=32, n_layer=1, n_head=2, n_positions=1024, vocab_size=len(tok),
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    with torch.no_grad():
        # Spread-out embeddings (choices' likelihoods differ), and a final-norm bias toward
        # the newline token, which ends every generation: random babble up to the tasks'
        # token limit (MLQA's is lm-eval's default, 256) would dominate the run time.
        model.get_input_embeddings().weight.normal_(0, 1.0)
        newline = tok.convert_tokens_to_ids("\u010a")  # byte-level "\n"
        model.transformer.ln_f.bias.copy_(2.0 * model.get_input_embeddings().weight[newline])
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    return out / "model"


@pytest.fixture(scope="module")
def manager():
    """lm-eval's own task index plus the shipped tasks (built once: it scans every YAML)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(SHIPPED_TASK_DIR)])


def run(model_dir, specs, tmp_path, manager, datasets_dir=FIXTURES, **kwargs):
    outputs = [tmp_path / f"{s.key}_{s.lm_eval_task}.json" for s in specs]
    return evaluate_checkpoint(
        model_dir, specs, outputs, meta=META, device="cpu", batch_size=4, limit=LIMIT,
        seed=1, max_length=1024, datasets_dir=datasets_dir, manager=manager,
        **kwargs), outputs


def test_every_paper_task_config_runs_on_local_data(model_dir, manager, tmp_path):
    specs = all_specs()
    names = {s.lm_eval_task for s in specs}
    assert {"arc_de", "hellaswag_ar", "truthfulqa_vi_mc1", "belebele_arb_Arab", "mlqa_de_de",
            "mlqa_en_vi", "mlqa_ar_en", "embt_xquad_vi", "arc_challenge", "hellaswag",
            "truthfulqa_mc1", "belebele_eng_Latn", "mlqa_en_en", "embt_xquad_en"} <= names
    records, outputs = run(model_dir, specs, tmp_path, manager)
    assert len(records) == len(specs)
    for spec, record, out in zip(specs, records, outputs, strict=True):
        assert json.loads(out.read_text()) == record
        assert record["lm_eval_task"] == spec.lm_eval_task
        assert record["n_samples"] == LIMIT, spec
        assert set(record["scores"]) == set(spec.metrics)
        assert all(math.isfinite(v) and 0 <= v <= 100 for v in record["scores"].values())
        if spec.answer_language:  # MLQA and XQuAD: each by its own protocol
            assert record["scoring"] == {"protocol": spec.scoring_protocol,
                                         "answer_language": spec.answer_language, "nfc": False}
    by_task = {r["lm_eval_task"]: r for r in records}
    # The cross-lingual MLQA answers are in the context's language.
    assert by_task["mlqa_en_de"]["scoring"]["answer_language"] == "en"
    assert by_task["mlqa_de_en"]["scoring"]["answer_language"] == "de"
    assert by_task["mlqa_de_de"]["scoring"]["protocol"] == "mlqa_official"
    assert by_task["embt_xquad_de"]["scoring"]["protocol"] == "squad_v1.1"
    # Metrics as lm-eval names them: ARC acc_norm, HellaSwag acc, TruthfulQA mc1 acc.
    assert by_task["arc_de"]["metrics_used"] == {"ARC": "acc_norm,none"}
    assert by_task["truthfulqa_de_mc1"]["metrics_used"] == {"TruthfulQA": "acc,none"}
    assert by_task["mlqa_vi_vi"]["metrics_used"] == {"MLQA EM": "exact_match,none",
                                                     "MLQA F1": "f1,none"}


def _copy_fixture(tmp_path: Path, rel: str) -> Path:
    root = tmp_path / "data"
    shutil.copytree(FIXTURES / rel, root / rel)
    return root


def _rename_key(directory: Path, old: str, new: str) -> None:
    for path in directory.glob("*.jsonl"):
        rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        rows = [{(new if k == old else k): v for k, v in r.items()} for r in rows]
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")


@pytest.mark.parametrize("key, rel, old, new", [
    ("arc", "alexandrainst/m_arc/de", "instruction", "question"),  # read by process_docs
    ("belebele", "facebook/belebele/deu_Latn", "flores_passage", "passage"),  # doc_to_text
    ("hellaswag", "alexandrainst/m_hellaswag/de", "label", "gold"),  # doc_to_target
    ("mlqa", "facebook/mlqa/mlqa.de.de", "answers", "answer"),  # process_docs
    ("xquad", "google/xquad/xquad.de", "question", "query"),  # shipped doc_to_text
])
def test_a_renamed_column_fails(model_dir, manager, tmp_path, key, rel, old, new):
    root = _copy_fixture(tmp_path, rel)
    run(model_dir, [_spec(key)], tmp_path, manager, datasets_dir=root)  # the copy is fine
    _rename_key(root / rel, old, new)
    with pytest.raises(Exception, match=old):
        run(model_dir, [_spec(key)], tmp_path, manager, datasets_dir=root)


def test_a_renamed_or_missing_split_fails_naming_the_file(model_dir, manager, tmp_path):
    rel = "alexandrainst/m_hellaswag/de"
    root = _copy_fixture(tmp_path, rel)
    (root / rel / "val.jsonl").rename(root / rel / "validation.jsonl")
    with pytest.raises(DatasetMissing, match=r"m_hellaswag/de/\{split\}\.jsonl.*'val'"):
        run(model_dir, [_spec("hellaswag")], tmp_path, manager, datasets_dir=root)
    with pytest.raises(DatasetMissing, match="fetch_lm_eval_datasets"):
        run(model_dir, [_spec("arc")], tmp_path, manager, datasets_dir=tmp_path / "empty")
    # Few-shot examples come from a split the evaluation split does not replace.
    rel = "alexandrainst/m_arc/de"
    root = _copy_fixture(tmp_path / "arc", rel)
    (root / rel / "train.jsonl").unlink()
    with pytest.raises(Exception, match="train"):
        run(model_dir, [resolve({"evaluation": {"num_fewshot": {"arc": 2}}}, "arc", "de")],
            tmp_path, manager, datasets_dir=root)


def test_a_wrong_metric_name_fails(model_dir, manager, tmp_path):
    spec = _spec("truthfulqa")
    wrong = TaskSpec(**{**spec.__dict__, "metrics": {"TruthfulQA": ("mc1",)}})
    with pytest.raises(ScoreError, match="mc1"):
        run(model_dir, [wrong], tmp_path, manager)


def test_nfc_option_reaches_the_scoring(model_dir, manager, tmp_path):
    (record,), _ = run(model_dir, [_spec("xquad", "vi")], tmp_path, manager, nfc=True)
    assert record["scoring"] == {"protocol": "squad_v1.1", "answer_language": "vi",
                                 "nfc": True}


@pytest.mark.parametrize(("scoring", "xquad", "mlqa"), [
    # "der Rhein" against the gold "Rhein": MLQA's German rules drop the article (EM 1);
    # SQuAD v1.1 drops English articles only (EM 0, F1 2/3).
    ({}, (0.0, 200 / 3), (100.0, 100.0)),  # each dataset by its own protocol
    ({"xquad": "mlqa_official", "mlqa": "squad_v1.1"}, (100.0, 100.0), (0.0, 200 / 3)),
])
def test_the_protocol_that_scores_is_the_one_named(model_dir, manager, tmp_path, monkeypatch,
                                                   scoring, xquad, mlqa):
    """The scores themselves (not only the record's label) come from the configured
    protocol: the model answers "der Rhein" to every question whose gold is "Rhein"."""
    from lm_eval.models.huggingface import HFLM

    root = tmp_path / "data"
    for rel in ("google/xquad/xquad.de", "facebook/mlqa/mlqa.de.de"):
        shutil.copytree(FIXTURES / rel, root / rel)
        for path in (root / rel).glob("*.jsonl"):
            rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
            for row in rows:
                row["answers"] = {"answer_start": [0], "text": ["Rhein"]}
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                            encoding="utf-8")
    monkeypatch.setattr(HFLM, "generate_until",
                        lambda self, requests, disable_tqdm=False: ["der Rhein"] * len(requests))
    config = {"evaluation": {"scoring": scoring}}
    specs = [resolve(config, "xquad", "de"), resolve(config, "mlqa", "de")]
    records, _ = run(model_dir, specs, tmp_path, manager, datasets_dir=root)
    for record, (em, f1), name in zip(records, (xquad, mlqa), ("XQuAD", "MLQA"), strict=True):
        assert record["scores"][f"{name} EM"] == pytest.approx(em)
        assert record["scores"][f"{name} F1"] == pytest.approx(f1)
        assert record["scoring"]["protocol"] == (
            scoring.get(name.lower()) or {"XQuAD": "squad_v1.1", "MLQA": "mlqa_official"}[name])


def test_evaluation_skips_lm_evals_environment_survey(model_dir, manager, tmp_path, monkeypatch):
    """lm-eval surveys the machine (pip list, conda, nvidia-smi, lscpu) in every
    simple_evaluate call, ~0.3-2 s a task; the records never use it, so a job skips it."""
    from torch.utils import collect_env

    calls = []
    monkeypatch.setattr(collect_env, "get_pretty_env_info", lambda: calls.append(1) or "")
    specs = [s for s in all_specs() if s.lm_eval_task in ("arc_de", "hellaswag_ar")]
    records, _ = run(model_dir, specs, tmp_path, manager)
    assert len(records) == 2 and calls == []
    import lm_eval.evaluator  # the patch is scoped to the job's evaluation

    assert lm_eval.evaluator.add_env_info.__module__ == "lm_eval.loggers.utils"
