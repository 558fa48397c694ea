"""Canonical token forms: every token as (its real bytes, start-of-word flag).

Tokenizers mark word starts differently (byte-level BPE ``Ġ``, SentencePiece
``▁``, WordPiece ``##`` on continuations, fairseq BPE ``@@`` on non-final
pieces) and byte-level BPE hides raw bytes behind the GPT-2 byte-to-unicode
table. Two PLM conventions get canonical forms of their own:

* fairseq BPE (PhoBERT, scheme ``fairseq_bpe``, a slow tokenizer): ``xin@@``
  is the piece ``xin`` of a word that continues; the piece itself carries no
  word-start mark, so every piece counts as a word start (``▁xin``; with the
  default fuzzy match the flag does not matter). PhoBERT reads word-segmented
  text whose multi-syllable words join their syllables with ``_``
  (``sinh_viên``): a ``_`` between two other characters stands for the space
  between syllables (canonical ``▁sinh viên``); a lone ``_`` stays ``_``.
* Farasa segment marks (AraBERT v2, a WordPiece vocabulary with at least
  :data:`FARASA_MIN_TOKENS` tokens of the form ``letters+`` or ``+letters``):
  ``ال+`` is the prefix ``ال`` that begins a word (``▁ال``), ``+ها`` the suffix
  ``ها`` that continues one (``ها``, start False). A lone ``+`` stays ``+``.

:func:`vocab_table` undoes all of that, so vocabularies of different families
can be compared byte for byte (:mod:`embtransfer.vocab.overlap`). Decoded strings
are never compared: a byte-level piece holding half of an Arabic letter has no
string form, only bytes.

Columns of the table (one row per id ``0 .. len(tokenizer) - 1``):

``id``        int64 token id
``token``     the raw vocabulary string (``Ġhello``, ``##ing``, ``▁word``, ``<0x41>``)
``bytes``     the token's real bytes without the word-start marker; ``b""`` for
              special tokens (and for ids the tokenizer has no token for)
``canonical`` human-readable form: ``▁`` if start-of-word, then the bytes decoded
              as UTF-8 with ``backslashreplace`` (partial UTF-8 shows as ``\\xd8``);
              special tokens show their raw string
``start``     bool, start-of-word flag
``kind``      ``special`` | ``byte`` (a single raw byte: SentencePiece ``<0xNN>``
              fallback tokens, and byte-level BPE single bytes >= 0x80) | ``normal``
``role``      comma-joined roles of a special token in the fixed order of
              :data:`ROLES` (``"bos,eos,unk"`` for GPT-2's ``<|endoftext|>``), or None

Which tokens are special: the tokenizer's role tokens (bos, eos, pad, unk,
mask, sep, cls and its other special-token attributes such as Gemma 3's image
tokens), every added token flagged ``special``, and every added token shaped as
control markup (:data:`CONTROL_MARKUP`: ``<...>``, ``<|...|>``, ``[...]``,
no whitespace inside). The flag alone is not enough: Gemma 3 flags 9 of its
6,415 added tokens, leaving its 6,242 never-trained ``<unusedN>`` placeholders,
``<mask>`` and ``[multimodal]`` looking like text, and Qwen 3 leaves ``<think>``,
``<tool_call>`` and ``<|fim_prefix|>`` unflagged. The tokenizer files cannot
tell a trained markup symbol from an untrained placeholder (Gemma's 70 HTML
tags such as ``<h1>``/``</div>`` are added tokens exactly like ``<unused0>``),
so every markup-shaped added token counts as special: it is never matched as
text and its row stays out of every statistic over the source's embeddings,
which errs on the safe side. Added tokens of other shapes (Gemma's newline and
``▁`` runs, words added with ``add_tokens``) are text.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from embtransfer.core.atomic import read_parquet_metadata, write_parquet

#: Special-token roles, in the order they are joined in the ``role`` column.
ROLES: tuple[str, ...] = ("bos", "eos", "pad", "unk", "mask", "sep", "cls")
KINDS: tuple[str, ...] = ("special", "byte", "normal")
COLUMNS: tuple[str, ...] = ("id", "token", "bytes", "canonical", "start", "kind", "role")
SCHEMES: tuple[str, ...] = ("byte_level", "sentencepiece", "wordpiece", "fairseq_bpe", "plain")

SPIECE_MARK = "\u2581"  # ▁
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
#: Control markup: ``<...>``, ``<|...|>``, ``[...]`` without whitespace inside.
CONTROL_MARKUP = re.compile(r"<[^\s<>]+>|\[[^\s\[\]]+\]")
#: Farasa segment marks (AraBERT v2): a prefix ``ال+`` or a suffix ``+ها`` of letters.
FARASA_PREFIX = re.compile(r"([^\W\d_]+)\+")
FARASA_SUFFIX = re.compile(r"\+([^\W\d_]+)")
#: A WordPiece vocabulary with at least this many Farasa-marked tokens is Farasa-segmented.
FARASA_MIN_TOKENS = 10
FAIRSEQ_SUFFIX = "@@"


@lru_cache(maxsize=1)
def _byte_decoder_table() -> dict[int, str]:
    """str.translate table: GPT-2 byte-to-unicode char -> latin-1 char of the byte.

    Translating then encoding as latin-1 turns a byte-level token into its raw
    bytes in one C-level pass per token.
    """
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {c: chr(b) for b, c in zip(bs, cs, strict=True)}


def _components(node: Any) -> list[dict[str, Any]]:
    """Flatten a pre_tokenizer / normalizer / decoder spec (Sequence nests them)."""
    if not isinstance(node, dict):
        return []
    out = [node]
    for key in ("pretokenizers", "normalizers", "decoders"):
        for child in node.get(key) or []:
            out.extend(_components(child))
    return out


def detect_scheme(tokenizer: Any) -> tuple[str, dict[str, Any]]:
    """Return ``(scheme, info)`` from the fast tokenizer's backend JSON.

    ``scheme`` is one of :data:`SCHEMES`; ``info`` carries the marker
    (SentencePiece replacement char, WordPiece continuation prefix) and the
    model type. ``plain`` (no word-start convention recognised) takes each
    token's UTF-8 as its bytes, with start False.
    """
    if not hasattr(tokenizer, "backend_tokenizer"):  # a slow (Python) tokenizer
        vocab = tokenizer.get_vocab()
        if hasattr(tokenizer, "bpe_ranks") and any(t.endswith(FAIRSEQ_SUFFIX) for t in vocab):
            return "fairseq_bpe", {"model_type": "fairseq BPE", "suffix": FAIRSEQ_SUFFIX}
        return "plain", {"model_type": type(tokenizer).__name__}
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec.get("model") or {}
    mtype = model.get("type", "")
    parts = (
        _components(spec.get("pre_tokenizer"))
        + _components(spec.get("decoder"))
        + _components(spec.get("normalizer"))
    )
    types = {p.get("type") for p in parts}
    info: dict[str, Any] = {"model_type": mtype}
    if "ByteLevel" in types:
        return "byte_level", info
    mark = None
    for p in parts:
        if p.get("type") == "Metaspace":
            mark = p.get("replacement") or SPIECE_MARK
            break
        # Llama / Gemma style: normalizer Replace(" " -> "▁"), decoder Replace("▁" -> " ")
        if p.get("type") == "Replace" and SPIECE_MARK in json.dumps(p, ensure_ascii=False):
            mark = SPIECE_MARK
    if mark is not None or mtype == "Unigram" or model.get("byte_fallback"):
        info["mark"] = mark or SPIECE_MARK
        return "sentencepiece", info
    if mtype == "WordPiece":
        info["prefix"] = model.get("continuing_subword_prefix") or "##"
        marked = sum(
            1
            for t in model.get("vocab", {})
            if FARASA_PREFIX.fullmatch(t) or FARASA_SUFFIX.fullmatch(t)
        )
        info["farasa"] = marked >= FARASA_MIN_TOKENS
        return "wordpiece", info
    return "plain", info


def _roles_by_id(tokenizer: Any, vocab: dict[str, int]) -> dict[int, str]:
    found: dict[int, list[str]] = {}
    for role in ROLES:
        tok = getattr(tokenizer, f"{role}_token", None)
        if tok is None:
            continue
        # a lookup, not convert_tokens_to_ids: a role token missing from the
        # vocabulary must not silently become the unk id.
        tid = vocab.get(str(tok))
        if tid is not None:
            found.setdefault(int(tid), []).append(role)
    return {tid: ",".join(roles) for tid, roles in found.items()}


def is_control_added_token(content: str, special: bool) -> bool:
    """Whether an added token is a control symbol rather than text (see the module docstring).

    Flagged special, or shaped as markup (``<unused0>``, ``<start_of_turn>``,
    ``<|fim_prefix|>``, ``[multimodal]``): the ``special`` flag alone misses
    most of them (Gemma 3 flags 9 of its 6,415 added tokens).
    """
    return special or CONTROL_MARKUP.fullmatch(content) is not None


def _special_ids(tokenizer: Any, added: dict[int, Any], role_ids: dict[int, str]) -> set[int]:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None}
    ids |= {int(i) for i, tok in added.items() if is_control_added_token(tok.content, tok.special)}
    ids |= set(role_ids)
    return ids


def _decode(token: str, scheme: str, info: dict[str, Any]) -> tuple[bytes, bool, bool]:
    """(bytes, start, is_byte_token) of one model-vocabulary token."""
    if scheme == "byte_level":
        try:
            raw = token.translate(_byte_decoder_table()).encode("latin-1")
        except UnicodeEncodeError:  # not a byte-level string after all: take it as text
            raw = token.encode("utf-8")
        start = len(raw) > 1 and raw[:1] == b" "
        if start:
            raw = raw[1:]
        # a lone byte >= 0x80 is not a character on its own
        return raw, start, len(raw) == 1 and raw[0] >= 0x80
    if scheme == "sentencepiece":
        m = _BYTE_FALLBACK.match(token)
        if m:
            return bytes([int(m.group(1), 16)]), False, True
        mark = info["mark"]
        start = len(token) > 1 and token.startswith(mark)
        text = token[1:] if start else token
        # remaining marks stand for spaces (Gemma's whitespace runs, a lone "▁")
        return text.replace(mark, " ").encode("utf-8"), start, False
    if scheme == "wordpiece":
        prefix = info["prefix"]
        cont = len(token) > len(prefix) and token.startswith(prefix)
        text = token[len(prefix) :] if cont else token
        if info.get("farasa") and not cont:
            if m := FARASA_PREFIX.fullmatch(text):  # "ال+": a prefix, begins its word
                return m.group(1).encode("utf-8"), True, False
            if m := FARASA_SUFFIX.fullmatch(text):  # "+ها": a suffix, continues its word
                return m.group(1).encode("utf-8"), False, False
        return text.encode("utf-8"), not cont, False
    if scheme == "fairseq_bpe":
        # "xin@@": a non-final piece; "_" joins the syllables of a segmented word
        text = token.removesuffix(FAIRSEQ_SUFFIX) if len(token) > 2 else token
        if len(text) > 1:
            text = re.sub(r"(?<=[^_])_(?=[^_])", " ", text)
        return text.encode("utf-8"), True, False
    return token.encode("utf-8"), False, False


def _added_text(token: str) -> tuple[bytes, bool]:
    """Added non-special tokens hold raw text (matched before pre-tokenisation)."""
    raw = token.encode("utf-8")
    start = len(raw) > 1 and raw[:1] == b" "
    return (raw[1:] if start else raw), start


def canonical_form(raw: bytes, start: bool) -> str:
    return (SPIECE_MARK if start else "") + raw.decode("utf-8", errors="backslashreplace")


def vocab_table(tokenizer: Any) -> pd.DataFrame:
    """One row per token id with its canonical form; see the module docstring.

    ``tokenizer`` is a ``PreTrainedTokenizerBase``, fast (``tokenizers``-backed)
    or slow (PhoBERT's ``PhobertTokenizer``). The table's ``attrs`` carry
    ``scheme``, ``vocab_size`` and ``tokenizer`` (name or path) for
    :func:`write_vocab`.
    """
    scheme, info = detect_scheme(tokenizer)
    model_vocab, full_vocab, added, id_to_tok = _vocabularies(tokenizer)
    n = max(len(tokenizer), max(id_to_tok, default=-1) + 1)
    role_ids = _roles_by_id(tokenizer, full_vocab)
    special = _special_ids(tokenizer, added, role_ids)
    rows = []
    for i in range(n):
        tok = id_to_tok.get(i)
        from_model = tok is not None and model_vocab.get(tok) == i
        rows.append(_token_row(tok, i in special, from_model, scheme, info))
    tokens, raws, starts, kinds, canon = ([row[c] for row in rows] for c in range(5))
    # a hole in the id range has no role either
    roles = [role_ids.get(i) if i in id_to_tok else None for i in range(n)]
    table = pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64),
            "token": pd.Series(tokens, dtype=object),
            "bytes": pd.Series(raws, dtype=object),
            "canonical": pd.Series(canon, dtype=object),
            "start": np.array(starts, dtype=bool),
            "kind": pd.Series(kinds, dtype=object),
            "role": pd.Series(roles, dtype=object),
        }
    )
    table.attrs.update(
        scheme=scheme, vocab_size=n, tokenizer=str(getattr(tokenizer, "name_or_path", "") or "")
    )
    return table


def _vocabularies(
    tokenizer: Any,
) -> tuple[dict[str, int], dict[str, int], dict[int, Any], dict[int, str]]:
    """(model vocabulary, full vocabulary, added tokens by id, token string by id)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        model_vocab: dict[str, int] = backend.get_vocab(with_added_tokens=False)
        full_vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
        added: dict[int, Any] = dict(backend.get_added_tokens_decoder())
    else:  # slow: the model vocabulary is what the added-token table does not hold
        full_vocab = tokenizer.get_vocab()
        added = {int(i): tok for i, tok in tokenizer.added_tokens_decoder.items()}
        model_vocab = {t: i for t, i in full_vocab.items() if i not in added}
    id_to_tok: dict[int, str] = {i: t for t, i in full_vocab.items()}
    # also cover ids only the transformers side knows (should not happen with v5)
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        id_to_tok.setdefault(int(i), str(tok))
    return model_vocab, full_vocab, added, id_to_tok


def _token_row(
    tok: str | None, special: bool, from_model: bool, scheme: str, info: dict[str, Any]
) -> tuple[str, bytes, bool, str, str]:
    """(token, bytes, start, kind, canonical) of one id; ``from_model``: ``tok`` is the
    model vocabulary's entry for the id."""
    if tok is None:  # a hole in the id range: no bytes, never matched
        return "", b"", False, "normal", ""
    if special:
        return tok, b"", False, "special", tok
    # a non-special added token that duplicates a model entry keeps the
    # model's conventions (e.g. Gemma's "▁▁" whitespace runs)
    if from_model:
        raw, start, is_byte = _decode(tok, scheme, info)
    else:
        raw, start = _added_text(tok)
        is_byte = False
    return tok, raw, start, "byte" if is_byte else "normal", canonical_form(raw, start)


def write_vocab(
    table: pd.DataFrame,
    path: str | os.PathLike,
    *,
    tokenizer_name: str | None = None,
    scheme: str | None = None,
) -> None:
    """Write the vocab table as parquet, atomically, with its metadata.

    Metadata (``embtransfer`` schema key): ``scheme``, ``vocab_size``,
    ``tokenizer`` (name or path); arguments override the table's ``attrs``.
    """
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"vocab table lacks columns {missing}")
    meta = {
        "scheme": scheme or table.attrs.get("scheme", "unknown"),
        "vocab_size": int(len(table)),
        "tokenizer": tokenizer_name or table.attrs.get("tokenizer", ""),
    }
    arrow = pa.table(
        {
            "id": pa.array(table["id"].to_numpy(dtype=np.int64)),
            "token": pa.array(table["token"].tolist(), type=pa.string()),
            "bytes": pa.array(table["bytes"].tolist(), type=pa.binary()),
            "canonical": pa.array(table["canonical"].tolist(), type=pa.string()),
            "start": pa.array(table["start"].to_numpy(dtype=bool)),
            "kind": pa.array(table["kind"].tolist(), type=pa.string()),
            "role": pa.array(
                [None if _missing(r) else r for r in table["role"].tolist()], type=pa.string()
            ),
        }
    )
    write_parquet(path, arrow, metadata=meta)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def read_vocab(path: str | os.PathLike) -> pd.DataFrame:
    """Read a table written by :func:`write_vocab`; metadata lands in ``attrs``."""
    arrow = pq.read_table(path)
    table = pd.DataFrame(
        {
            "id": arrow.column("id").to_numpy().astype(np.int64),
            "token": pd.Series(arrow.column("token").to_pylist(), dtype=object),
            "bytes": pd.Series(arrow.column("bytes").to_pylist(), dtype=object),
            "canonical": pd.Series(arrow.column("canonical").to_pylist(), dtype=object),
            "start": arrow.column("start").to_numpy().astype(bool),
            "kind": pd.Series(arrow.column("kind").to_pylist(), dtype=object),
            "role": pd.Series(arrow.column("role").to_pylist(), dtype=object),
        }
    )
    meta = read_parquet_metadata(path)
    table.attrs.update(meta)
    table.attrs.setdefault("name", meta.get("tokenizer") or os.fspath(path))
    return table


def token_text(raw: bytes) -> str:
    """The UTF-8 text of a token's bytes, without partial characters at the edges.

    A byte-level piece may start inside a character (continuation bytes) or stop
    before its end (a lead byte without all its continuations); those edge bytes
    are dropped. Invalid bytes elsewhere are dropped too. Never returns U+FFFD.
    """
    data = bytes(raw)
    try:  # valid UTF-8 has no partial edge character: nothing to drop (most tokens)
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return text_without_cut_edges(data)


def text_without_cut_edges(data: bytes) -> str:
    """:func:`token_text` of any bytes: the cut edge characters dropped, then the invalid
    bytes left."""
    start = 0
    while start < len(data) and start < 3 and 0x80 <= data[start] <= 0xBF:
        start += 1
    end = len(data)
    # find the last lead byte in the final 4 bytes; drop it if its sequence is cut
    for back in range(1, min(4, end - start) + 1):
        byte = data[end - back]
        if 0x80 <= byte <= 0xBF:
            continue
        need = (
            2 if 0xC0 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else 4 if byte >= 0xF0 else 1
        )
        if need > back:
            end -= back
        break
    return data[start:end].decode("utf-8", errors="ignore")
