"""The corpus seam: the miniature world, local text, or a Wikipedia dump.

Every source ends as two plain-text files, ``train.txt`` and ``valid.txt``,
one sentence per line. The paper's setting (Wikipedia 20231101, NLTK sentences,
8M sentences, sequential 9:1 split) is the ``wikipedia`` type; it needs
internet (``datasets``, NLTK's punkt model), so real runs fetch it on a login
node and compute jobs read the files.
"""

from __future__ import annotations

import codecs
import os
import random
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from embtransfer.world.running_text import generate_sentences


def split_sequential(lines: list[str], valid_fraction: float) -> tuple[list[str], list[str]]:
    """Sequential split as in the paper: the first (1-f) of the lines train, the rest validate."""
    if len(lines) < 2:
        raise ValueError(f"need at least 2 lines to split a corpus, got {len(lines)}")
    n_valid = max(1, round(len(lines) * valid_fraction))
    return lines[:-n_valid], lines[-n_valid:]


def split_seed(seed: int, lang: str, split: str) -> int:
    """A per-(language, split) seed, stable across processes (no Python ``hash()``)."""
    return seed * 1_000_003 + zlib.crc32(f"{lang}/{split}".encode())


def mini_corpus(world: dict[str, Any], lang: str, seed: int) -> tuple[list[str], list[str]]:
    """Train and valid sentences of one miniature-world language."""
    sizes = world["config"]["sentences"]
    n_train = sizes["source_train"] if lang == world["source_language"] else sizes["target_train"]
    train = generate_sentences(world, lang, n_train, split_seed(seed, lang, "train"))
    valid = generate_sentences(world, lang, sizes["valid"], split_seed(seed, lang, "valid"))
    return train, valid


def source_llm_share(world: dict[str, Any], lang: str, seed: int) -> list[str]:
    """The text of target language ``lang`` a source LLM's pretraining mix draws its share
    from: like the language's corpus, but a configured fraction of it restates facts of the
    fact base (``source_llm_fact_fraction``), as multilingual web text restates what
    English text says. The target PLMs and LAPT read the corpus itself, which keeps the facts
    out unless ``target_fact_sentence_fraction`` is set."""
    cfg = world["config"]
    return generate_sentences(world, lang, cfg["sentences"]["target_train"],
                              split_seed(seed, lang, "source_llm"),
                              fact_fraction=cfg["source_llm_fact_fraction"])


def _clean(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        line = " ".join(line.split())
        if line:
            yield line


def _decode(data: bytes, path: Path, key: str, encoding: str, errors: str) -> str:
    """A corpus file's text; bytes the encoding cannot read are named by line and offset.

    UTF-8 is read as ``utf-8-sig``, so a byte-order mark does not become part of the first
    word; ``str.splitlines`` later takes CRLF line ends as line ends.
    """
    try:
        codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
        return data.decode(codec, errors)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        bad = data[err.start:err.end].hex(" ", 1)
        options = key.rsplit(".", 1)[0]  # languages.{lang}.corpus
        raise ValueError(
            f"corpus file {path} is not valid {encoding.upper()} at line {line}, byte offset "
            f"{err.start} (bytes 0x{bad}: {err.reason}; config key {key}). Convert the file "
            f"(e.g. iconv -f LATIN1 -t UTF-8), or set {options}.encoding to its encoding "
            f"(e.g. latin-1) or {options}.errors: replace to read such bytes as U+FFFD"
        ) from None
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r} (config key {key}): give a Python "
                         "codec name such as utf-8 or latin-1") from None


def _read_lines(path: Path, key: str, encoding: str = "utf-8", errors: str = "strict"
                ) -> list[str]:
    """The non-blank lines of a corpus file; a missing, empty or undecodable file is refused,
    naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {path} does not exist (config key {key})")
    text = _decode(path.read_bytes(), path, key, encoding, errors)
    lines = list(_clean(text.splitlines()))
    if not lines:
        raise ValueError(
            f"corpus file {path} is empty (no non-blank line; config key {key}): "
            "give a file with one sentence per line"
        )
    return lines


def local_corpus(spec: dict[str, Any], lang: str = "*") -> tuple[list[str], list[str]]:
    """Read ``spec['train']`` (and ``spec['valid']`` or a sequential split of train)."""
    key = f"languages.{lang}.corpus"
    text = {"encoding": spec.get("encoding", "utf-8"), "errors": spec.get("errors", "strict")}
    train = _read_lines(Path(spec["train"]), f"{key}.train", **text)
    if spec.get("valid"):
        return train, _read_lines(Path(spec["valid"]), f"{key}.valid", **text)
    return split_sequential(train, spec.get("valid_fraction", 0.1))


def wikipedia_corpus(
    spec: dict[str, Any], sentences: str | os.PathLike
) -> tuple[list[str], list[str]]:
    """Train/valid of a Wikipedia corpus: the downloaded sentences file, split sequentially.

    ``sentences`` is the output of the local rule ``fetch_wikipedia`` (one sentence
    per line, dump order); this step reads only that file, so it runs offline.
    """
    path = Path(sentences)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: run `snakemake --cores 1 {path}` (rule fetch_wikipedia) or "
            "`snakemake --cores 1 download_all` on a node with internet"
        )
    lines = path.read_text(encoding="utf-8").splitlines()
    want = spec.get("sentences", 8_000_000)
    if len(lines) < want:
        raise ValueError(f"{path} has {len(lines)} sentences, the config asks for {want}")
    return split_sequential(lines[:want], spec.get("valid_fraction", 0.1))


#: What a mix share is a share of: lines, or UTF-8 bytes of the corpus file (with newlines).
MIX_UNITS = ("lines", "bytes")


def _file_bytes(line: str) -> int:
    return len(line.encode("utf-8")) + 1  # the line and its newline, as the file holds it


def mix_corpora(
    main: list[str],
    others: dict[str, list[str]],
    shares: dict[str, float],
    seed: int,
    unit: str = "lines",
) -> list[str]:
    """``main`` plus, for each other language, ``share`` (of the mix) of its lines, shuffled.

    Used for the source LLM's pretraining text: mostly source language, with a
    small target-language share, as real English-centric LLMs see. ``unit="bytes"`` makes
    each share one of the mix's UTF-8 bytes rather than its lines (an Arabic line is
    longer in bytes than an English one, so line shares misstate how much text a model
    saw): lines are drawn in a seeded order until the language's bytes come nearest its
    share.
    """
    if unit not in MIX_UNITS:
        raise ValueError(f"mix unit must be one of {MIX_UNITS}, got {unit!r}")
    total_share = sum(shares.values())
    if not 0 <= total_share < 1:
        raise ValueError(f"mix shares must sum to less than 1, got {total_share}")
    rng = random.Random(seed)
    size = len if unit == "lines" else (lambda lines: sum(map(_file_bytes, lines)))
    # n_other / (n_main + sum n_other) = share  =>  n_other = share * n_main / (1 - total)
    mixed = list(main)
    for lang in sorted(shares):
        want = shares[lang] * size(main) / (1 - total_share)
        pool = others[lang]
        if unit == "lines":
            n = round(want)
        else:
            pool = rng.sample(pool, len(pool))  # a seeded order to draw whole lines in
            n = _lines_nearest(pool, want)
        if n > len(pool) or size(pool) < want - 0.5:
            raise ValueError(
                f"mix share {shares[lang]} of {lang!r} needs {want:.0f} {unit}, "
                f"its corpus has only {size(pool)}"
            )
        mixed.extend(rng.sample(pool, n) if unit == "lines" else pool[:n])
    rng.shuffle(mixed)
    return mixed


def _lines_nearest(pool: list[str], want: float) -> int:
    """How many of ``pool``'s first lines hold nearest ``want`` bytes."""
    total = 0
    for n, line in enumerate(pool):
        step = _file_bytes(line)
        if total + step > want:
            # this line overshoots: keep it only if that lands nearer than stopping short
            return n + 1 if total + step - want < want - total else n
        total += step
    return len(pool)
