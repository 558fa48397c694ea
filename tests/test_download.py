"""The download code paths, without network: a local HTTP server, fake hub and dataset APIs.

Offline (HF_HUB_OFFLINE=1 and friends) every download fails at once with a
message naming the rule to run; every download is atomic.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from embtransfer.data import download
from embtransfer.data.corpus import wikipedia_corpus
from embtransfer.data.download import DownloadError, HubDownloadError, fetch_hub_snapshot

REPO = Path(__file__).resolve().parents[1]
FAKE_BIN = download.FASTTEXT_MAGIC + b"\x0c\x00\x00\x00" + os.urandom(5000)


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """Start every test 'online' (the offline variables unset), whatever the shell has."""
    for var in download.OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server(tmp_path):
    """A local HTTP server over tmp_path/www; yields (base URL, its directory)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - keep pytest output clean
        pass


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def test_fasttext_crawl_download_gunzips_atomically(server, tmp_path):
    base, www = server
    (www / "cc.xx.300.bin.gz").write_bytes(gzip.compress(FAKE_BIN))
    dest = tmp_path / "resources" / "fasttext" / "cc.xx.300.bin"
    download.fetch_fasttext_crawl("xx", dest, base_url=base)
    assert dest.read_bytes() == FAKE_BIN
    assert _leftovers(dest.parent) == []


def test_fasttext_download_failures_leave_nothing_and_name_the_rule(server, tmp_path):
    base, www = server
    dest = tmp_path / "out" / "cc.yy.300.bin"
    with pytest.raises(DownloadError) as err:  # 404
        download.fetch_fasttext_crawl("yy", dest, base_url=base, target=str(dest))
    msg = str(err.value)
    assert "cc.yy.300.bin.gz" in msg and "fetch_fasttext_crawl" in msg
    assert "download_all" in msg and f"snakemake --cores 1 {dest}" in msg
    # Not a fastText file (an HTML error page, say), and a truncated gzip stream.
    (www / "cc.yy.300.bin.gz").write_bytes(gzip.compress(b"<html>nope</html>"))
    with pytest.raises(DownloadError, match="not a fastText"):
        download.fetch_fasttext_crawl("yy", dest, base_url=base)
    (www / "cc.yy.300.bin.gz").write_bytes(gzip.compress(FAKE_BIN)[:-200])
    with pytest.raises(DownloadError):
        download.fetch_fasttext_crawl("yy", dest, base_url=base)
    assert not dest.exists() and _leftovers(dest.parent) == []


def test_offline_fails_at_once_naming_the_rule(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("tried the network while offline")

    dest = tmp_path / "cc.de.300.bin"
    with pytest.raises(DownloadError) as err:
        download.fetch_fasttext_crawl("de", dest, opener=no_network, target=str(dest))
    msg = str(err.value)
    assert "offline" in msg and "HF_HUB_OFFLINE=1" in msg
    assert "fetch_fasttext_crawl" in msg and "download_all" in msg
    with pytest.raises(DownloadError, match="fetch_wikipedia"):
        download.fetch_wikipedia("de", "20231101", 10, tmp_path / "s.txt", tmp_path / "nltk",
                                 load_dataset=no_network, split_sentences=str.split)
    with pytest.raises(DownloadError, match="fetch_nltk_punkt"):
        download.fetch_punkt(tmp_path / "nltk", downloader=no_network)
    with pytest.raises(DownloadError, match="fetch_muse_dictionary"):
        download.fetch_muse_dictionary("en", "de", tmp_path / "en-de.txt", opener=no_network)
    assert list(tmp_path.iterdir()) == []


def test_muse_dictionary_download(server, tmp_path):
    base, www = server
    (www / "en-de.txt").write_text("the der\nthe die\ncat Katze\n", encoding="utf-8")
    dest = tmp_path / "en-de.txt"
    download.fetch_muse_dictionary("en", "de", dest, base_url=base)
    assert dest.read_text(encoding="utf-8").splitlines()[2] == "cat Katze"
    (www / "en-ar.txt").write_text("<html><body>Not Found</body></html>\n")
    with pytest.raises(DownloadError, match="source target"):
        download.fetch_muse_dictionary("en", "ar", tmp_path / "en-ar.txt", base_url=base)


def _fake_wikipedia(articles):
    calls = []

    def load_dataset(path, name, split, streaming):
        calls.append((path, name, split, streaming))
        return iter(articles)

    return load_dataset, calls


def test_wikipedia_sentences_in_dump_order_then_split_9_to_1(tmp_path):
    articles = [{"text": f"Artikel {i}. Satz A{i}. Satz B{i}.\n\nAbsatz {i}."} for i in range(10)]
    load, calls = _fake_wikipedia(articles)
    dest = tmp_path / "resources" / "wikipedia" / "de" / "sentences.txt"
    split = functools.partial(__import__("re").split, r"(?<=\.)\s+")
    n = download.fetch_wikipedia("de", "20231101", 30, dest, tmp_path / "nltk",
                                 load_dataset=load, split_sentences=split)
    assert n == 30
    assert calls == [("wikimedia/wikipedia", "20231101.de", "train", True)]
    lines = dest.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["Artikel 0.", "Satz A0.", "Satz B0.", "Absatz 0.", "Artikel 1."]
    train, valid = wikipedia_corpus({"sentences": 30, "valid_fraction": 0.1}, dest)
    assert train == lines[:27] and valid == lines[27:]
    # A dump with fewer sentences than asked for fails and writes nothing.
    load, _ = _fake_wikipedia(articles[:2])
    short = tmp_path / "short.txt"
    with pytest.raises(DownloadError, match="only 8 sentences"):
        download.fetch_wikipedia("de", "20231101", 30, short, tmp_path / "nltk",
                                 load_dataset=load, split_sentences=split)
    assert not short.exists() and _leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="asks for 31"):
        wikipedia_corpus({"sentences": 31}, dest)
    with pytest.raises(FileNotFoundError, match="fetch_wikipedia"):
        wikipedia_corpus({}, tmp_path / "missing.txt")


def test_punkt_with_a_fake_downloader(tmp_path):
    def downloader(name, download_dir, quiet, raise_on_error):
        assert name == "punkt_tab"
        (Path(download_dir) / "tokenizers" / "punkt_tab").mkdir(parents=True)
        return True

    out = download.fetch_punkt(tmp_path / "nltk_data", downloader=downloader)
    assert (out / "tokenizers" / "punkt_tab").is_dir()
    with pytest.raises(DownloadError, match="punkt_tab"):
        download.fetch_punkt(tmp_path / "nltk2", downloader=lambda *a, **k: False)
    assert not (tmp_path / "nltk2").exists()


def _mlqa_zip(path: Path) -> None:
    """MLQA_V1.zip's layout: SQuAD v1.1 JSON per (split, context, question language)."""
    import zipfile

    squad = {"version": "1.0", "data": [{"title": "Rhein", "paragraphs": [{
        "context": "Der Rhein mündet in die Nordsee.",
        "qas": [{"id": "q1", "question": "Where does the Rhine flow?",
                 "answers": [{"answer_start": 18, "text": "in die Nordsee"}]}]}]}]}
    with zipfile.ZipFile(path, "w") as archive:
        for part in ("dev", "test"):
            archive.writestr(f"MLQA_V1/{part}/{part}-context-de-question-en.json",
                             json.dumps(squad, ensure_ascii=False))


def test_lm_eval_datasets_are_saved_by_building_the_tasks(monkeypatch, tmp_path, server):
    from types import SimpleNamespace

    built = []

    class FakeManager:
        def __init__(self, include_path=None):
            self.include_path = include_path

    def fake_task(name):
        # A built task: its config and the raw splits lm-eval downloaded.
        config = SimpleNamespace(dataset_path="org/data", dataset_name=name)
        return SimpleNamespace(config=config, dataset={"test": [{"q": name, "n": 1}],
                                                       "train": [{"q": "é", "n": 2}]})

    def get_task_dict(names, manager):
        # lm-eval downloads a task's dataset while building it: into a temporary cache.
        assert os.environ["HF_DATASETS_CACHE"] != "unset"
        if "broken_task" in names:
            raise ValueError("no such task")
        built.append((tuple(names), manager.include_path))
        return {name: fake_task(name) for name in names}

    monkeypatch.setenv("HF_DATASETS_CACHE", "unset")  # restored after the test
    root = tmp_path / "data"
    marker = root / "tasks.json"
    base, www = server
    _mlqa_zip(www / "MLQA_V1.zip")
    done = download.fetch_lm_eval_datasets(
        ["belebele_deu_Latn", "arc_de", "mlqa_de_en"], ["xquad_de_shipped"], root, marker,
        shipped_dir="/shipped", get_task_dict=get_task_dict, task_manager=FakeManager,
        mlqa_url=f"{base}/MLQA_V1.zip")
    assert done == ["arc_de", "belebele_deu_Latn", "mlqa_de_en", "xquad_de_shipped"]
    # MLQA (a loading script on the hub) comes from the official release, not lm-eval.
    for split in ("validation", "test"):
        text = (root / "facebook" / "mlqa" / "mlqa.de.en" / f"{split}.jsonl").read_text()
        assert [json.loads(x) for x in text.splitlines()] == [{
            "context": "Der Rhein mündet in die Nordsee.",
            "question": "Where does the Rhine flow?",
            "answers": {"answer_start": [18], "text": ["in die Nordsee"]}, "id": "q1"}]
    assert built == [(("arc_de", "belebele_deu_Latn"), None), (("xquad_de_shipped",), "/shipped")]
    assert json.loads(marker.read_text())["tasks"] == done
    lines = (root / "org" / "data" / "arc_de" / "train.jsonl").read_text(encoding="utf-8")
    assert [json.loads(x) for x in lines.splitlines()] == [{"q": "é", "n": 2}]
    assert (root / "org" / "data" / "xquad_de_shipped" / "test.jsonl").is_file()
    with pytest.raises(DownloadError, match="fetch_lm_eval_datasets"):
        download.fetch_lm_eval_datasets(["broken_task"], [], root, tmp_path / "m.json",
                                        get_task_dict=get_task_dict, task_manager=FakeManager)
    assert not (tmp_path / "m.json").exists()


def _hub_error(code: str, status: int = 404):
    """The real huggingface_hub exception for an error code, as the hub's API answers it."""
    from huggingface_hub.utils import _http, hf_raise_for_status

    http = getattr(_http, "httpx2", None) or getattr(_http, "httpx", None)
    if http is None:  # older huggingface_hub: requests
        import requests

        response = requests.Response()
        response.status_code = status
        response.headers.update({"X-Error-Code": code, "X-Error-Message": "fake hub"})
        response.url = "https://huggingface.co/api/models/org/model/revision/abc"
    else:
        response = http.Response(
            status, headers={"X-Error-Code": code, "X-Error-Message": "fake hub"},
            request=http.Request("GET", "https://huggingface.co/api/models/org/model/revision/abc"),
        )
    try:
        hf_raise_for_status(response)
    except Exception as err:  # noqa: BLE001 - whatever the hub library raises
        return err
    raise AssertionError("hf_raise_for_status raised nothing")


@pytest.mark.parametrize(
    "code, status, kind, hint",
    [
        ("RevisionNotFound", 404, "RevisionNotFoundError", "models.gemma_2b.revision"),
        ("RepoNotFound", 404, "RepositoryNotFoundError", "models.gemma_2b.repo_id"),
        ("GatedRepo", 403, "GatedRepoError", "gated"),
    ],
)
def test_hub_errors_name_the_model_key_and_revision(monkeypatch, tmp_path, code, status, kind,
                                                     hint):
    from huggingface_hub import HfApi

    error = _hub_error(code, status)
    assert type(error).__name__ == kind

    def fake_list_repo_files(self, repo_id, revision=None, token=None):
        raise error

    monkeypatch.setattr(HfApi, "list_repo_files", fake_list_repo_files)
    dest = tmp_path / "resources" / "models" / "gemma_2b"
    with pytest.raises(HubDownloadError) as err:
        fetch_hub_snapshot("google/gemma-2b", "deadbeef", dest, key="gemma_2b")
    msg = str(err.value)
    assert "'gemma_2b'" in msg and "google/gemma-2b" in msg and "deadbeef" in msg
    assert kind in msg and hint in msg
    assert "rule fetch_model" in msg and "download_all" in msg and "login node" in msg
    assert not dest.exists() and not any(dest.parent.glob(".gemma_2b*"))


def test_hub_error_is_clear_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubDownloadError) as err:
        fetch_hub_snapshot("no-such-org/no-such-model", "0123abc", tmp_path / "m")
    msg = str(err.value)
    assert "no-such-org/no-such-model" in msg and "0123abc" in msg
    assert "login node" in msg
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------- pinned packages


def _fake_client(bin_dir: Path, name: str, body: str) -> None:
    """An executable ``name`` on a PATH of its own that logs its arguments and runs ``body``."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho "$@" >> "{bin_dir}/{name}.args"\n{body}\n')
    script.chmod(0o755)


def test_package_fetches_run_the_registry_clients(monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_client(bin_dir, "apt-get", 'touch "pkg_1.0-1_all.deb"')  # apt-get writes to its cwd
    _fake_client(bin_dir, "npm", 'touch "$4/scope-pkg-2.0.0.tgz"')  # --pack-destination DIR
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "deb").mkdir()
    (tmp_path / "npm").mkdir()
    assert download.apt_download("pkg", "1.0-1", tmp_path / "deb") == (
        tmp_path / "deb" / "pkg_1.0-1_all.deb")
    assert (bin_dir / "apt-get.args").read_text().split() == ["download", "-qq", "pkg=1.0-1"]
    assert download.npm_pack("@scope/pkg", "2.0.0", tmp_path / "npm") == (
        tmp_path / "npm" / "scope-pkg-2.0.0.tgz")
    assert (bin_dir / "npm.args").read_text().split() == [
        "pack", "@scope/pkg@2.0.0", "--pack-destination", str(tmp_path / "npm"), "--silent"]


# The calls that reach the network: an HTTP open, the hub's and datasets' clients, NLTK's
# downloader, and the registry clients (run as a command list: ["apt-get", "download", ...]).
NETWORK_NAMES = {"urlopen", "snapshot_download", "hf_hub_download", "HfApi", "load_dataset"}
NETWORK_COMMANDS = {("apt-get", "download"), ("pip", "download"), ("npm", "pack"),
                    ("nltk", "download")}


def network_calls(source: str) -> list[str]:
    """What in ``source`` fetches from the network, by the names and commands above."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in NETWORK_NAMES:
                found.append(f"line {node.lineno}: {name}")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and (node.value.id, node.attr) in NETWORK_COMMANDS):
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.List):
            words = [e.value for e in node.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if any(pair in NETWORK_COMMANDS for pair in zip(words, words[1:], strict=False)):
                found.append(f"line {node.lineno}: {' '.join(words[:3])}")
    return found


def test_only_the_download_module_fetches_from_the_network():
    package = REPO / "workflow" / "embtransfer"
    found = {str(p.relative_to(package)): hits for p in sorted(package.rglob("*.py"))
             if (hits := network_calls(p.read_text()))}
    assert set(found) == {"data/download.py"}, found
    # the check sees each kind of fetch
    for source in ('urllib.request.urlopen(url)\n', 'HfApi().model_info(r)\n',
                   'subprocess.run(["apt-get", "download", "-qq", p])\n',
                   'subprocess.run([sys.executable, "-m", "pip", "download", p])\n',
                   'subprocess.run(["npm", "pack", p])\n', 'nltk.download("punkt_tab")\n'):
        assert network_calls(source), source
    assert network_calls('shutil.which("apt-get")\nsubprocess.run(["dpkg-deb", "-x", d])\n') == []


# ---------------------------------------------------------------- the rules


def _copy_workflow(dest: Path) -> Path:
    from test_workflow import copy_workflow

    return copy_workflow(dest)


def _real_config(tmp_path: Path) -> dict:
    """A config in the paper's shape (hub models, crawl vectors, Wikipedia, MUSE), tiny.

    The source language's corpus (en) is not read, so it is not downloaded.
    """
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for section in ("lapt", "report", "world"):  # the miniature world's
        config.pop(section, None)
    config["languages"] = {
        "en": {"corpus": {"type": "wikipedia", "language": "en", "sentences": 1000},
               "fasttext": {"type": "crawl"}},
        "de": {"corpus": {"type": "wikipedia", "language": "de", "sentences": 1000},
               "fasttext": {"type": "crawl"},
               "dictionary": {"type": "file", "path": "resources/dictionaries/muse/en-de.txt"}},
    }
    config["source_language"] = "en"
    config["models"] = {
        "gemma_2b": {"type": "hub", "repo_id": "google/gemma-2b", "revision": "main"},
        "gbert": {"type": "hub", "repo_id": "deepset/gbert-base", "revision": "main"},
    }
    config["sources"] = ["gemma_2b"]
    config["targets"] = {"de": ["gbert"]}
    config["transfer"] = {"methods": ["salt", "wechsel"]}
    config["evaluation"] = {"tasks": ["belebele"]}
    return config


def _snakemake(workdir: Path, *args: str, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(workdir / "Snakefile"),
         "--directory", str(workdir), "--configfile", str(workdir / "config" / "config.yaml"),
         *args],
        capture_output=True, text=True, cwd=workdir,
        env=dict(os.environ if env is None else env, PYTHONPATH=str(workdir / "workflow")),
    )


@pytest.mark.slow
def test_download_all_plans_every_download_and_fails_offline_naming_the_rule(tmp_path):
    workdir = _copy_workflow(tmp_path / "wf")
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(_real_config(tmp_path)))
    proc = _snakemake(workdir, "-n", "download_all")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    stats = text.split("Job stats:", 1)[1]
    for rule, count in [("fetch_model", 2), ("fetch_fasttext_crawl", 2), ("fetch_wikipedia", 1),
                        ("fetch_nltk_punkt", 1), ("fetch_muse_dictionary", 1),
                        ("fetch_lm_eval_datasets", 1), ("download_all", 1)]:
        assert any(line.split() == [rule, str(count)] for line in stats.splitlines()), (
            rule, stats)

    # On a compute node (offline), a missing download fails at once, naming the rule.
    env = {k: v for k, v in os.environ.items() if k not in download.OFFLINE_VARS}
    env["HF_HUB_OFFLINE"] = "1"
    target = "resources/fasttext/cc.de.300.bin"
    proc = _snakemake(workdir, "--cores", "1", target, env=env)
    assert proc.returncode != 0
    log = (workdir / "results" / "logs" / "download" / "fasttext_cc.de.log").read_text()
    assert "fetch_fasttext_crawl" in log and "download_all" in log and "offline" in log
    assert f"snakemake --cores 1 {target}" in log
    assert not (workdir / target).exists()
    proc = _snakemake(workdir, "--cores", "1", "resources/models/gbert", env=env)
    assert proc.returncode != 0
    log = (workdir / "results" / "logs" / "models" / "gbert.log").read_text()
    assert "'gbert'" in log and "deepset/gbert-base" in log and "fetch_model" in log
    assert not (workdir / "resources" / "models" / "gbert").exists()


def _languages_config(methods, vectors, lapt=None):
    return {"targets": {"ar": ["gpt2_ar"], "vi": ["gpt2_vi"]}, "source_language": "en",
            "transfer": {"methods": methods}, "neighbors": {"vectors": vectors}, "lapt": lapt}


@pytest.mark.parametrize(("methods", "vectors", "lapt", "corpora", "word_vectors"), [
    (["focus"], ["token"], None, {"ar", "vi"}, set()),
    (["salt"], ["word", "token"], None, {"ar", "vi"}, {"ar", "vi"}),
    # the aligned methods read the source language's word vectors too
    (["ofa"], ["token"], None, {"ar", "vi"}, {"ar", "vi", "en"}),
    (["random", "wechsel"], ["word"], None, {"ar", "vi"}, {"ar", "vi", "en"}),
    # replay text: its language, else the source language; none when LAPT is off
    (["salt"], ["token"], {"replay": {"language": "de"}}, {"ar", "vi", "de"}, set()),
    (["salt"], ["token"], {"replay": {"language": None}}, {"ar", "vi", "en"}, set()),
    (["salt"], ["token"], {"enabled": False, "replay": {"language": "de"}}, {"ar", "vi"}, set()),
])
def test_needed_languages_are_the_corpora_and_vectors_the_dag_reads(
        methods, vectors, lapt, corpora, word_vectors):
    config = _languages_config(methods, vectors, lapt)
    assert download.needed_languages(config) == (corpora, word_vectors)
