"""Runs a published package on inputs written by tests/test_reference_packages.py.

Executed by the reference environment's interpreter (``make reference-env``:
``deepfocus`` 1.0.1, ``wechsel`` 0.0.4, ``mergekit`` 0.1.5 and their dependencies), never
imported by the test suite. Usage: ``python reference_driver.py {focus|wechsel|omp}
WORK_DIR``.
Reads WORK_DIR/inputs.json, writes WORK_DIR/reference.npz.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast


def focus(work: Path, spec: dict) -> dict[str, np.ndarray]:
    from deepfocus import FOCUS
    from deepfocus.focus import get_overlapping_tokens, is_very_rare_token
    from fasttext import load_model

    source_tok = PreTrainedTokenizerFast.from_pretrained(spec["source_tokenizer"])
    target_tok = PreTrainedTokenizerFast.from_pretrained(spec["target_tokenizer"])
    source = torch.from_numpy(np.load(spec["source_embeddings"]))
    rows = FOCUS(
        target_tokenizer=target_tok,
        source_tokenizer=source_tok,
        source_embeddings=source,
        auxiliary_embedding_mode="fasttext-tokenlevel",
        fasttext_model_path=spec["fasttext"],
        verbosity="silent",
    )
    # the same overlap and "very rare" tokens FOCUS used, for the comparison
    overlap, new = get_overlapping_tokens(target_tok, source_tok, False, True, False)
    model = load_model(spec["fasttext"])
    return {
        "rows": rows.numpy(),
        "overlap_target": np.array([o.target.id for o in overlap.values()], np.int64),
        "overlap_source": np.array([o.source[0].id for o in overlap.values()], np.int64),
        "random": np.array(
            [n.target.id for t, n in new.items() if is_very_rare_token(t, model)], np.int64
        ),
    }


def wechsel(work: Path, spec: dict) -> dict[str, np.ndarray]:
    from fasttext import load_model
    from sklearn.metrics.pairwise import cosine_similarity
    from wechsel import WECHSEL, get_subword_embeddings_in_word_embedding_space

    source_tok = PreTrainedTokenizerFast.from_pretrained(spec["source_tokenizer"])
    target_tok = PreTrainedTokenizerFast.from_pretrained(spec["target_tokenizer"])
    source = np.load(spec["source_embeddings"])
    method = WECHSEL(
        load_model(spec["source_fasttext"]),
        load_model(spec["target_fasttext"]),
        bilingual_dictionary=spec["dictionary"],
    )
    rows, info = method.apply(source_tok, target_tok, source)
    # the similarities WECHSEL ranked, to find rows whose top 10 an exact tie decides
    src, _ = get_subword_embeddings_in_word_embedding_space(source_tok, method.source_embeddings)
    tgt, _ = get_subword_embeddings_in_word_embedding_space(target_tok, method.target_embeddings)
    sims = cosine_similarity(tgt, method.source_transform(src))
    top = -np.sort(-sims, axis=1)[:, :11]
    # the source ids each target row was built from (-1: not matched)
    chosen = np.full((len(rows), 10), -1, np.int64)
    for token, (tokens, _, _) in info.sources.items():
        ids = source_tok.convert_tokens_to_ids(list(tokens))
        chosen[target_tok.convert_tokens_to_ids(token), : len(ids)] = ids
    return {
        "rows": rows,
        "chosen": chosen,
        "random": np.array(target_tok.convert_tokens_to_ids(info.not_found), np.int64),
        "top11": top,
        "source_zero": ~src.any(axis=1),
    }


def omp(work: Path, spec: dict) -> dict[str, np.ndarray]:
    from mergekit.tokensurgeon import batch_omp

    with np.load(spec["rows"]) as data:
        targets = torch.from_numpy(data["targets"])  # float64: the comparison's precision
        candidates = torch.from_numpy(data["candidates"])
    picked, coef = batch_omp(targets, candidates, spec["k"])
    return {"picked": picked.numpy(), "coef": coef.numpy()}


def main() -> None:
    kind, work = sys.argv[1], Path(sys.argv[2])
    spec = json.loads((work / "inputs.json").read_text())
    out = {"focus": focus, "wechsel": wechsel, "omp": omp}[kind](work, spec)
    np.savez(work / "reference.npz", **out)


if __name__ == "__main__":
    main()
