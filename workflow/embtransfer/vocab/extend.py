"""Extend a byte-level BPE tokenizer with the target tokens it lacks (Gosal et al.).

The transfer stage's ``extend`` vocabulary mode (:mod:`embtransfer.transfer.transferred_model`)
keeps the source tokenizer and appends the target's new tokens after its ids:
:func:`new_target_tokens` says which, :func:`extend_tokenizer` appends them, with the
target merges that build them, so ordinary tokenisation produces them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from embtransfer.models.hf import n_token_ids
from embtransfer.vocab.canonical import detect_scheme

#: Special-token roles an extended tokenizer keeps from its source.
ROLES = ("bos", "eos", "unk", "pad", "mask", "cls", "sep")


def _bpe_scheme(tokenizer: Any) -> str:
    scheme, info = detect_scheme(tokenizer)
    return f"{scheme}/{info.get('model_type') or '?'}"


def _merge_pair(merge: Any) -> tuple[str, str]:
    if isinstance(merge, str):
        a, b = merge.split(" ", 1)
        return a, b
    return str(merge[0]), str(merge[1])


def new_target_tokens(source_tokenizer: Any, target_tokenizer: Any) -> list[int]:
    """Target ids of the ordinary vocabulary entries whose string the source vocab lacks.

    For two byte-level BPE tokenizers the string is the token's bytes and word-start
    flag, so this is the exact-match complement of the overlap.
    """
    source = source_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    target = target_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    special = set(target_tokenizer.all_special_ids)
    special |= {int(i) for i in target_tokenizer.backend_tokenizer.get_added_tokens_decoder()}
    return sorted(i for t, i in target.items() if t not in source and i not in special)


def extend_tokenizer(
    source_tokenizer: Any, target_tokenizer: Any, new_target_ids: Sequence[int]
) -> tuple[Any, list[int]]:
    """The source tokenizer with the target's ``new_target_ids`` appended to its vocabulary.

    Byte-level BPE source and target only: the entries are appended to the
    source's BPE model with the target merges that build them (ranked after
    every source merge), so ordinary tokenisation produces them; they are not
    added tokens. Returns the extended tokenizer and the new ids, position
    ``i`` holding the id of ``new_target_ids[i]``. A target token that is
    special, an added token, repeated, or already in the source vocabulary is
    refused: its row would have nowhere to go.
    """
    schemes = (_bpe_scheme(source_tokenizer), _bpe_scheme(target_tokenizer))
    if schemes != ("byte_level/BPE", "byte_level/BPE"):
        raise ValueError(
            f"extend mode supports byte-level BPE source and target tokenizers only; got "
            f"source {schemes[0]}, target {schemes[1]}"
        )
    src = json.loads(source_tokenizer.backend_tokenizer.to_str())
    tgt = json.loads(target_tokenizer.backend_tokenizer.to_str())
    new_tokens = _tokens_to_append(src, tgt, target_tokenizer, new_target_ids)
    vocab: dict[str, int] = src["model"]["vocab"]
    start = n_token_ids(source_tokenizer)
    new_ids = list(range(start, start + len(new_tokens)))
    vocab.update(zip(new_tokens, new_ids, strict=True))
    _append_merges(src["model"]["merges"], tgt["model"]["merges"], vocab)
    backend = Tokenizer.from_str(json.dumps(src))
    extended = _wrap(source_tokenizer, backend, start + len(new_ids), new_tokens, new_ids)
    return extended, new_ids


def _tokens_to_append(
    src: dict, tgt: dict, target_tokenizer: Any, new_target_ids: Sequence[int]
) -> list[str]:
    """The target strings of ``new_target_ids``; refuses any that cannot be appended."""
    vocab: dict[str, int] = src["model"]["vocab"]
    t_inv = {i: t for t, i in tgt["model"]["vocab"].items()}
    src_added = {a["content"] for a in src.get("added_tokens", [])}
    t_special = set(target_tokenizer.all_special_ids)
    t_special |= {a["id"] for a in tgt.get("added_tokens", [])}
    new_tokens: list[str] = []
    problems: list[str] = []
    for tid in (int(i) for i in new_target_ids):
        tok = t_inv.get(tid)
        if tok is None or tid in t_special:
            problems.append(f"{tid} (special or not in the target's BPE vocabulary)")
        elif tok in vocab or tok in src_added:
            problems.append(f"{tid} {tok!r} (already in the source vocabulary)")
        elif tok in new_tokens:
            problems.append(f"{tid} {tok!r} (repeated)")
        else:
            new_tokens.append(tok)
    if problems:
        raise ValueError(f"cannot append {len(problems)} target tokens: {problems[:10]}")
    return new_tokens


def _append_merges(merges: list, target_merges: list, vocab: dict[str, int]) -> None:
    """Append to ``merges`` the target merges whose parts and result ``vocab`` holds."""
    as_strings = bool(merges) and isinstance(merges[0], str)
    known = {_merge_pair(m) for m in merges}
    for merge in target_merges:
        a, b = _merge_pair(merge)
        if (a, b) not in known and a in vocab and b in vocab and a + b in vocab:
            merges.append(f"{a} {b}" if as_strings else [a, b])
            known.add((a, b))


def _wrap(
    source_tokenizer: Any, backend: Tokenizer, n_ids: int, new_tokens: list[str], new_ids: list[int]
) -> Any:
    """A transformers tokenizer of ``n_ids`` ids around ``backend``, as like the source's
    as it can be."""
    # Save and reload the source tokenizer around the new tokenizer.json: this keeps
    # its class, special-token roles, padding side and templates.
    with tempfile.TemporaryDirectory() as tmp:
        source_tokenizer.save_pretrained(tmp)
        backend.save(os.path.join(tmp, "tokenizer.json"))
        extended = AutoTokenizer.from_pretrained(tmp)
    if n_token_ids(extended) != n_ids or (
        new_tokens and extended.convert_tokens_to_ids(new_tokens[-1]) != new_ids[-1]
    ):
        # A tokenizer class that rebuilt itself from vocab files: wrap the backend directly.
        roles = {f"{r}_token": getattr(source_tokenizer, f"{r}_token", None) for r in ROLES}
        extended = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            model_max_length=source_tokenizer.model_max_length,
            **{k: v for k, v in roles.items() if v is not None},
        )
        extended.padding_side = source_tokenizer.padding_side
    return extended
