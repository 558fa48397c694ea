"""What each transfer method is and needs, as plain data.

The Snakefile reads this to wire each method's inputs without importing the
methods themselves (which import torch): ``snakemake -n`` stays fast. A unit
test checks that it agrees with the registry in ``embtransfer.methods``.
"""

from __future__ import annotations

from typing import Any

#: name -> option names (defaults live with the method), module under
#: embtransfer.methods, needs, one-line description.
METHODS: dict[str, dict[str, Any]] = {
    "salt": {
        "options": [
            "vectors", "min_neighbors", "max_neighbors", "ridge", "rcond", "batch_tokens", "dtype",
        ],
        "module": "salt", "needs": ["regression"],
        "description": "SALT: per-token least squares on the sparsemax neighbours in the PLM space",
    },
    "lstsq": {
        "options": ["rcond", "ridge", "bias"],
        "module": "lstsq", "needs": ["plm"],
        "description": "one global least-squares map with bias, PLM space to source space",
    },
    "focus": {
        "options": ["vectors"],
        "module": "focus", "needs": ["neighbors"],
        "description": "FOCUS: sparsemax-weighted sum of the neighbours' source rows",
    },
    "clp": {
        "options": ["k", "chunk_rows"],
        "module": "clp", "needs": ["plm"],
        "description": "CLP: similarity-weighted mean of shared source rows (PLM space)",
    },
    "clp_plus": {
        "options": ["chunk_rows", "prefilter_k"],
        "module": "clp", "needs": ["plm"],
        "description": "CLP+: CLP with sparsemax weights",
    },
    "ofa": {
        "options": [
            "rank", "rank_fraction", "k", "temperature", "copy_shared", "chunk_rows", "chunk_cols",
        ],
        "module": "ofa", "needs": ["aligned"],
        "description": "OFA: low-rank coordinates averaged over aligned neighbours",
    },
    "wechsel": {
        "options": ["k", "temperature", "copy_shared", "chunk_rows", "chunk_cols"],
        "module": "wechsel", "needs": ["aligned"],
        "description": "WECHSEL: softmax over top-k source tokens in aligned fastText space",
    },
    "heuristics": {
        "options": ["min_rows"],
        "module": "heuristics", "needs": [],
        "description": "normal per Unicode script and word position (Downey et al.)",
    },
    "multivariate": {
        "options": ["scale", "jitter"],
        "module": "multivariate", "needs": [],
        "description": "copy shared; others from N(mean, covariance) of the source rows",
    },
    "random": {
        "options": [],
        "module": "random_init", "needs": [],
        "description": "every row from N(mean, std) of the source rows",
    },
    "random_copy": {
        "options": [],
        "module": "random_init", "needs": [],
        "description": "copy shared; others from N(mean, std)",
    },
    "mean": {
        "options": [],
        "module": "mean", "needs": [],
        "description": "copy shared; others the mean source row",
    },
    "subword_mean": {
        "options": [],
        "module": "mean", "needs": ["source_tokenizer"],
        "description": "copy shared; others the mean of their source-tokenizer pieces' rows",
    },
}


def method_needs(name: str, options: dict[str, Any]) -> set[str]:
    """The inputs a method needs; ``neighbors`` becomes ``neighbors_word``/``neighbors_token``."""
    needs = set(METHODS[name]["needs"])
    if "neighbors" in needs:
        needs.discard("neighbors")
        needs.add(f"neighbors_{options.get('vectors', 'token')}")
    return needs
