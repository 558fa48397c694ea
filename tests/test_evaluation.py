"""Evaluation stage: answer scoring, tokenizer statistics, task catalog and config checks,
the result contract and the miniature world's benchmarks (fast unit tests)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from embtransfer.config.validation import ConfigError, validate_config
from embtransfer.core.atomic import write_json
from embtransfer.core.grid import evaluated_runs, evaluated_sources
from embtransfer.evaluation import task_catalog as catalog
from embtransfer.evaluation import taskindex
from embtransfer.evaluation.record import (
    ScoreError,
    check_record,
    extract_scores,
    make_record,
    pick_metric,
)
from embtransfer.evaluation.task_catalog import (
    CATALOG,
    PAPER_TASKS,
    resolve,
    shipped_task_names,
    stock_task_names,
)
from embtransfer.evaluation.tokenizer_stats import count, tokenizer_stats
from embtransfer.evaluation.world_tasks import (
    build_world_tasks,
    passage_items,
    relocated_include_dir,
    world_task_docs,
)
from embtransfer.world.languages import build_world
from embtransfer.world.running_text import fact_frame, render

REPO = Path(__file__).resolve().parents[1]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def paper_like_config() -> dict:
    """The default config with its two target languages declared as real German/Vietnamese
    (local corpora) and the paper's task set."""
    config = default_config()
    for lang in ("ar_mini", "vi_mini"):
        config["languages"][lang] = {"corpus": {"type": "local", "train": f"{lang}.txt"},
                                     "dictionary": {"type": "file", "path": f"{lang}.dic"}}
    for key in config["models"]:
        config["models"][key].pop("mix", None)
    config["evaluation"]["tasks"] = list(PAPER_TASKS)
    config["evaluation"]["languages"] = {"ar_mini": "de", "vi_mini": "vi"}
    return config


def _add_german(config: dict) -> None:
    config["languages"]["de"] = {"corpus": {"type": "local", "train": "de.txt"},
                                 "dictionary": {"type": "file", "path": "de.dic"}}
    config["models"]["gpt2_de"] = {"type": "hub", "repo_id": "x/gpt2-de", "revision": "main"}
    config["targets"]["de"] = ["gpt2_de"]


@pytest.fixture
def fake_index(monkeypatch):
    """lm-eval's task index without building it: the names of the real index that the
    tests use (the real one is checked in test_stock_index_knows_the_paper_tasks)."""
    names = {"arc_de", "arc_vi", "hellaswag_de", "hellaswag_vi", "truthfulqa_de_mc1",
             "truthfulqa_vi_mc1", "belebele_deu_Latn", "belebele_vie_Latn",
             "belebele_eng_Latn", "mlqa_de_de", "mlqa_vi_vi", "mlqa_en_en", "mlqa_en_de",
             "mlqa_de_en", "mlqa_en_vi", "mlqa_vi_en"}
    monkeypatch.setattr(taskindex, "stock_task_index", lambda: frozenset(names))
    return names


# --- tokenizer statistics -----------------------------------------------------------------


def _word_tokenizer(vocab_words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(vocab_words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _char_tokenizer(text: str) -> PreTrainedTokenizerFast:
    chars = sorted(set(text.replace(" ", "")))
    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    # Words, then every character its own piece.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split("", "isolated")])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_fertility_and_prompt_token_ratio_by_hand():
    texts = ["ab cd", "abc d e"]  # 5 words, 12 bytes; 9 characters without spaces
    words_tok = _word_tokenizer(["ab", "cd", "abc", "d", "e"])
    chars_tok = _char_tokenizer(" ".join(texts))
    assert count(words_tok, texts) == {"tokens": 5, "words": 5, "bytes": 12,
                                       "fertility": 1.0, "tokens_per_byte": 5 / 12}
    assert count(chars_tok, texts)["tokens"] == 9
    stats = tokenizer_stats({"src": chars_tok, "tgt": words_tok},
                            {"src": "source", "tgt": "target"},
                            {"set": texts, "valid": ["abc abc"]})
    tgt = stats["tokenizers"]["tgt"]["sets"]
    assert tgt["set"]["fertility"] == 1.0
    assert tgt["set"]["ratio_to_source"] == {"src": pytest.approx(5 / 9)}
    assert tgt["valid"]["ratio_to_source"] == {"src": pytest.approx(2 / 6)}
    src = stats["tokenizers"]["src"]["sets"]
    assert src["set"]["fertility"] == pytest.approx(9 / 5)
    assert src["set"]["ratio_to_source"] == {"src": 1.0}
    assert stats["sets"]["set"] == {"documents": 2, "words": 5, "bytes": 12}
    assert stats["tokenizers"]["tgt"]["role"] == "target"


# --- catalog and config checks ---------------------------------------------------------------


def test_default_config_validates_without_lm_eval_index(monkeypatch):
    def boom():
        raise AssertionError("the miniature config must not build lm-eval's index")

    monkeypatch.setattr(taskindex, "stock_task_index", boom)
    config = validate_config(default_config())
    assert all(CATALOG[k].source == "world" for k in config["evaluation"]["tasks"])
    assert stock_task_names(config) == []


def test_paper_task_names_per_language(fake_index):
    config = validate_config(paper_like_config())
    names = {key: resolve(config, key, "ar_mini").lm_eval_task for key in PAPER_TASKS}
    assert names == {
        "arc": "arc_de", "hellaswag": "hellaswag_de", "truthfulqa": "truthfulqa_de_mc1",
        "belebele": "belebele_deu_Latn", "belebele_en": "belebele_eng_Latn",
        "mlqa": "mlqa_de_de", "mlqa_en": "mlqa_en_en", "xquad": "embt_xquad_de",
        "xquad_en": "embt_xquad_en", "mlqa_ctx_en": "mlqa_en_de", "mlqa_ctx_target": "mlqa_de_en",
    }
    assert resolve(config, "mlqa", "ar_mini").num_fewshot == 3
    assert resolve(config, "arc", "ar_mini").num_fewshot == 0
    assert stock_task_names(config) == sorted(fake_index)
    assert shipped_task_names(config) == ["embt_xquad_de", "embt_xquad_en", "embt_xquad_vi"]
    spec = resolve(config, "mlqa_ctx_en", "vi_mini")
    assert (spec.kind, spec.note) == ("crosslingual", "context=en,question=target")


@pytest.mark.parametrize("edit, key, words", [
    (lambda c: c["evaluation"].update(tasks=["arc", "arcc"]), "evaluation.tasks", "'arcc'"),
    # Okapi has no English-code "en" version: a language lacking the task.
    (lambda c: c["evaluation"]["languages"].update(vi_mini="en"), "evaluation.tasks",
     "no version for language 'en'"),
    (lambda c: c["evaluation"]["languages"].update(vi_mini="xx"), "evaluation.tasks",
     "language 'xx'"),
    (lambda c: c["evaluation"]["languages"].update(de_real="de"), "evaluation.languages.de_real",
     "not defined"),
    (lambda c: c["evaluation"].update(num_fewshot={"mlqa_xx": 2}),
     "evaluation.num_fewshot.mlqa_xx", "not in evaluation.tasks"),
    (lambda c: c["evaluation"].update(select={"methods": ["salty"]}),
     "evaluation.select.methods", "'salty'"),
    (lambda c: _add_german(c) or c["evaluation"].update(tasks=["world_facts"]),
     "evaluation.tasks", "'de' is not a language of the miniature world"),
])
def test_bad_evaluation_config_names_the_key(fake_index, edit, key, words):
    config = paper_like_config()
    edit(config)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert f"config key {key}" in str(err.value) and words in str(err.value), str(err.value)


def test_task_unknown_to_lm_eval_is_refused(fake_index, monkeypatch):
    monkeypatch.setattr(taskindex, "stock_task_index",
                        lambda: frozenset(fake_index - {"hellaswag_vi"}))
    with pytest.raises(ConfigError, match="config key evaluation.tasks: lm-eval has no task "
                                          "'hellaswag_vi'"):
        validate_config(paper_like_config())


def test_schema_refuses_unknown_keys_and_bad_values():
    config = default_config()
    config["evaluation"]["taks"] = ["world_facts"]
    with pytest.raises(ConfigError, match="config key evaluation"):
        validate_config(config)
    config = default_config()
    config["evaluation"]["stages"] = ["zeroshot"]
    with pytest.raises(ConfigError, match="config key evaluation.stages"):
        validate_config(config)


def test_task_index_is_cached_on_disk(tmp_path, monkeypatch):
    import lm_eval.tasks

    calls = []

    class FakeManager:
        def __init__(self):
            calls.append(1)
            self.all_tasks = ["b_task", "a_task"]

    monkeypatch.setenv("EMBTRANSFER_CACHE", str(tmp_path))
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", FakeManager)
    taskindex.stock_task_index.cache_clear()
    try:
        assert taskindex.stock_task_index() == {"a_task", "b_task"}
        path = taskindex.cache_file()
        assert path.parent == tmp_path and json.loads(path.read_text())["names"] == [
            "a_task", "b_task"]
        taskindex.stock_task_index.cache_clear()
        assert taskindex.stock_task_index() == {"a_task", "b_task"}
        assert len(calls) == 1  # the second process-level call read the file
    finally:
        taskindex.stock_task_index.cache_clear()


@pytest.mark.slow
def test_stock_index_knows_the_paper_tasks():
    index = taskindex.stock_task_index()
    config = validate_config(paper_like_config())
    assert set(stock_task_names(config)) <= index


def test_evaluated_runs_follow_lapt_and_selection():
    # both miniature sources (the default runs one; config/mini_full.yaml both)
    config = validate_config({**default_config(), "sources": ["llama_mini", "gemma_mini"]})
    from embtransfer.core.grid import lapt_runs, transfer_runs

    assert evaluated_runs(config, "lapt") == lapt_runs(config)
    assert evaluated_runs(config, "transfer") == lapt_runs(config)
    assert len(evaluated_sources(config)) == len(config["targets"]) * len(config["sources"])
    config["lapt"]["enabled"] = False
    assert evaluated_runs(config, "lapt") == []
    assert evaluated_runs(config, "transfer") == transfer_runs(config)
    config["evaluation"]["select"] = {"methods": ["salt"], "sources": ["gemma_mini"],
                                      "targets": None}
    runs = evaluated_runs(config, "transfer")
    assert runs and {(r.method, r.source) for r in runs} == {("salt", "gemma_mini")}
    assert {s for _, s in evaluated_sources(config)} == {"gemma_mini"}
    config["evaluation"]["stages"] = ["lapt"]
    assert evaluated_runs(config, "transfer") == [] and evaluated_sources(config) == []


# --- the result contract ---------------------------------------------------------------------


def _spec(config=None):
    config = config or validate_config(default_config())
    return resolve(config, "world_mrc", "ar_mini")


META = {"stage": "transfer", "lang": "ar_mini", "source": "llama_mini",
        "target": "gpt2_ar_mini", "method": "salt"}


def test_record_follows_the_contract(tmp_path):
    raw = {"alias": "x", "acc,none": 0.25, "acc_stderr,none": 0.05, "acc_norm,none": 0.5,
           "acc_norm_stderr,none": "N/A"}
    record = make_record(_spec(), **META, task_results=raw, n_samples=8, limit=None,
                         lm_eval_version="0.4.13")
    assert record["scores"] == {"MRC acc": 25.0} and record["stderr"] == {"MRC acc": 5.0}
    assert record["task"] == "world_mrc" and record["lm_eval_task"] == "world_mrc_ar_mini"
    assert (record["kind"], record["eval_language"], record["note"]) == (
        "mrc", "target", "eval_language=target")
    assert record["num_fewshot"] == 1 and record["metrics_used"] == {"MRC acc": "acc,none"}
    write_json(tmp_path / "r.json", record)
    assert json.loads((tmp_path / "r.json").read_text())["scores"] == {"MRC acc": 25.0}


def test_metric_preference_and_filters():
    assert pick_metric({"acc,none": 0.1}, ("acc_norm", "acc")) == "acc,none"
    assert pick_metric({"acc,none": 0.1, "acc_norm,none": 0.2}, ("acc_norm", "acc")) == \
        "acc_norm,none"
    assert pick_metric({"exact_match,none": 1, "exact_match,strict": 0},
                       ("exact_match",)) == "exact_match,none"
    with pytest.raises(ScoreError, match="several filters"):
        pick_metric({"exact_match,a": 1, "exact_match,b": 0}, ("exact_match",))
    scores, stderr, _ = extract_scores({"f1,none": 0.5, "f1_stderr,none": float("nan"),
                                        "exact_match,none": 0.25},
                                       {"MLQA EM": ("exact_match",), "MLQA F1": ("f1",)})
    assert scores == {"MLQA EM": 25.0, "MLQA F1": 50.0}
    assert stderr == {"MLQA EM": None, "MLQA F1": None}


@pytest.mark.parametrize("raw", [
    {"acc,none": float("nan")},
    {"acc,none": float("inf")},
    {"acc,none": "N/A"},
    {"acc,none": None},
    {"acc_norm,none": 0.3},  # the task's metric is missing: nothing is made up
    {},
])
def test_malformed_or_non_finite_scores_are_refused(raw):
    with pytest.raises(ScoreError):
        make_record(_spec(), **META, task_results=raw, n_samples=8, limit=None,
                    lm_eval_version="0.4.13")


def test_check_record_refuses_broken_records():
    good = make_record(_spec(), **META, task_results={"acc,none": 0.5}, n_samples=8,
                       limit=4, lm_eval_version="0.4.13")
    check_record(good)
    for change in ({"scores": {"MRC acc": float("nan")}}, {"scores": {"MRC acc": 150.0}},
                   {"stage": "zeroshot"}, {"kind": "other"}, {"target": None},
                   {"n_samples": 0}, {"limit": "all"}, {"stderr": {}},
                   {"stderr": {"MRC acc": -1.0}}):
        broken = {**copy.deepcopy(good), **change}
        with pytest.raises(ScoreError):
            check_record(broken)
    source = {**copy.deepcopy(good), "stage": "source", "target": None, "method": None}
    check_record(source)


# --- miniature-world benchmarks --------------------------------------------------------------


@pytest.fixture(scope="module")
def world():
    return build_world({}, 1234)


def test_world_tasks_are_deterministic_and_well_formed(world, tmp_path):
    sizes = {"size": 12, "fact_questions": 12, "fewshot_pool": 5, "passage_people": 3}
    docs = world_task_docs(world, "vi_mini", 7, sizes)
    assert docs == world_task_docs(world, "vi_mini", 7, sizes)
    assert docs != world_task_docs(world, "vi_mini", 8, sizes)
    assert set(docs) == {k for k, b in CATALOG.items() if b.source == "world"}
    n_choices = world["config"]["n_choices"]
    for splits in docs.values():
        assert len(splits["test"]) == 12
        for doc in splits["test"] + splits["train"]:
            assert len(doc["choices"]) == n_choices == len(set(doc["choices"]))
            assert 0 <= doc["gold"] < n_choices
    # The test and few-shot passages never coincide.
    assert not {d["text"] for d in docs["world_mrc"]["test"]} & {
        d["text"] for d in docs["world_mrc"]["train"]}
    # Languages of context and question.
    src = world["source_language"]
    langs = {k: (docs[k]["test"][0]["context_language"], docs[k]["test"][0]["question_language"])
             for k in ("world_mrc", "world_mrc_en", "world_xl_ctx_en", "world_xl_ctx_target")}
    assert langs == {"world_mrc": ("vi_mini", "vi_mini"), "world_mrc_en": (src, src),
                     "world_xl_ctx_en": (src, "vi_mini"),
                     "world_xl_ctx_target": ("vi_mini", src)}


def test_passage_questions_are_answerable_from_the_passage(world):
    from embtransfer.evaluation.world_tasks import passage_doc

    items = passage_items(world, 20, 3, "test", 3)
    for item in items:
        facts, asked = item["facts"], item["facts"][item["asked"]]
        assert len(facts) == 3
        assert len({f["relation"] for f in facts}) == 3  # one relation a person
        assert len({f["subject"] for f in facts}) == 3
        assert {f["subject"] for f in facts} <= set(world["entities"]["extra_names"])
        assert item["choices"][item["gold"]] == asked["value"]
        # The passage states exactly one of the choices: reading it answers the question.
        stated = {(f["value_type"], f["value"]) for f in facts}
        assert [(asked["value_type"], c) in stated for c in item["choices"]].count(True) == 1
        for lang in ("en_mini", "ar_mini"):
            sentence = render(world, fact_frame(world, asked), lang)
            doc = passage_doc(world, item, lang, lang)
            assert sentence in doc["text"]
            query = doc["text"].rsplit(". ", 1)[1]  # the passage's sentences end with "."
            assert (query + " " + doc["choices"][doc["gold"]]).strip() == sentence


def test_passage_people_schema_bound_is_the_number_of_passage_relations():
    # One relation a person: a passage cannot talk about more people than there are
    # relations, and the config check must say so rather than the passage quietly shrink.
    from embtransfer.config.validation import load_schema
    from embtransfer.world.running_text import PASSAGE_RELATIONS

    world_cfg = load_schema()["properties"]["evaluation"]["properties"]["world"]
    assert world_cfg["properties"]["passage_people"]["maximum"] == len(PASSAGE_RELATIONS)


def test_world_task_directory_and_relocation(world, tmp_path):
    out = tmp_path / "bench" / "ar_mini"
    manifest = build_world_tasks(world, "ar_mini", out, 5, {"size": 6, "fewshot_pool": 4},
                                 {"world_mrc": 3})
    assert manifest["tasks"]["world_mrc"] == {"task": "world_mrc_ar_mini", "test": 6,
                                              "train": 4}
    spec = yaml.safe_load((out / "world_mrc" / "world_mrc.yaml").read_text())
    assert spec["num_fewshot"] == 3 and spec["fewshot_split"] == "train"
    lines = (out / "world_mrc" / "test.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(isinstance(json.loads(x)["gold"], int) for x in lines)
    # The fact tasks ask every fact unless told otherwise: those answered by shared material
    # and those answered by native words, between them.
    assert (manifest["tasks"]["world_facts"]["test"] + manifest["tasks"]["world_words"]["test"]
            == len(world["facts"]))
    # Moved elsewhere, the relocated copies point at the moved files.
    moved = tmp_path / "moved"
    (tmp_path / "bench").rename(moved)
    inc = relocated_include_dir(moved / "ar_mini", tmp_path / "inc")
    spec = yaml.safe_load((inc / "world_mrc" / "world_mrc.yaml").read_text())
    assert Path(spec["dataset_kwargs"]["data_files"]["test"]) == (
        moved / "ar_mini" / "world_mrc" / "test.jsonl").resolve()


def test_world_task_files_do_not_depend_on_where_they_were_built(world, tmp_path):
    """The same world and seed give byte-identical task directories wherever they are
    written (a YAML naming its build directory would differ run to run: the atomic write
    builds in a temporary directory)."""
    sizes, shots = {"size": 6, "fewshot_pool": 4}, {"world_mrc": 3}
    a, b = tmp_path / "a" / "ar_mini", tmp_path / "elsewhere" / "b"
    build_world_tasks(world, "ar_mini", a, 5, sizes, shots)
    build_world_tasks(world, "ar_mini", b, 5, sizes, shots)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_catalog_is_consistent():
    for key, bench in CATALOG.items():
        assert bench.key == key and bench.kind in catalog.KINDS
        assert bench.eval_language in ("target", "english")
        assert bench.metrics and all(isinstance(v, tuple) for v in bench.metrics.values())
        if bench.kind == "crosslingual":
            assert bench.note.startswith("context=")
        elif bench.kind == "mrc":
            assert bench.note == f"eval_language={bench.eval_language}"
        elif bench.eval_language == "english":
            # English knowledge rows must not collide with the target rows in Table 1.
            assert all("(English)" in name for name in bench.metrics)


# --- local datasets directory ----------------------------------------------------------------


def test_local_dataset_overrides_point_at_every_split_file(tmp_path):
    from embtransfer.evaluation.datasets import DatasetMissing, dataset_dir, local_dataset_overrides

    fixtures = REPO / "tests" / "fixtures" / "lm_eval"
    cfg = {"task": "arc_de", "dataset_path": "alexandrainst/m_arc", "dataset_name": "de",
           "training_split": "train", "validation_split": "validation", "test_split": "test"}
    over = local_dataset_overrides(cfg, fixtures, cache_dir=tmp_path)
    files = over["dataset_kwargs"]["data_files"]
    # The hub's split names (m_arc has val, not the validation lm-eval's config names).
    assert sorted(files) == ["test", "train", "val"]
    assert files["test"] == str(fixtures / "alexandrainst" / "m_arc" / "de" / "test.jsonl")
    assert over["dataset_path"] == "json" and over["dataset_name"] is None
    assert over["dataset_kwargs"]["cache_dir"] == str(tmp_path)
    with pytest.raises(DatasetMissing, match=r"'test'.*found none.*fetch_lm_eval_datasets"):
        local_dataset_overrides(cfg, tmp_path)
    assert dataset_dir("root", "Rowan/hellaswag", None) == Path("root/Rowan/hellaswag/default")
    with pytest.raises(ValueError, match="hub dataset id"):
        dataset_dir("root", "../etc", "x")


# --- how lm-eval encodes a continuation ------------------------------------------------------


@pytest.mark.parametrize("algorithm,family", [("unigram", "t5"), ("wordpiece", "bert"),
                                              ("bytelevel_bpe", "llama")])
def test_lm_eval_scores_exactly_the_continuation_whatever_the_tokenizer_adds(
        world, tmp_path, algorithm, family):
    """T5's tokenizer appends </s> and BERT's wraps [CLS] ... [SEP]: lm-eval's default
    encoding then cut the continuation wrong (every choice scored as "." + </s>, all equal)."""
    from lm_eval.models.huggingface import HFLM

    from embtransfer.evaluation.runner import hflm_kwargs
    from embtransfer.models.pretrain import build_model
    from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer
    from embtransfer.world.running_text import generate_sentences

    text = tmp_path / "text.txt"
    text.write_text("\n".join(generate_sentences(world, "en_mini", 400, 1)) + "\n")
    tok = train_tokenizer(algorithm, [str(text)], 600, family)
    model = build_model("llama", len(tok), None, False, special_token_ids(tok), 0)
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    lm = HFLM(pretrained=str(tmp_path / "ckpt"), device="cpu", batch_size=1, **hflm_kwargs(tok))
    for line in text.read_text().splitlines()[:20]:
        context, rest = line.split(" ", 1)
        _, continuation = lm._encode_pair(context, " " + rest)
        plain = tok(line, add_special_tokens=False)["input_ids"]
        assert continuation == plain[len(tok(context, add_special_tokens=False)["input_ids"]):]


def test_reusing_hflm_encodes_as_lm_eval_does_once_per_string(world, tmp_path):
    """The evaluation's HFLM keeps each string's tokens: the same tokens as lm-eval's own
    HFLM for every argument, the tokenizer called once per distinct string, and a caller
    that changes its list does not change the next answer."""
    from lm_eval.models.huggingface import HFLM

    from embtransfer.evaluation.runner import ReusingHFLM, hflm_kwargs
    from embtransfer.models.pretrain import build_model
    from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer
    from embtransfer.world.running_text import generate_sentences

    lines = generate_sentences(world, "en_mini", 200, 1)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines) + "\n")
    tok = train_tokenizer("bytelevel_bpe", [str(text)], 400, "llama")
    build_model("llama", len(tok), None, False, special_token_ids(tok), 0).save_pretrained(
        tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    kwargs = {"pretrained": str(tmp_path / "ckpt"), "device": "cpu", "batch_size": 1,
              **hflm_kwargs(tok)}
    plain, reusing = HFLM(**kwargs), ReusingHFLM(**kwargs)
    assert reusing.max_length == plain.max_length

    calls: list[str] = []
    encode = reusing.tokenizer.encode
    reusing.tokenizer.encode = lambda s, **kw: calls.append(s) or encode(s, **kw)
    asks = [(line, special, cut) for line in lines[:10] + lines[:10]
            for special in (None, False, True) for cut in (None, 3)]
    for string, special, cut in asks:
        got = reusing.tok_encode(string, add_special_tokens=special, left_truncate_len=cut)
        assert got == plain.tok_encode(string, add_special_tokens=special,
                                       left_truncate_len=cut)
        got.append(-1)  # the caller's list, not the kept one
    assert len(calls) == len(set(asks)) == 60


def test_checkpoints_are_evaluated_in_float32_on_the_cpu(world, tmp_path, monkeypatch):
    """lm-eval's HFLM gets float32 on the CPU (which emulates bf16, slowly) and the
    checkpoint's own dtype elsewhere; evaluate_text shares the rule
    (tests/test_zeroshot_text.py)."""
    from embtransfer.core.devices import inference_dtype
    from embtransfer.evaluation import runner
    from embtransfer.models.pretrain import build_model
    from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer
    from embtransfer.world.running_text import generate_sentences

    text = tmp_path / "text.txt"
    text.write_text("\n".join(generate_sentences(world, "en_mini", 200, 1)) + "\n")
    tok = train_tokenizer("bytelevel_bpe", [str(text)], 400, "llama")
    build_model("llama", len(tok), None, False, special_token_ids(tok), 0).save_pretrained(
        tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")

    class Loaded(Exception):
        pass

    seen: dict = {}

    def fake_hflm(**kwargs):
        seen.update(kwargs)
        raise Loaded

    monkeypatch.setattr(runner, "ReusingHFLM", fake_hflm)
    with pytest.raises(Loaded):
        runner.evaluate_checkpoint(tmp_path / "ckpt", [], [], meta={}, device="cpu")
    assert seen["device"] == "cpu" and seen["dtype"] == "float32"
    assert inference_dtype("cuda") == inference_dtype("cuda:1") == "auto"
