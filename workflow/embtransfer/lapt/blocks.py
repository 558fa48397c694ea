"""Tokenise once: a corpus's packed LAPT blocks as a memory-mapped artifact.

:func:`build_blocks` tokenises a text file (one document per line) with a
checkpoint's tokenizer, joins the documents with a separator token and cuts the
stream into full rows of ``max_length`` tokens, written as ``<name>.npy``
(``uint32 [n_blocks, max_length]``) with a JSON sidecar ``<name>.json``
(tokenizer and corpus sha256, max_length, separator id and where it came from,
block and token counts). Every LAPT job of that tokenizer and every resume
memory-maps the same file (:func:`load_blocks`), which refuses blocks made with
another tokenizer or length, naming the file.

The separator between documents (issue: WordPiece targets have no EOS) is the
tokenizer's EOS, else its SEP, else the checkpoint config's ``eos_token_id``
(the source's EOS as the transfer mapped it); none of them is an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from embtransfer.core.atomic import atomic_path, write_json

LINES_PER_BATCH = 10_000


class BlocksMismatchError(ValueError):
    """Blocks made with another tokenizer or length than the run that wants them."""


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tokenizer_sha256(tokenizer: Any) -> str:
    """Hash of what decides the ids: the fast tokenizer's full definition and special roles."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    roles = {r: getattr(tokenizer, f"{r}_token_id", None)
             for r in ("bos", "eos", "sep", "cls", "pad", "unk")}
    text = json.dumps({"backend": backend, "roles": roles}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def separator_id(tokenizer: Any, config_eos: int | None, where: str) -> tuple[int, str]:
    """The document separator and its origin: ``eos``, ``sep`` or ``config eos``."""
    for role in ("eos", "sep"):
        tid = getattr(tokenizer, f"{role}_token_id", None)
        if tid is not None:
            return int(tid), role
    if isinstance(config_eos, list | tuple):
        config_eos = config_eos[0] if config_eos else None
    if config_eos is not None:
        return int(config_eos), "config eos"
    raise ValueError(
        f"{where}: the tokenizer has no EOS or SEP token and the config no eos_token_id, so "
        f"LAPT cannot separate documents; add an eos_token to the tokenizer "
        f"(tokenizer_config.json) or set eos_token_id in config.json"
    )


def _doc_batches(path: Path) -> Any:
    batch: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                batch.append(line.rstrip("\n"))
                if len(batch) == LINES_PER_BATCH:
                    yield batch
                    batch = []
    if batch:
        yield batch


def build_blocks(tokenizer: Any, config_eos: int | None, corpus: str | Path, max_length: int,
                 out_npy: str | Path, tokenizer_where: str = "tokenizer") -> dict[str, Any]:
    """Write ``out_npy`` and its sidecar (module docstring); returns the sidecar."""
    corpus, out_npy = Path(corpus), Path(out_npy)
    sep, origin = separator_id(tokenizer, config_eos, tokenizer_where)
    vocab = len(tokenizer)
    if vocab >= 2**32:
        raise ValueError(f"{tokenizer_where}: {vocab} tokens do not fit uint32 blocks")
    # Stream the ids through a raw temporary file: memory stays one batch of lines.
    n_docs = n_tokens = 0
    sidecar(out_npy).unlink(missing_ok=True)  # an old one must never describe the new blocks
    out_npy.parent.mkdir(parents=True, exist_ok=True)
    fd, raw_name = tempfile.mkstemp(prefix=f".{out_npy.name}.stream-", dir=out_npy.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            for lines in _doc_batches(corpus):
                for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]:
                    arr = np.asarray([*ids, sep], dtype=np.uint32)
                    raw.write(arr.tobytes())
                    n_tokens += len(arr)
                    n_docs += 1
        if n_docs == 0:
            raise ValueError(f"{corpus}: no text to train on (every line is empty)")
        stream = np.memmap(raw_name, dtype=np.uint32, mode="r", shape=(n_tokens,))
        n_blocks = n_tokens // max_length
        with atomic_path(out_npy) as tmp:
            if n_blocks == 0:
                # A corpus shorter than one block still gives one: repeated, not refused.
                reps = -(-max_length // n_tokens)
                with open(tmp, "wb") as fh:
                    np.save(fh, np.tile(np.asarray(stream), reps)[:max_length][None, :],
                            allow_pickle=False)
                n_blocks = 1
            else:
                out = np.lib.format.open_memmap(str(tmp), mode="w+", dtype=np.uint32,
                                                shape=(n_blocks, max_length))
                out[:] = stream[: n_blocks * max_length].reshape(n_blocks, max_length)
                out.flush()
                del out
        del stream
    finally:
        Path(raw_name).unlink(missing_ok=True)
    # The sidecar last: blocks without one are rebuilt, never trusted.
    meta = {"tokenizer_sha256": tokenizer_sha256(tokenizer),
            "corpus_sha256": file_sha256(corpus), "corpus": str(corpus),
            "max_length": int(max_length), "separator_id": sep, "separator": origin,
            "vocab_size": vocab, "documents": n_docs, "tokens": n_tokens,
            "blocks": int(n_blocks)}
    write_json(sidecar(out_npy), meta)
    return meta


def sidecar(npy: str | Path) -> Path:
    return Path(npy).with_suffix(".json")


def load_blocks(npy: str | Path, tokenizer: Any, max_length: int) -> tuple[np.ndarray, dict]:
    """Memory-map ``npy`` after checking its sidecar against ``tokenizer`` and ``max_length``."""
    npy = Path(npy)
    meta_file = sidecar(npy)
    if not meta_file.is_file():
        raise BlocksMismatchError(f"{npy}: no sidecar {meta_file}; rebuild the blocks")
    meta = json.loads(meta_file.read_text())
    want = tokenizer_sha256(tokenizer)
    if meta["tokenizer_sha256"] != want:
        raise BlocksMismatchError(
            f"{npy} was tokenised with another tokenizer (sha256 {meta['tokenizer_sha256'][:12]}"
            f", this model's is {want[:12]}); rebuild it with this model's tokenizer"
        )
    if int(meta["max_length"]) != int(max_length):
        raise BlocksMismatchError(
            f"{npy} holds blocks of {meta['max_length']} tokens, the run wants {max_length}; "
            f"rebuild it with lapt.max_length {max_length}"
        )
    blocks = np.load(npy, mmap_mode="r")
    if blocks.dtype != np.uint32 or blocks.shape != (int(meta["blocks"]), int(max_length)):
        raise BlocksMismatchError(f"{npy}: shape {blocks.shape} / dtype {blocks.dtype} do not "
                                  f"match its sidecar {meta_file}; rebuild it")
    return blocks, meta


def blocks_for(source: str | Path, tokenizer: Any, config_eos: int | None, max_length: int,
               cache_dir: Path, name: str) -> tuple[np.ndarray, dict]:
    """Blocks of ``source``: a built ``.npy`` as is, or a text file tokenised into ``cache_dir``.

    A cached build is reused only when its sidecar names this corpus's hash (and the
    tokenizer and length, checked by :func:`load_blocks`).
    """
    source = Path(source)
    if source.suffix == ".npy":
        return load_blocks(source, tokenizer, max_length)
    npy = cache_dir / f"{name}.npy"
    if npy.is_file() and sidecar(npy).is_file():
        meta = json.loads(sidecar(npy).read_text())
        fresh = (meta.get("corpus_sha256") == file_sha256(source)
                 and meta.get("tokenizer_sha256") == tokenizer_sha256(tokenizer)
                 and meta.get("max_length") == max_length)
        if fresh:
            return load_blocks(npy, tokenizer, max_length)
    build_blocks(tokenizer, config_eos, source, max_length, npy)
    return load_blocks(npy, tokenizer, max_length)
