"""Do the aligned fastText spaces WECHSEL and OFA search carry translations at all?

WECHSEL and OFA (:mod:`embtransfer.transfer.aligned`) map the source language's fastText
word vectors onto the target language's with an orthogonal map fitted on a bilingual
dictionary, and take each target token's neighbours there. If that space retrieves no
translation, no method built on it can. This module scores it as bilingual lexicon
induction (BLI) is scored:

* the map is the one the methods read: ``W`` of the aligned artifacts
  (:data:`embtransfer.core.paths.ALIGNED`; :func:`language_map` checks that every artifact
  of the language holds the same map and the same record of its fit);
* the queries are the dictionary's held-out half (:func:`held_out_half`), which the fit
  never saw: a real dictionary's ``held_out_pairs`` (:mod:`embtransfer.data.dictionary_split`)
  or the miniature world's held-out concepts (:mod:`embtransfer.world.split`), less every
  pair whose target word is one of the fitted pairs';
* per distinct target word (NFC, case-folded) with an in-vocabulary vector (its case
  variants tried as the fit tries them): every in-vocabulary word of the source fastText
  model (:func:`source_candidates`), mapped by ``W``, ranked by cosine to the target word's
  vector; a hit at k when a word among the first k is one of its gold translations (case
  folded, so ``House`` counts for ``house``). A target word none of whose translations is a
  source word cannot be hit and is left out (counted);
* beside P@k its chance, the mean over the queries of the chance a random ranking has
  (:func:`embtransfer.evaluation.alignment.chance_hits`: k / candidates for one gold
  word), and the one-sided binomial p-value of the hits at that mean chance
  (:func:`embtransfer.core.paired.binomial_upper_tail`). The true null is a sum of unequal
  Bernoullis, whose upper tail above its mean lies below the binomial's of the same mean
  (Hoeffding 1956), so the test is conservative.

The direction does not matter: ``W`` is orthogonal, so the cosine of ``y`` and ``x W`` is
that of ``y Wᵀ`` and ``x``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from safetensors import safe_open

from embtransfer.core.paired import binomial_upper_tail
from embtransfer.data.dictionary_split import Pair, word_key
from embtransfer.evaluation.alignment import chance_hits
from embtransfer.fasttext.vectors import MIN_NORM
from embtransfer.transfer.aligned import _lookup, _variants, read_aligned_stats, topk_cosine
from embtransfer.world.dictionary import dictionary_entries
from embtransfer.world.split import concept_split

#: Retrieval depths reported.
DEPTHS = (1, 10)
#: fastText's end-of-line token: a word of every model, no word of the language.
EOS = "</s>"


def language_map(aligned_paths: Sequence[str | os.PathLike]) -> tuple[np.ndarray, dict[str, Any]]:
    """``W`` and the statistics of a language's aligned artifacts (every (source, target)
    pair WECHSEL or OFA runs with). The fit reads only the two fastText models and the
    dictionary, so every artifact must hold the same map; one that does not is refused."""
    if not aligned_paths:
        raise ValueError("no aligned artifact to read the map of")
    maps = []
    for path in aligned_paths:
        with safe_open(str(path), framework="numpy") as fh:
            maps.append((str(path), fh.get_tensor("W"), read_aligned_stats(path)))
    first_path, W, stats = maps[0]
    for path, other, other_stats in maps[1:]:
        if not np.array_equal(other, W) or other_stats.get("dictionary_split") != stats.get(
            "dictionary_split"
        ):
            raise ValueError(
                f"{path} and {first_path} hold different maps of one language: the aligned "
                "artifacts are stale; rerun the aligned_vectors jobs"
            )
    return W, stats


def held_out_half(
    stats: dict[str, Any], world: dict[str, Any] | None, source_lang: str, lang: str
) -> tuple[list[Pair], dict[str, int]]:
    """The held-out pairs (source word, target word) of the dictionary an aligned artifact
    was fitted on (``stats``: :func:`read_aligned_stats`), less every pair whose target word
    the fit saw, and the counts. ``world``: the miniature world, for a world dictionary."""
    record = stats.get("dictionary_split")
    if record is None:
        raise ValueError(
            f"the {lang} map was fitted on its whole dictionary: no held-out half to score "
            "(give the language a world dictionary or a FreeDict one with held_out: true)"
        )
    if "held_out_pairs" in record:  # a real dictionary's split (data/dictionary_split.py)
        held = [(s, t) for s, t in record["held_out_pairs"]]
    else:  # the world's held-out concepts (world/split.py)
        if world is None:
            raise ValueError(f"the {lang} map was fitted on the world's dictionary: pass the world")
        split = concept_split(world, record["seed"], record["held_out"])
        if any(split[c] != "dictionary" for c in record["concepts"]):
            raise ValueError(f"the {lang} map's record does not match this world's split")
        held = [
            (s, t)
            for cid, s, t in dictionary_entries(world, source_lang, lang)
            if split[cid] == "held_out"
        ]
    fitted_targets = {word_key(t) for _, t in record["pairs"]}
    kept = [(s, t) for s, t in held if word_key(t) not in fitted_targets]
    return kept, {"held_out_pairs": len(held), "dropped_seen_by_fit": len(held) - len(kept)}


def source_candidates(source_ft: Any, W: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Every in-vocabulary word of the source fastText model with a vector (not fastText's
    ``</s>``), and its vector mapped by ``W`` into the aligned space."""
    words = [w for w in source_ft.words if w != EOS]
    vectors = np.stack([np.asarray(source_ft.get_word_vector(w), np.float32) for w in words])
    if not np.isfinite(vectors).all():
        raise ValueError("the source fastText model returned non-finite word vectors")
    keep = np.linalg.norm(vectors, axis=1) >= MIN_NORM
    words = [w for w, k in zip(words, keep, strict=True) if k]
    return words, vectors[keep] @ np.asarray(W, np.float32)


def _queries(
    target_ft: Any, held: Sequence[Pair], candidate_keys: dict[str, list[int]]
) -> tuple[list[str], list[np.ndarray], list[np.ndarray], dict[str, int]]:
    """The target words to query (one per case-folded word), their vectors and the
    candidate positions of their gold translations; and how many were left out, why."""
    gold: dict[str, set[str]] = {}
    forms: dict[str, list[str]] = {}
    for s, t in held:
        gold.setdefault(word_key(t), set()).add(word_key(s))
        forms.setdefault(word_key(t), []).append(t)
    words, vectors, golds = [], [], []
    dropped = {"no_target_vector": 0, "no_source_word": 0}
    cache: dict[str, np.ndarray | None] = {}
    for key, written in forms.items():
        # the fit's own lookup: case variants, in-vocabulary words with a vector
        variants = [v for t in dict.fromkeys(written) for v in _variants(t)]
        found = next((v for v in variants if _lookup(target_ft, v, True, cache)), None)
        if found is None:
            dropped["no_target_vector"] += 1
            continue
        vector = cache[found]
        positions = sorted(i for s in gold[key] for i in candidate_keys.get(s, []))
        if not positions:
            dropped["no_source_word"] += 1
            continue
        words.append(found)
        vectors.append(np.asarray(vector, np.float32))
        golds.append(np.asarray(positions, np.int64))
    return words, vectors, golds, dropped


def score_bli(
    source_ft: Any, target_ft: Any, W: np.ndarray, held: Sequence[Pair]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per query (``target_word``, ``gold`` translations, the source words ranked first,
    ``hit_1``, ``hit_10``, ``chance_1``, ``chance_10``) and the summary: ``queries``,
    ``candidates``, ``p_at_k`` and ``chance_at_k`` (percent), ``hits_k``, ``p_value_k`` (one
    sided, binomial at the mean chance), and the held-out words left out."""
    words, mapped = source_candidates(source_ft, W)
    candidate_keys: dict[str, list[int]] = {}
    for i, w in enumerate(words):
        candidate_keys.setdefault(word_key(w), []).append(i)
    query_words, vectors, golds, dropped = _queries(target_ft, held, candidate_keys)
    depth = max(DEPTHS)
    rows: dict[str, Any] = {
        "target_word": query_words,
        "gold": [" ".join(sorted({word_key(words[i]) for i in g})) for g in golds],
    }
    if query_words:
        top, _ = topk_cosine(np.stack(vectors), mapped, depth)
    else:
        top = np.zeros((0, min(depth, len(words))), np.int64)
    rows["nearest"] = [" ".join(words[i] for i in line) for line in top]
    sizes = np.asarray([g.size for g in golds], np.float64)
    for k in DEPTHS:
        hit = [np.isin(line[:k], g).any() for line, g in zip(top, golds, strict=True)]
        rows[f"hit_{k}"] = np.asarray(hit, np.int64)
        rows[f"chance_{k}"] = chance_hits(len(words), sizes, k)
    table = pd.DataFrame(rows)
    n = len(table)
    summary: dict[str, Any] = {"queries": n, "candidates": len(words)}
    for k in DEPTHS:
        hits = int(table[f"hit_{k}"].sum())
        chance = float(table[f"chance_{k}"].mean()) if n else math.nan
        summary |= {
            f"hits_{k}": hits,
            f"p_at_{k}": 100.0 * hits / n if n else None,
            f"chance_at_{k}": 100.0 * chance if n else None,
            f"p_value_{k}": binomial_upper_tail(hits, n, chance) if n else None,
        }
    summary |= {f"left_out_{why}": count for why, count in dropped.items()}
    return table, summary


def bli_record(
    source_ft: Any,
    target_ft: Any,
    aligned_paths: Sequence[str | os.PathLike],
    world: dict[str, Any] | None,
    source_lang: str,
    lang: str,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The BLI of one language's aligned fastText spaces (what the fasttext_bli rule
    writes): the per-query table and the record (the summary of :func:`score_bli`, the
    held-out half's counts and the fit's own figures)."""
    W, stats = language_map(aligned_paths)
    held, counts = held_out_half(stats, world, source_lang, lang)
    table, summary = score_bli(source_ft, target_ft, W, held)
    record = {
        "lang": lang,
        "source_language": source_lang,
        **summary,
        **counts,
        "scored_pairs": len(held),
        "fit_pairs_used": stats["pairs_used"],
        # the fit's precision on its own pairs, among its own target words: not held out
        "fit_precision_at_1": 100.0 * stats["precision_at_1"],
        "fit_p1_candidates": stats["p1_candidates"],
    }
    return table, record
