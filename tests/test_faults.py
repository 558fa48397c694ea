"""The fault table (docs/troubleshooting.md): each fault injected, its outcome asserted.

Every fault goes through the real stage function or the real workflow. Rows already
tested beside their stage are not repeated here:

- tokenizer larger than the embedding rows: tests/test_models.py
  (test_agreement_check_names_sizes_and_paths) and tests/test_workflow.py
  (test_bad_inputs_fail_clearly_and_leave_no_artifact, through the workflow);
- zero vocabulary overlap: tests/test_overlap.py (test_no_shared_tokens_raises);
- a file that is not a fastText model: tests/test_fasttext_vectors.py
  (test_load_fasttext_clear_errors) and tests/test_workflow.py (through the workflow);
- NaN in rows a method computed: tests/test_transfer_runner.py, tests/test_checkpoint.py
  (test_nan_rows_are_refused_naming_ids), tests/test_atomic.py;
- finite but absurd rows a method computed (flagged, not refused): tests/test_row_check.py;
- offline run missing a hub model or dataset: tests/test_download.py
  (test_offline_fails_at_once_naming_the_rule,
  test_download_all_plans_every_download_and_fails_offline_naming_the_rule);
- LAPT: SIGTERM/SIGKILL resume, stale checkpoint, interrupted checkpoint swap:
  tests/test_lapt.py;
- a killed writer's temporary: the kill test below (the next write removes it) and
  tests/test_atomic.py (which ones a write or a run's start removes);
- disk full: tests/test_disk_full.py (every writer, and a LAPT checkpoint).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_workflow import REPO, copy_workflow, small_config, snakemake

from embtransfer.config.validation import ConfigError, validate_config
from embtransfer.models.loading import NonFiniteEmbeddingsError, load_embeddings
from embtransfer.transfer.method_runner import NonFiniteRowsError, run_method
from embtransfer.transfer.methods.base import TransferInputs

# -- config: keys, types, methods, options and their values -------------------------------


def _default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _set(config: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


@pytest.mark.parametrize("key,value,words", [
    ("neighbors.prefilterk", 3, ["config key neighbors", "prefilterk"]),
    ("neighbors.prefilter_k", "many", ["config key neighbors.prefilter_k", "'many'"]),
    ("transfer.methods", ["salt", "sallt"], ["config key transfer.methods", "sallt"]),
    ("transfer.options.salt", {"min_neighbours": 2},
     ["config key transfer.options.salt", "min_neighbours", "min_neighbors"]),
    ("transfer.options.salt", {"vectors": "tokn"},
     ["config key transfer.options.salt.vectors", "'tokn'", "'word'", "'token'"]),
    ("transfer.options.multivariate", {"scale": "big"},
     ["config key transfer.options.multivariate.scale", "'big'", "number"]),
    ("transfer.options.clp", {"k": 0}, ["config key transfer.options.clp.k", "minimum"]),
    ("transfer.options.ofa", {"copy_shared": "yes"},
     ["config key transfer.options.ofa.copy_shared", "boolean"]),
    ("evaluation.tasks", ["world_factz"], ["evaluation.tasks", "world_factz"]),
])
def test_config_faults_name_the_key(key, value, words):
    config = _default_config()
    _set(config, key, value)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_the_catalog_types_every_option_and_accepts_its_defaults():
    from embtransfer.transfer.method_catalog import METHODS, defaults, resolve_options

    options = {name: defaults(name) for name in METHODS}
    for name, values in options.items():
        assert resolve_options(name, values) == values  # the methods' own defaults pass
    config = _default_config()
    _set(config, "transfer.options", copy.deepcopy(options))
    validate_config(config)


# -- models: missing, corrupt, pickled, non-finite -----------------------------------------


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    """A saved GPT-2 checkpoint (safetensors) with its byte-level BPE tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from embtransfer.models.tokenizer_training import train_tokenizer

    root = tmp_path_factory.mktemp("tiny")
    text = root / "text.txt"
    text.write_text("\n".join(f"the cat {i} sat on the mat {i * 7}" for i in range(200)))
    tokenizer = train_tokenizer("bytelevel_bpe", [str(text)], 300, "gpt2")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1,
                                       n_head=2, n_positions=32, bos_token_id=0,
                                       eos_token_id=0))
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    return root / "model"


def _copy(model: Path, dest: Path) -> Path:
    shutil.copytree(model, dest)
    return dest


def test_missing_model_dir_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        load_embeddings(tmp_path / "nowhere")


def test_corrupt_config_json_is_named(tiny_gpt2, tmp_path):
    from embtransfer.models.loading import check_tokenizer_model_agreement

    model = _copy(tiny_gpt2, tmp_path / "m")
    (model / "config.json").write_text('{"model_type": "gpt2", "vocab_si')
    with pytest.raises(ValueError, match=rf"{model / 'config.json'} is not valid JSON"):
        load_embeddings(model)
    with pytest.raises(OSError, match=str(model / "config.json")):  # transformers' own words
        check_tokenizer_model_agreement(model, model)


def test_ids_beyond_the_rows_are_refused_with_the_numbers(tiny_gpt2, tmp_path):
    from transformers import AutoTokenizer

    from embtransfer.models.loading import check_tokenizer_model_agreement

    model = _copy(tiny_gpt2, tmp_path / "m")
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = len(tokenizer)
    tokenizer.add_tokens(["<new_a>", "<new_b>"])  # ids rows, rows + 1: past the matrix
    tokenizer.save_pretrained(model)
    with pytest.raises(ValueError) as err:
        check_tokenizer_model_agreement(model, model)
    message = str(err.value)
    assert f"has {rows + 2} ids" in message and f"only {rows} embedding rows" in message
    assert f"ids {rows}..{rows + 1}" in message and str(model) in message


def test_the_transfer_job_counts_ids_by_the_vocabulary_table(tiny_gpt2, tmp_path):
    """The transfer job refuses a source with fewer rows than its vocabulary table has ids
    (one per id: the tokenizer's count, without building the tokenizer)."""
    from transformers import AutoTokenizer

    from embtransfer.models.hf import n_token_ids
    from embtransfer.transfer.job import load_inputs
    from embtransfer.vocab.canonical import vocab_table, write_vocab

    tokenizer = AutoTokenizer.from_pretrained(tiny_gpt2)
    fits, grown = tmp_path / "fits.parquet", tmp_path / "grown.parquet"
    write_vocab(vocab_table(tokenizer), fits)
    assert len(vocab_table(tokenizer)) == n_token_ids(tokenizer)
    rows = len(tokenizer)
    tokenizer.add_tokens(["<new_a>", "<new_b>"])  # ids rows, rows + 1: past the matrix
    write_vocab(vocab_table(tokenizer), grown)
    paths = {"source": str(tiny_gpt2), "source_vocab": str(grown), "target_vocab": str(fits),
             "overlap": str(tmp_path / "never_read.parquet")}
    with pytest.raises(ValueError) as err:
        load_inputs(paths, seed=0)
    message = str(err.value)
    assert f"has {rows + 2} ids" in message and f"only {rows} embedding rows" in message
    assert str(grown) in message and str(tiny_gpt2) in message
    with pytest.raises(FileNotFoundError, match="never_read"):  # past the check
        load_inputs({**paths, "source_vocab": str(fits)}, seed=0)


def test_pickle_only_weights_are_refused_unless_allowed(tiny_gpt2, tmp_path):
    import torch
    from safetensors.torch import load_file

    model = _copy(tiny_gpt2, tmp_path / "m")
    state = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    torch.save(state, model / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"only as pickle files \(pytorch_model.bin\)"):
        load_embeddings(model)
    emb = load_embeddings(model, allow_pickle=True)  # transformers loads it weights_only
    np.testing.assert_array_equal(emb.input, state["transformer.wte.weight"].numpy())


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_a_malicious_pickle_is_not_executed(tiny_gpt2, tmp_path, monkeypatch):
    # allow_pickle: true loads a pickle-only checkpoint, but never runs the code it holds
    model = _copy(tiny_gpt2, tmp_path / "m")
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _RunsCode()}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="Weights only load failed"):
        load_embeddings(model, allow_pickle=True)
    assert not (tmp_path / "PWNED").exists()


def _poison(model: Path, name: str, rows: list[int], value: float) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(model / "model.safetensors")
    state[name][rows, 0] = value
    save_file(state, model / "model.safetensors", metadata={"format": "pt"})


def test_nan_in_a_plm_embedding_is_refused_naming_file_rows_and_tokens(tiny_gpt2, tmp_path):
    from transformers import AutoTokenizer

    model = _copy(tiny_gpt2, tmp_path / "m")
    _poison(model, "transformer.wte.weight", [5, 42], float("nan"))
    tokens = AutoTokenizer.from_pretrained(model).convert_ids_to_tokens([5, 42])
    with pytest.raises(NonFiniteEmbeddingsError) as err:
        load_embeddings(model)
    message = str(err.value)
    assert str(model) in message and "transformer.wte.weight" in message
    assert f"5 {tokens[0]!r}, 42 {tokens[1]!r}" in message and "NaN/Inf in 2 of" in message


def test_inf_in_an_untied_head_is_refused(tiny_gpt2, tmp_path):
    from safetensors.torch import load_file, save_file

    model = _copy(tiny_gpt2, tmp_path / "m")
    state = load_file(model / "model.safetensors")
    state["lm_head.weight"] = state["transformer.wte.weight"].clone() * 2
    state["lm_head.weight"][7, 3] = float("inf")
    save_file(state, model / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(NonFiniteEmbeddingsError, match=r"lm_head.weight holds NaN/Inf in 1 of"):
        load_embeddings(model)


def _inputs(poison_source: list[int]) -> TransferInputs:
    rng = np.random.default_rng(0)
    source = rng.standard_normal((10, 4)).astype(np.float32)
    source[poison_source, 2] = np.nan
    return TransferInputs(
        source_input=source, source_output=None,
        source_vocab=pd.DataFrame({"id": range(10), "token": [f"s{i}" for i in range(10)]}),
        target_vocab=pd.DataFrame({"id": range(6), "token": [f"t{i}" for i in range(6)],
                                   "kind": ["normal"] * 6}),
        overlap=pd.DataFrame({"target_id": [4, 1], "source_id": [7, 2], "how": ["exact"] * 2}),
        seed=3,
    )


@pytest.mark.parametrize("method", ["random", "mean", "multivariate"])
def test_nan_in_source_rows_names_the_source_rows(method):
    with pytest.raises(NonFiniteRowsError) as err:
        run_method(method, _inputs([2, 9]))
    message = str(err.value)
    assert "source input embeddings" in message and "2 's2', 9 's9'" in message


def test_nan_in_salt_coefficients_is_not_written(tmp_path):
    from embtransfer.core.atomic import NonFiniteError
    from embtransfer.transfer.regression import write_coefficients

    coefficients = np.ones(3)
    coefficients[1] = np.nan
    result = {"target_ids": np.arange(3), "k_used": np.ones(3, np.int32),
              "status": np.array(["projected"] * 3, object), "source_ids": np.arange(3),
              "coefficients": coefficients, "stats": {}}
    with pytest.raises(NonFiniteError, match=r"SALT coefficients.*rows \[1\]"):
        write_coefficients(result, tmp_path / "p.safetensors", tmp_path / "p.json")
    assert not list(tmp_path.iterdir())


# -- corpora ------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["train", "valid"])
def test_an_empty_corpus_is_refused_naming_the_file(tmp_path, empty):
    from embtransfer.data.corpus import local_corpus

    files = {split: tmp_path / f"{split}.txt" for split in ("train", "valid")}
    for split, path in files.items():
        path.write_text(" \n\n" if split == empty else "ein satz\nnoch einer\n")
    with pytest.raises(ValueError) as err:
        local_corpus({"train": str(files["train"]), "valid": str(files["valid"])}, "de")
    assert f"corpus file {files[empty]} is empty" in str(err.value)
    assert f"languages.de.corpus.{empty}" in str(err.value)


def test_bytes_that_are_not_utf8_are_named_with_line_offset_and_fix(tmp_path):
    from embtransfer.data.corpus import local_corpus

    train = tmp_path / "train.txt"
    train.write_bytes(b"erste zeile\nzweite Stra\xdfe\ndritte\n")  # a latin-1 \xdf
    with pytest.raises(ValueError) as err:
        local_corpus({"train": str(train)}, "de")
    message = str(err.value)
    for part in (str(train), "line 2", "byte offset 23", "0xdf", "UTF-8",
                 "languages.de.corpus.encoding", "languages.de.corpus.errors", "iconv"):
        assert part in message, (part, message)
    # the options the message names read the file
    decoded, _ = local_corpus({"train": str(train), "encoding": "latin-1",
                               "valid_fraction": 0.4}, "de")
    assert decoded[1] == "zweite Straße"
    replaced, _ = local_corpus({"train": str(train), "errors": "replace",
                                "valid_fraction": 0.4}, "de")
    assert replaced[1] == "zweite Stra\ufffde"


def test_a_byte_order_mark_and_crlf_line_ends_are_read_as_text(tmp_path):
    from embtransfer.data.corpus import local_corpus

    train = tmp_path / "train.txt"
    train.write_bytes(b"\xef\xbb\xbfein satz\r\nnoch einer\r\n\r\nder dritte\r\n")
    lines, valid = local_corpus({"train": str(train), "valid_fraction": 0.4}, "de")
    assert lines + valid == ["ein satz", "noch einer", "der dritte"]


# -- kill -9 during an artifact write ------------------------------------------------------

WRITER = """
import sys, time
from embtransfer.core.atomic import atomic_path
final, directory = sys.argv[1], sys.argv[2] == "dir"
with atomic_path(final, directory=directory) as tmp:
    target = tmp / "model.safetensors" if directory else tmp
    with open(target, "wb") as fh:
        fh.write(b"half of the bytes")
        fh.flush()
        print("writing", flush=True)
        time.sleep(60)
"""


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_kill_9_during_a_write_leaves_nothing_a_rerun_would_trust(tmp_path, kind):
    from embtransfer.core.atomic import atomic_path

    final = tmp_path / "out" / ("table.parquet" if kind == "file" else "checkpoint")
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))

    def writer() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final), kind], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "writing"
        return proc

    def rerun(content: bytes) -> None:
        with atomic_path(final, directory=kind == "dir") as tmp:
            (tmp / "model.safetensors" if kind == "dir" else tmp).write_bytes(content)

    def others() -> list[str]:
        return sorted(p.name for p in final.parent.iterdir() if p != final)

    killed = writer()
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert not final.exists()  # Snakemake sees a missing output and reruns the job
    (leftover,) = others()
    assert leftover.startswith(f".{final.name}.tmp-")
    # Temporaries of the same target written on other hosts of a shared file system: one
    # written an hour ago (its writer may be alive), one a day ago (gone).
    young, old = (final.parent / f".{final.name}.tmp-node-{n}-4242-99-abcd_123" for n in (1, 2))
    for path, age in ((young, 3600), (old, 25 * 3600)):
        path.write_bytes(b"half")
        os.utime(path, (time.time() - age, time.time() - age))
    rerun(b"all")  # the rerun writes it whole, and removes the dead writers' temporaries
    assert final.exists() and others() == [young.name]
    live = writer()  # a writer of the same target on this host, alive, still writing
    try:
        rerun(b"again")
        (its,) = [n for n in others() if f"-{live.pid}-" in n]
        assert others() == sorted([young.name, its])
    finally:
        live.kill()
        live.wait(timeout=30)


# -- through the workflow ----------------------------------------------------------------

LANG, SOURCE, TARGET = "ar_mini", "gemma_mini", "gpt2_ar_mini"
METHODS = ["salt", "random"]  # a projection and a seeded draw; word-level neighbours only
SEEDED = "results/seed1234"  # the seed-dependent artifacts of the config's one seed
TRANSFERS = [f"{SEEDED}/transfer/{LANG}/{SOURCE}/{TARGET}/{m}" for m in METHODS]
LOCAL_TRANSFER = f"{SEEDED}/transfer/{LANG}/{SOURCE}/plm_local/salt"


def one_target_config() -> dict:
    """test_workflow's small config cut to one language, source, target PLM and 2 methods."""
    config = small_config()
    config["sources"] = [SOURCE]
    config["models"][SOURCE]["mix"] = {LANG: 0.03}
    config["targets"] = {LANG: [TARGET]}
    config["transfer"] = {"methods": METHODS}
    config["neighbors"]["vectors"] = ["word"]
    config["lapt"]["enabled"] = False
    return config


def _fresh_run(workdir: Path) -> Path:
    copy_workflow(workdir)
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(one_target_config(),
                                                             allow_unicode=True))
    snakemake(workdir, "--cores", "2", *TRANSFERS)
    return workdir


@pytest.fixture(scope="module")
def one_target_run(tmp_path_factory) -> Path:
    return _fresh_run(tmp_path_factory.mktemp("run_a"))


def _digests(workdir: Path) -> dict[str, str]:
    out = {}
    for top in ("results", "resources"):
        for path in sorted((workdir / top).rglob("*")):
            rel = path.relative_to(workdir)
            if path.is_file() and rel.parts[:2] != ("results", "logs"):
                out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_the_same_config_twice_gives_byte_identical_artifacts(one_target_run, tmp_path):
    second = _fresh_run(tmp_path / "run_b")
    first, again = _digests(one_target_run), _digests(second)
    assert first.keys() == again.keys()
    differ = sorted(k for k in first if first[k] != again[k])
    assert not differ, differ
    names = set(first)
    for must in (f"results/vocab/{TARGET}.parquet",
                 f"{SEEDED}/neighbors/{LANG}/{SOURCE}/{TARGET}/word.parquet",
                 f"{SEEDED}/regression/{LANG}/{SOURCE}/{TARGET}/projected.json",
                 *(f"{t}/{f}" for t in TRANSFERS for f in ("model.safetensors", "transfer.json"))):
        assert must in names, must
    meta = json.loads((one_target_run / TRANSFERS[0] / "transfer.json").read_text())
    assert "seconds" not in meta


@pytest.mark.slow
def test_nan_in_a_target_plm_stops_the_workflow_naming_it(one_target_run, tmp_path):
    from transformers import AutoTokenizer

    workdir = tmp_path / "wf"
    shutil.copytree(one_target_run, workdir, symlinks=True)
    model = workdir / "resources" / "models" / TARGET
    _poison(model, "transformer.wte.weight", [3], float("nan"))
    token = AutoTokenizer.from_pretrained(model).convert_ids_to_tokens(3)
    shutil.rmtree(workdir / SEEDED / "regression")
    shutil.rmtree(workdir / SEEDED / "transfer")
    projected = f"{SEEDED}/regression/{LANG}/{SOURCE}/{TARGET}/projected.safetensors"
    proc = snakemake(workdir, "--cores", "1", projected, check=False)
    assert proc.returncode != 0
    logs = "".join(p.read_text() for p in (workdir / "results" / "logs").rglob("*.log")
                   if "regression" in p.parts)
    assert f"{model.relative_to(workdir)}: the embedding matrix" in logs, logs[-3000:]
    assert f"3 {token!r}" in logs
    assert not list((workdir / SEEDED / "regression").rglob("*.safetensors"))


@pytest.mark.slow
def test_bad_option_value_missing_model_and_empty_corpus_stop_before_compute(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    config = one_target_config()
    config["transfer"]["options"] = {"salt": {"vectors": "tokn"}}
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(workdir, "-n", check=False)
    assert proc.returncode != 0
    assert "config key transfer.options.salt.vectors: 'tokn'" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()

    config = one_target_config()
    config["models"]["plm_local"] = {"type": "local", "path": str(tmp_path / "nowhere")}
    config["targets"] = {LANG: ["plm_local"]}
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(workdir, "--cores", "1", LOCAL_TRANSFER, check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "MissingInputException" in text and str(tmp_path / "nowhere") in text, text[-3000:]
    assert not (workdir / "results").exists()  # stopped while planning: no job ran

    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "valid.txt").write_text("ein satz\n")
    config = one_target_config()
    config["languages"]["de_local"] = {"corpus": {
        "type": "local", "train": str(tmp_path / "empty.txt"),
        "valid": str(tmp_path / "valid.txt")}}
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    proc = snakemake(workdir, "--cores", "1", "results/corpus/de_local/train.txt", check=False)
    assert proc.returncode != 0
    log = (workdir / "results" / "logs" / "corpus" / "de_local.log").read_text()
    assert f"corpus file {tmp_path / 'empty.txt'} is empty" in log
    assert not (workdir / "results" / "corpus" / "de_local").exists() or not list(
        (workdir / "results" / "corpus" / "de_local").glob("*.txt"))
