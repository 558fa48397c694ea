"""Script-and-position heuristic (Downey et al. 2023, "Embedding structure matters";
docs/design.md §4.4).

Shared tokens copy their source row (``copied``). Every other target token is
drawn from N(mean_g, diag(std_g^2)), the per-dimension mean and standard
deviation of the source rows in the token's group g = (Unicode script, word
position), as in the reference (github.com/cmdowney88/EmbeddingStructure,
``reinitialize_by_script``: ``torch.std_mean`` per category, then
``torch.distributions.Normal`` per dimension; std with Bessel's correction).

* Script: the dominant script of the token's text (the vocabulary's real bytes
  as UTF-8, incomplete edge bytes dropped), by character count, ties to the
  script seen first; see :func:`char_script`. Special tokens form the group
  ``SPECIAL``, lone-byte tokens ``BYTE``, tokens with no classifiable text
  ``NONE``. Source special rows (and padding rows) are in no pool
  (``TransferInputs.statistic_ids``), so a target special token backs off to
  all of the source's text-token rows.
* Position: the vocabulary's ``start`` flag (word-initial vs continuation), as
  the reference's ``_initial`` / ``_medial`` split on ``▁``.

A group with fewer than ``min_rows`` source rows (default 10: a per-dimension
std from fewer rows is mostly noise; the reference has no minimum, and a
single-row category gives it NaN) backs off to the same script at any
position (label ``script``), then to all source rows (label ``all``); rows drawn
from their own group are labelled ``script_position``. The reference leaves
tokens of unseen categories at the model's default random init; here they use
the back-off.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.transfer.methods.base import SideResult, TransferInputs, register
from embtransfer.transfer.methods.common import (
    copy_shared,
    count_labels,
    diagonal_normal,
    empty_result,
    nonshared_ids,
)
from embtransfer.vocab.canonical import token_text

#: Width prefixes dropped before reading the script word (FULLWIDTH LATIN ... -> LATIN).
_WIDTH = ("FULLWIDTH ", "HALFWIDTH ")


@lru_cache(maxsize=65536)
def char_script(ch: str) -> str | None:
    """Script class of one character, or None when it should not vote (combining marks).

    Letters and marks: the first word of their Unicode name (LATIN, ARABIC,
    CYRILLIC, GREEK, HEBREW, DEVANAGARI, HANGUL, ...), with every ``CJK ...``
    name as ``CJK``; numbers ``NUMBER``; punctuation and symbols ``PUNCT``;
    spaces, controls and unnamed characters ``OTHER``.
    """
    category = unicodedata.category(ch)
    if category[0] == "N":
        return "NUMBER"
    if category[0] in "PS":
        return "PUNCT"
    if category[0] not in "LM":
        return "OTHER"
    name = unicodedata.name(ch, "")
    for prefix in _WIDTH:
        name = name.removeprefix(prefix)
    if not name:
        return "OTHER"
    if name.startswith("COMBINING"):
        return None  # inherits its base character's script
    word = name.split(" ", 1)[0]
    if word in ("MODIFIER", "SMALL"):
        return "OTHER"
    return word


def text_script(text: str) -> str:
    """Dominant script of ``text`` by character count (ties: first seen); ``NONE`` if empty."""
    scripts = [s for s in map(char_script, text) if s is not None]
    if not scripts:
        return "NONE"
    if scripts.count(scripts[0]) == len(scripts):  # one script: most tokens, no count
        return scripts[0]
    votes = Counter(scripts)
    return max(votes, key=votes.__getitem__)  # Counter keeps first-seen order for ties


def token_scripts(vocab: pd.DataFrame) -> np.ndarray:
    """Script group of every row of a vocabulary table (indexed by position)."""
    kinds = vocab["kind"].to_numpy()
    out = np.empty(len(vocab), object)
    for i, (raw, kind) in enumerate(zip(vocab["bytes"].to_numpy(), kinds, strict=True)):
        if kind == "special":
            out[i] = "SPECIAL"
        elif kind == "byte":
            out[i] = "BYTE"
        else:
            out[i] = text_script(token_text(bytes(raw) if raw is not None else b""))
    return out


def _groups(vocab: pd.DataFrame, n_rows: int) -> pd.DataFrame:
    """id, script, start of the vocabulary rows with id < n_rows."""
    table = pd.DataFrame(
        {
            "id": vocab["id"].to_numpy(np.int64),
            "script": token_scripts(vocab),
            "start": vocab["start"].to_numpy(bool),
        }
    )
    return table[table["id"] < n_rows]


@register("heuristics")
def heuristics(inputs: TransferInputs, params: dict[str, Any], side: str) -> SideResult:
    min_rows = int(params["min_rows"])
    if min_rows < 2:
        raise ValueError("heuristics: min_rows must be >= 2 (a std needs two rows)")
    matrix = inputs.source_matrix(side)
    rows, how = empty_result(inputs, side)
    copy_shared(inputs, side, rows, how)
    todo = nonshared_ids(inputs)

    src = _groups(inputs.source_vocab, matrix.shape[0])
    trained = inputs.statistic_ids()
    src = src[src["id"].isin(trained)]  # no special / placeholder rows in any pool
    by_group = {key: g["id"].to_numpy() for key, g in src.groupby(["script", "start"])}
    by_script = {key: g["id"].to_numpy() for key, g in src.groupby("script")}
    tgt = _groups(inputs.target_vocab, inputs.n_target).set_index("id").loc[todo]
    tgt["row"] = todo

    rng = inputs.rng("heuristics", side)
    used: dict[str, dict[str, Any]] = {}
    # groups in sorted order and rows in target-id order: reproducible draws
    for (script, start), g in tgt.groupby(["script", "start"], sort=True):
        ids = g["row"].to_numpy()
        pool = by_group.get((script, start), np.zeros(0, np.int64))
        label = "script_position"
        if pool.size < min_rows:
            pool, label = by_script.get(script, np.zeros(0, np.int64)), "script"
        if pool.size < min_rows:
            label = "all"
        pool = trained if label == "all" else pool
        rows[ids] = diagonal_normal(matrix, rng, ids.size, ddof=1, ids=pool)
        how[ids] = label
        used[f"{script}/{'start' if start else 'cont'}"] = {
            "tokens": int(ids.size), "source_rows": int(pool.size), "from": label,
        }
    return SideResult(rows, how, {"counts": count_labels(how), "groups": used})
