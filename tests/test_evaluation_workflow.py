"""Evaluation end to end: miniature-world tasks through lm-eval offline on a tiny model
(scores checked against an independent computation), and the evaluation rules in a
temporary copy of the workflow."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from embtransfer.config.validation import validate_config
from embtransfer.evaluation.record import check_record
from embtransfer.evaluation.runner import evaluate_checkpoint
from embtransfer.evaluation.task_catalog import resolve
from embtransfer.evaluation.world_tasks import build_world_tasks
from embtransfer.models.tokenizer_training import train_tokenizer
from embtransfer.world.languages import build_world
from embtransfer.world.running_text import generate_sentences

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
LANG = "ar_mini"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A world's benchmarks and a tiny random GPT-2 with a byte-level BPE trained here."""
    import transformers as tf

    out = tmp_path_factory.mktemp("eval")
    world = build_world({}, 1234)
    text = out / "text.txt"
    lines = generate_sentences(world, "en_mini", 300, 1) + generate_sentences(world, LANG, 300, 1)
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_tokenizer("bytelevel_bpe", [str(text)], 400, "gpt2")
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(
        n_embd=32, n_layer=1, n_head=2, n_positions=512, vocab_size=len(tok),
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    with torch.no_grad():  # far from uniform, so the choices' likelihoods differ clearly
        model.get_input_embeddings().weight.normal_(0, 1.0)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    bench = out / "bench" / LANG
    build_world_tasks(world, LANG, bench, 1234,
                      {"size": 12, "fact_questions": 12, "fewshot_pool": 5}, {})
    return out / "model", bench


def _loglikelihood(model, tok, context: str, continuation: str) -> float:
    """log P(continuation | context), encoded the way lm-eval documents it: trailing
    spaces of the context move to the continuation, the pair is encoded whole and the
    context's tokens split off."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    cont = whole[len(ctx):]
    ids = torch.tensor([(ctx + cont)[:-1]])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    positions = range(len(ctx) - 1, len(ctx) - 1 + len(cont))
    return float(sum(logprobs[p, t] for p, t in zip(positions, cont, strict=True)))


def _independent_acc(model_dir: Path, test_file: Path) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    docs = [json.loads(line) for line in test_file.read_text().splitlines()]
    right = 0
    for doc in docs:
        scores = [_loglikelihood(model, tok, doc["text"], " " + c) for c in doc["choices"]]
        right += max(range(len(scores)), key=scores.__getitem__) == doc["gold"]
    return 100.0 * right / len(docs)


def test_world_tasks_run_offline_and_match_an_independent_computation(tiny, tmp_path,
                                                                      monkeypatch):
    model_dir, bench = tiny
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    specs = [
        # Zero-shot, so the independent computation needs no few-shot sampling.
        dataclasses.replace(resolve(config, "world_mrc", LANG), num_fewshot=0),
        resolve(config, "world_facts", LANG),
        resolve(config, "world_xl_ctx_en", LANG),  # three-shot, as configured
    ]
    outputs = [tmp_path / f"{s.key}.json" for s in specs]
    meta = {"stage": "transfer", "lang": LANG, "source": "llama_mini",
            "target": "gpt2_ar_mini", "method": "salt"}
    evaluate_checkpoint(model_dir, specs, outputs, meta=meta, world_dir=bench, device="cpu",
                        batch_size=4, seed=1234)
    records = {s.key: json.loads(o.read_text()) for s, o in zip(specs, outputs, strict=True)}
    for key, record in records.items():
        check_record(record)
        assert record["task"] == key and record["lm_eval_task"] == f"{key}_{LANG}"
        assert record["n_samples"] == 12 and record["limit"] is None
        assert {k: record[k] for k in ("stage", "lang", "source", "target", "method")} == meta
    assert records["world_xl_ctx_en"]["num_fewshot"] == 1  # the world's passage tasks
    assert records["world_xl_ctx_en"]["note"] == "context=en,question=target"
    assert records["world_facts"]["kind"] == "knowledge"
    for key, name in (("world_mrc", "MRC acc"), ("world_facts", "Facts acc")):
        expected = _independent_acc(model_dir, bench / key / "test.jsonl")
        assert records[key]["scores"][name] == pytest.approx(expected), key

    # The same seed gives the same three-shot contexts: a second run agrees exactly.
    again = tmp_path / "again.json"
    evaluate_checkpoint(model_dir, specs[2:], [again], meta=meta, world_dir=bench,
                        device="cpu", batch_size=4, seed=1234, limit=12)
    assert json.loads(again.read_text())["scores"] == records["world_xl_ctx_en"]["scores"]


# --- the rules, in a temporary copy of the workflow ------------------------------------------


def eval_config():
    from test_workflow import small_config

    config = small_config()
    config["sources"] = ["llama_mini"]
    # A byte-level BPE and a WordPiece target (no bos/eos: [CLS] starts the prompts).
    config["targets"] = {LANG: ["gpt2_ar_mini", "bert_ar_mini"]}
    config["transfer"] = {"methods": ["random", "mean"]}
    config["lapt"] = {"enabled": False}
    config["report"] = {**config.get("report", {}), "stages": ["transfer"],
                        "focus_method": "random"}
    config["evaluation"] = {
        "tasks": ["world_facts", "world_mrc", "world_xl_ctx_en"],
        "world": {"size": 10, "fact_questions": 10, "fewshot_pool": 5},
        "device": "cpu",
    }
    return config


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    from test_workflow import copy_workflow, snakemake

    workdir = copy_workflow(tmp_path_factory.mktemp("evalwf"))
    config = eval_config()
    text = yaml.safe_dump(config, allow_unicode=True)
    # Also the copy's default config: --configfile merges into it, and a merged `targets`
    # would keep the default's vi_mini PLMs.
    (workdir / "config" / "config.yaml").write_text(text)
    (workdir / "test_config.yaml").write_text(text)
    snakemake(workdir, "--cores", "2", "evaluation")
    return workdir, config


def test_evaluation_rules_write_the_contract_files(eval_run):
    workdir, config = eval_run
    results = workdir / "results"
    tasks = config["evaluation"]["tasks"]
    paths = [results / "seed1234" / "eval" / "transfer" / LANG / "llama_mini" / plm / m
             / f"{t}.json"
             for plm in ("gpt2_ar_mini", "bert_ar_mini") for m in ("random", "mean")
             for t in tasks]
    paths += [results / "eval" / "source" / LANG / "llama_mini" / f"{t}.json" for t in tasks]
    for path in paths:
        record = json.loads(path.read_text())
        check_record(record)
        assert record["n_samples"] == 10
        assert record["task"] == path.stem
    source = json.loads((results / "eval" / "source" / LANG / "llama_mini" /
                         "world_mrc.json").read_text())
    assert source["stage"] == "source" and source["target"] is None and source["method"] is None
    stats = json.loads((results / "intrinsic" / "tokenizers" / f"{LANG}.json").read_text())
    assert set(stats["sets"]) == {"valid", *tasks}
    assert stats["tokenizers"]["llama_mini"]["role"] == "source"
    for plm in ("gpt2_ar_mini", "bert_ar_mini"):
        target = stats["tokenizers"][plm]["sets"]
        for name in ("valid", *tasks):
            assert target[name]["fertility"] > 0
            assert target[name]["ratio_to_source"]["llama_mini"] > 0
    assert (results / "benchmarks" / LANG / "manifest.json").exists()


def test_evaluation_reruns_only_what_changed(eval_run):
    from test_workflow import planned_jobs

    workdir, config = eval_run
    assert planned_jobs(workdir, "evaluation") == {}

    def jobs_after_editing(module: str) -> set[str]:
        path = workdir / "workflow" / "embtransfer" / "evaluation" / module
        original = path.read_text()
        try:
            path.write_text(original + "\n# an edit\n")
            return set(planned_jobs(workdir, "evaluation"))
        finally:
            path.write_text(original)

    # The answer scoring is the runner's code (MLQA and XQuAD), so every evaluation job's.
    assert jobs_after_editing("squad.py") == {"evaluate", "evaluate_source", "tokenizer_stats",
                                              "evaluation"}
    assert jobs_after_editing("record.py") == {"evaluate", "evaluate_source", "tokenizer_stats",
                                               "evaluation"}
    assert jobs_after_editing("world_tasks.py") == {
        "world_benchmarks", "evaluate", "evaluate_source", "tokenizer_stats", "evaluation"}
    assert planned_jobs(workdir, "evaluation") == {}


def test_job_layout_and_lapt_stage_are_planned(eval_run):
    from test_workflow import planned_jobs

    workdir, config = eval_run
    path = workdir / "test_config.yaml"
    original = path.read_text()
    n_tasks = len(config["evaluation"]["tasks"])
    try:
        changed = copy.deepcopy(config)
        changed["evaluation"]["jobs"] = "task"
        path.write_text(yaml.safe_dump(changed, allow_unicode=True))
        jobs = planned_jobs(workdir, "evaluation")
        assert jobs["evaluate"] == 4 * n_tasks and jobs["evaluate_source"] == n_tasks
        changed = copy.deepcopy(config)
        changed["lapt"] = {"enabled": True,
                           "select": [{"methods": ["random"], "targets": ["gpt2_ar_mini"]}],
                           "max_length": 32, "global_batch_size": 4, "micro_batch_size": 4,
                           "max_steps": 2}
        path.write_text(yaml.safe_dump(changed, allow_unicode=True))
        jobs = planned_jobs(workdir, "evaluation")
        # LAPT on one checkpoint: it is evaluated before and after; the other
        # transfer checkpoint is no longer evaluated (its file stays, nothing to redo).
        assert jobs.get("lapt") == 1 and jobs.get("lapt_zeroshot") == 1
        assert jobs.get("evaluate") == 1
        assert "evaluate_source" not in jobs
    finally:
        path.write_text(original)
