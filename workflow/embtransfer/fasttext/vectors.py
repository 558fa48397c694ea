"""fastText models and per-token vectors (SALT / FOCUS auxiliary embeddings).

Two ways of getting a vector for every token of a vocabulary:

* ``mode="word"`` (SALT, WECHSEL: pretrained crawl vectors ``cc.{lang}.300.bin``):
  the token's real text, its ``bytes`` decoded as UTF-8, looked up as a word;
  fastText's subword n-grams give vectors to strings it never saw.
* ``mode="token"`` (FOCUS token-level mode): a model trained here on the target
  corpus tokenized by the target tokenizer (:func:`tokenize_for_fasttext`),
  looked up by the raw vocabulary string (``Ġhello``, ``##ing``, ``▁word``).

A token is *missing* (zero vector, flagged) when it is a special token, when
its lookup string is empty (word mode: also whitespace-only, or nothing left
after dropping partial UTF-8), or when fastText's vector has a norm below
``min_norm`` (fastText returns exact zeros for a string without a known word or
n-gram). In token mode a token must also be a word of the model (seen at least
``minCount`` times): deepfocus's "very rare" rule (``token not in model``), so a
rare token does not get a vector built from its n-grams alone. Word mode keeps
n-gram vectors for unseen strings (SALT's step 1, WECHSEL). Later stages
initialise missing tokens from N(mean, std).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fasttext
import numpy as np
import pandas as pd

from embtransfer.core.atomic import atomic_path, save_npy
from embtransfer.vocab.canonical import token_text

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
#: Vectors with a smaller norm count as missing.
MIN_NORM = 1e-6

#: fastText splits its input on these characters; a token containing one
#: cannot be a fastText word.
_FT_WHITESPACE = re.compile(r"[ \n\r\t\v\f\0]")

_REQUIRED = ("model", "dim", "epoch", "min_count", "minn", "maxn", "neg", "ws", "lr")
# our config names -> fastText argument names
_ARG_NAMES = {
    "model": "model",
    "dim": "dim",
    "epoch": "epoch",
    "min_count": "minCount",
    "minn": "minn",
    "maxn": "maxn",
    "neg": "neg",
    "ws": "ws",
    "lr": "lr",
    "bucket": "bucket",
    "t": "t",
    "loss": "loss",
    "word_ngrams": "wordNgrams",
    "lr_update_rate": "lrUpdateRate",
}


# --------------------------------------------------------------------------- training


def train_fasttext(
    corpus: str | os.PathLike,
    out_bin: str | os.PathLike,
    params: dict[str, Any],
    seed: int,
    threads: int,
) -> dict[str, Any]:
    """Train an unsupervised fastText model on ``corpus`` and save it to ``out_bin``.

    ``params`` needs ``model`` (cbow | skipgram), ``dim``, ``epoch``,
    ``min_count``, ``minn``, ``maxn``, ``neg``, ``ws``, ``lr``; optional
    ``bucket``, ``t``, ``loss``, ``word_ngrams``, ``lr_update_rate``. Unknown keys
    are an error (a typo would silently train with a default).

    Reproducibility: fastText is only deterministic with ``threads=1`` (its
    Hogwild! workers update shared weights without locks). ``threads > 1`` is
    faster but the vectors are not bit-reproducible across runs, even with the
    same ``seed``.

    Training runs in a child interpreter (see the comment in the code).

    Returns stats: ``words`` (vocabulary size), ``seconds``, ``threads``,
    ``deterministic``, ``seed`` and the fastText arguments used.
    """
    corpus = Path(corpus)
    if not corpus.is_file() or corpus.stat().st_size == 0:
        raise ValueError(f"fastText corpus {corpus} is missing or empty")
    unknown = sorted(set(params) - set(_ARG_NAMES))
    if unknown:
        raise ValueError(f"unknown fastText parameters {unknown}; known: {sorted(_ARG_NAMES)}")
    absent = [key for key in _REQUIRED if key not in params]
    if absent:
        raise ValueError(f"fastText parameters missing: {absent}")
    if params["model"] not in ("cbow", "skipgram"):
        raise ValueError(f"fastText model must be cbow or skipgram, got {params['model']!r}")
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    kwargs = {_ARG_NAMES[key]: value for key, value in params.items()}
    kwargs.update(input=str(corpus), thread=int(threads), verbose=0)

    t0 = time.perf_counter()
    with atomic_path(out_bin) as tmp:
        # A clean interpreter: with pandas imported first, fastText 0.9.3 training
        # becomes non-deterministic even with thread=1 and sometimes fails with
        # "Encountered NaN" (observed here; it looks like a read of uninitialised
        # memory that the allocator pandas pulls in changes).
        proc = subprocess.run(
            [sys.executable, "-c", _TRAIN_SCRIPT, json.dumps([kwargs, int(seed), str(tmp)])],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"fastText training on {corpus} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]}"
            )
        words, seed_used = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "words": int(words),
        "seconds": round(time.perf_counter() - t0, 3),
        "threads": int(threads),
        "deterministic": int(threads) == 1,
        "seed": int(seed_used),
        "args": {k: v for k, v in kwargs.items() if k not in ("input", "verbose")},
    }


# Runs in a fresh interpreter (see train_fasttext). train_unsupervised() (0.9.3)
# does not accept `seed` although fastText has one: build the arguments the way
# it does and set the seed too; fall back to the public call (seed 0) if the
# private helpers ever change.
_TRAIN_SCRIPT = """
import json, sys
import fasttext
from fasttext import FastText as ft
kwargs, seed, out = json.loads(sys.argv[1])
try:
    args = dict(ft.unsupervised_default)
    args.update(kwargs)
    args["seed"] = seed
    built = ft._build_args(args, set(kwargs) | {"seed"})
    model = ft._FastText(args=built)
    ft.fasttext.train(model.f, built)
    model.set_args(model.f.getArgs())
except (AttributeError, TypeError):
    model = fasttext.train_unsupervised(**kwargs)
    seed = 0
model.save_model(out)
print(json.dumps([len(model.words), seed]))
"""


def fasttext_token(token: str) -> str | None:
    """The corpus form of a raw vocabulary string, or None if fastText cannot hold it."""
    if not token or _FT_WHITESPACE.search(token):
        return None
    return token


def _backend(tokenizer: Any) -> Any:
    """The fast (Rust) tokenizer behind a transformers tokenizer, or the object itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if hasattr(tokenizer, "encode_batch"):
        return tokenizer
    return None


def tokenize_for_fasttext(
    tokenizer: Any,
    in_txt: str | os.PathLike,
    out_txt: str | os.PathLike,
    batch_lines: int = 10_000,
) -> dict[str, Any]:
    """Write ``in_txt`` tokenized by ``tokenizer``, one line per input line (FOCUS mode).

    Tokens are written as their raw vocabulary strings separated by single
    spaces, without special tokens added. Accepts a transformers tokenizer (its
    fast backend is used, batched and multi-threaded) or a ``tokenizers.Tokenizer``;
    anything else must have a ``tokenize(str) -> list[str]`` method (slow path).
    Tokens containing whitespace (e.g. a raw ``"\\n"`` token) cannot be fastText
    words and are dropped from the line (counted in ``dropped_tokens``).
    """
    backend = _backend(tokenizer)
    n_lines = n_tokens = n_dropped = 0
    t0 = time.perf_counter()

    def encode(lines: list[str]) -> list[list[str]]:
        if backend is not None:
            return [enc.tokens for enc in backend.encode_batch(lines, add_special_tokens=False)]
        return [tokenizer.tokenize(line) for line in lines]

    def flush(lines: list[str], out: Any) -> None:
        nonlocal n_lines, n_tokens, n_dropped
        rows = []
        for tokens in encode(lines):
            kept = [t for t in tokens if fasttext_token(t) is not None]
            n_tokens += len(kept)
            n_dropped += len(tokens) - len(kept)
            rows.append(" ".join(kept))
        out.write("\n".join(rows) + "\n")
        n_lines += len(lines)

    with (
        atomic_path(out_txt) as tmp,
        open(in_txt, encoding="utf-8") as src,
        open(tmp, "w", encoding="utf-8") as out,
    ):
        batch: list[str] = []
        for line in src:
            batch.append(line.rstrip("\n").rstrip("\r"))
            if len(batch) >= batch_lines:
                flush(batch, out)
                batch = []
        if batch:
            flush(batch, out)
    return {
        "lines": n_lines,
        "tokens": n_tokens,
        "dropped_tokens": n_dropped,
        "seconds": round(time.perf_counter() - t0, 3),
    }


# --------------------------------------------------------------------------- loading


def _check_fasttext_file(path: Path) -> None:
    """Raise ValueError unless ``path`` looks like a complete fastText model.

    Checks the magic number and version, then (version 12, non-quantized) walks
    the header, dictionary and matrix headers and compares the expected size
    with the file size, so a truncated file is caught before fastText reads it
    (fastText may crash or allocate garbage sizes on such files).
    """

    def bad(why: str) -> ValueError:
        return ValueError(f"{path} is not a fastText model: {why}")

    if not path.exists():
        raise bad("file not found")
    if not path.is_file():
        raise bad("not a regular file")
    size = path.stat().st_size
    if size < 8:
        raise bad(f"file too short ({size} bytes)")
    with open(path, "rb") as fh:
        magic, version = struct.unpack("<ii", fh.read(8))
        if magic != FASTTEXT_MAGIC:
            raise bad(f"wrong magic number {magic} (expected {FASTTEXT_MAGIC})")
        if version > FASTTEXT_VERSION or version < 11:
            raise bad(f"unsupported fastText file version {version}")
        if version != FASTTEXT_VERSION:
            return  # older layout: leave the details to fastText
        # mmap: crawl models are 7 GB; only the dictionary is actually read
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _check_layout(data, size, bad)


def _check_layout(data: Any, size: int, bad: Any) -> None:
    # Args after magic and version: 12 int32 (dim, ws, epoch, minCount, neg,
    # wordNgrams, loss, model, bucket, minn, maxn, lrUpdateRate) and the double t
    pos = 8 + 12 * 4 + 8
    if size < pos + 4 * 3 + 8 * 2:
        raise bad("truncated (header)")
    dim = struct.unpack_from("<i", data, 8)[0]
    dict_size = struct.unpack_from("<i", data, pos)[0]
    prune_size = struct.unpack_from("<q", data, pos + 20)[0]
    pos += 12 + 16
    if dim <= 0 or dict_size < 0:
        raise bad(f"implausible header (dim {dim}, {dict_size} words)")
    for _ in range(dict_size):
        end = data.find(b"\0", pos)
        if end < 0:
            raise bad("truncated (dictionary)")
        pos = end + 1 + 8 + 1  # word, NUL, int64 count, int8 type
    pos += 8 * max(prune_size, 0)
    for matrix in ("input", "output"):
        if pos + 1 > size:
            raise bad(f"truncated ({matrix} matrix)")
        if data[pos]:  # quantized: the layout differs, trust fastText
            return
        pos += 1
        if pos + 16 > size:
            raise bad(f"truncated ({matrix} matrix)")
        rows, cols = struct.unpack_from("<qq", data, pos)
        pos += 16 + 4 * rows * cols
        if rows < 0 or cols < 0 or pos > size:
            raise bad(f"truncated ({matrix} matrix)")
    if pos != size:
        raise bad(f"{size - pos} unexpected trailing bytes")


def load_fasttext(path: str | os.PathLike) -> Any:
    """Load a fastText ``.bin`` model, with a clear ``ValueError`` for anything else.

    The file is checked first (:func:`_check_fasttext_file`): missing, empty,
    text, wrong-version and truncated files are refused with the path named.
    """
    path = Path(path)
    _check_fasttext_file(path)
    try:
        return fasttext.load_model(str(path))
    except Exception as exc:  # fastText raises bare ValueError/RuntimeError texts
        raise ValueError(f"{path} is not a loadable fastText model: {exc}") from exc


# --------------------------------------------------------------------------- token vectors


def _lookup_strings(vocab: pd.DataFrame, mode: str) -> list[str | None]:
    special = (vocab["kind"] == "special").to_numpy()
    out: list[str | None] = []
    if mode == "token":
        for token, is_special in zip(vocab["token"], special, strict=True):
            out.append(None if is_special or not token else str(token))
    elif mode == "word":
        for raw, is_special in zip(vocab["bytes"], special, strict=True):
            text = "" if is_special or raw is None else token_text(raw).strip()
            out.append(text or None)
    else:
        raise ValueError(f"mode must be 'token' or 'word', got {mode!r}")
    return out


def token_vectors(
    model: Any, vocab: pd.DataFrame, mode: str, min_norm: float = MIN_NORM
) -> tuple[np.ndarray, np.ndarray]:
    """fastText vector of every token of ``vocab`` (rows indexed by ``vocab['id']``).

    ``mode="token"`` looks up the raw ``token`` string, ``mode="word"`` the
    token's text (:func:`token_text` of ``bytes``, surrounding whitespace
    stripped). Token mode counts only words of the model (``get_word_id != -1``).
    Returns ``(vectors float32 [V, dim], missing bool [V])`` with
    ``V = max(id) + 1``; missing rows (see the module docstring, and ids absent
    from ``vocab``) are zero.
    """
    for column in ("id", "token", "bytes", "kind"):
        if column not in vocab.columns:
            raise ValueError(f"vocab table has no column {column!r}")
    ids = vocab["id"].to_numpy(dtype=np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError("vocab ids must be >= 0")
    n = int(ids.max()) + 1 if ids.size else 0
    dim = int(model.get_dimension())
    vectors = np.zeros((n, dim), dtype=np.float32)
    missing = np.ones(n, dtype=bool)
    cache: dict[str, np.ndarray] = {}
    for token_id, text in zip(ids, _lookup_strings(vocab, mode), strict=True):
        if text is None or (mode == "token" and model.get_word_id(text) == -1):
            continue
        vec = cache.get(text)
        if vec is None:
            vec = np.asarray(model.get_word_vector(text), dtype=np.float32)
            cache[text] = vec
        if np.isfinite(vec).all() and float(np.linalg.norm(vec)) >= min_norm:
            vectors[token_id] = vec
            missing[token_id] = False
    return vectors, missing


def save_token_vectors(
    npy_path: str | os.PathLike,
    mask_path: str | os.PathLike,
    vectors: np.ndarray,
    missing: np.ndarray,
) -> None:
    """Save vectors (float32 [V, dim]) and the missing mask (bool [V]) atomically."""
    vectors = np.asarray(vectors, dtype=np.float32)
    missing = np.asarray(missing, dtype=bool)
    if vectors.ndim != 2 or missing.shape != (vectors.shape[0],):
        raise ValueError(f"shapes do not match: vectors {vectors.shape}, missing {missing.shape}")
    save_npy(npy_path, vectors)
    save_npy(mask_path, missing)


def load_token_vectors(
    npy_path: str | os.PathLike, mask_path: str | os.PathLike
) -> tuple[np.ndarray, np.ndarray]:
    return np.load(npy_path), np.load(mask_path)
