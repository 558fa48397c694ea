"""A held-out share of the shared tokens: hidden from every method as though the source
lacked them, so that each method's rows for them can be scored against the source's own.

The methods that build rows from shared tokens (SALT, Lstsq, OMP, FOCUS) rest on one
premise: what the shared tokens teach predicts the rows of the tokens the source lacks. A
shared token has a known answer, its source row, so holding some out tests that premise
directly, over thousands of tokens and without a dictionary.

The share is drawn per kind of token (:data:`embtransfer.vocab.kinds.KINDS`: a word, a
piece, a name, digits, punctuation, a byte), so the held-out tokens are made of the same
kinds in the same proportions as the shared ones. It is drawn by source id, not target id:
a fuzzy match can give one source token to several target tokens, and a method that keeps
one of them would still see the held-out row. Special tokens, paired by role, are never
held out.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from embtransfer.vocab.kinds import KINDS

#: The columns :func:`holdout_split` adds to an overlap table.
HOLDOUT_COLUMNS = ("kind", "held_out")


def source_kinds(overlap: pd.DataFrame, kinds: pd.Series) -> pd.Series:
    """The kind of every shared source id: that of its lowest target id (target ids without
    a kind, the special tokens, are left out), indexed by source id in increasing order."""
    rows = overlap[overlap["target_id"].isin(kinds.index)]
    first = rows.sort_values(["source_id", "target_id"], kind="stable").drop_duplicates(
        "source_id")
    out = pd.Series(kinds.loc[first["target_id"].to_numpy()].to_numpy(dtype=object),
                    index=first["source_id"].to_numpy(np.int64), dtype=object, name="kind")
    return out.sort_index()


def held_out_source_ids(by_kind: pd.Series, share: float, seed: int) -> np.ndarray:
    """The source ids held out: ``share`` of each kind's ids (rounded, at least one where the
    kind has two or more, so every kind is represented), drawn with ``seed``; sorted."""
    if not 0 < share < 1:
        raise ValueError(f"transfer.holdout.share must lie in (0, 1), got {share}")
    unknown = set(by_kind.unique()) - set(KINDS)
    if unknown:
        raise ValueError(f"shared tokens of unknown kinds {sorted(unknown)}; kinds: {KINDS}")
    chosen = []
    for number, kind in enumerate(KINDS):
        ids = np.sort(by_kind.index[by_kind.to_numpy() == kind].to_numpy(np.int64))
        count = int(round(share * ids.size))
        if ids.size >= 2:
            count = min(max(count, 1), ids.size - 1)  # leave every kind something to learn
        # one generator per kind: adding a token of one kind leaves the others' draws alone
        rng = np.random.default_rng([seed, number])
        chosen.append(rng.choice(ids, size=count, replace=False) if count else ids[:0])
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)


def holdout_split(overlap: pd.DataFrame, kinds: pd.Series, share: float, seed: int
                  ) -> pd.DataFrame:
    """``overlap`` (``target_id``, ``source_id``, ``how``) with each row's ``kind`` (empty for
    a special token) and ``held_out``: its source id is held out, so every target token that
    shares it is hidden from every method. The same rows in any order give the same split."""
    by_kind = source_kinds(overlap, kinds)
    held = held_out_source_ids(by_kind, share, seed)
    out = overlap.copy()
    out["kind"] = out["target_id"].map(kinds).fillna("").astype(object)
    out["held_out"] = out["source_id"].isin(held) & (out["kind"] != "")
    return out


def counts_by_kind(split: pd.DataFrame) -> pd.DataFrame:
    """Per kind: shared target tokens, those held out and their share (the record a run
    keeps beside the split, and the report's denominator)."""
    text = split[split["kind"] != ""]
    table = text.groupby("kind").agg(shared=("target_id", "size"),
                                     held_out=("held_out", "sum"))
    table = table.reindex([k for k in KINDS if k in table.index])
    table["share"] = table["held_out"] / table["shared"]
    return table.reset_index()


def held_out_overlap(split: pd.DataFrame) -> pd.DataFrame:
    """The overlap a held-out transfer sees: the split's rows not held out, in the overlap's
    columns (the neighbour tables, SALT's regression and every method read it)."""
    return split.loc[~split["held_out"].to_numpy(bool), ["target_id", "source_id", "how"]]


def read_holdout(path: str | os.PathLike) -> pd.DataFrame:
    """A split :func:`holdout_split` wrote (rule holdout), refusing a file without its
    columns."""
    table = pd.read_parquet(path)
    lacking = [c for c in ("target_id", "source_id", *HOLDOUT_COLUMNS) if c not in table]
    if lacking:
        raise ValueError(f"{path} is not a held-out split: it lacks columns {lacking}")
    return table


def hidden_source_ids(split: pd.DataFrame, overlap: pd.DataFrame) -> np.ndarray:
    """The held-out source ids of ``split``, sorted, after checking that ``overlap`` (what
    the methods will read) holds none of them: a transfer given the full overlap with a
    split would copy the rows it is meant to predict."""
    hidden = np.unique(split.loc[split["held_out"].to_numpy(bool), "source_id"].to_numpy(
        np.int64))
    seen = np.intersect1d(hidden, overlap["source_id"].to_numpy(np.int64))
    if seen.size:
        raise ValueError(f"the overlap still pairs {seen.size} held-out source ids (e.g. "
                         f"{seen[:5].tolist()}): give a held-out transfer the held-out "
                         "overlap (paths.HOLDOUT_OVERLAP), not the full one")
    return hidden


def held_out_targets(split: pd.DataFrame) -> pd.DataFrame:
    """The held-out target tokens (``target_id``, ``source_id``, ``kind``) by target id: the
    rows a held-out transfer predicts and is scored on."""
    rows = split.loc[split["held_out"].to_numpy(bool), ["target_id", "source_id", "kind"]]
    return rows.sort_values("target_id", kind="stable").reset_index(drop=True)
