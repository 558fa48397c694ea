"""What each transfer method is and needs, as plain data.

The Snakefile reads this to wire each method's inputs without importing the
methods themselves (which import torch): ``snakemake -n`` stays fast. A unit
test checks that it agrees with the registry in ``embtransfer.methods``.
"""

from __future__ import annotations

from typing import Any

# Option value types as JSON-schema fragments; the config schema checks option values
# with them when the config is read (embtransfer.config.load_schema).
COUNT = {"type": "integer", "minimum": 1}
COUNT_OR_NULL = {"type": ["integer", "null"], "minimum": 1}
NON_NEGATIVE = {"type": "number", "minimum": 0}
POSITIVE = {"type": "number", "exclusiveMinimum": 0}
FLAG = {"type": "boolean"}
VECTORS = {"enum": ["word", "token"]}

#: name -> options (name -> value schema; defaults live with the method), module under
#: embtransfer.methods, needs, one-line description.
METHODS: dict[str, dict[str, Any]] = {
    "salt": {
        "options": {
            "vectors": VECTORS, "min_neighbors": COUNT, "max_neighbors": COUNT_OR_NULL,
            "ridge": NON_NEGATIVE, "rcond": POSITIVE, "batch_tokens": COUNT,
            "dtype": {"enum": ["float32", "float64"]},
        },
        "module": "salt", "needs": ["regression"],
        "description": "SALT: per-token least squares on the sparsemax neighbours in the PLM space",
    },
    "lstsq": {
        "options": {"rcond": {"type": ["number", "null"], "exclusiveMinimum": 0},
                    "ridge": NON_NEGATIVE, "bias": FLAG},
        "module": "lstsq", "needs": ["plm"],
        "description": "one global least-squares map with bias, PLM space to source space",
    },
    "focus": {
        "options": {"vectors": VECTORS},
        "module": "focus", "needs": ["neighbors"],
        "description": "FOCUS: sparsemax-weighted sum of the neighbours' source rows",
    },
    "clp": {
        "options": {"k": COUNT_OR_NULL, "chunk_rows": COUNT},
        "module": "clp", "needs": ["plm"],
        "description": "CLP: similarity-weighted mean of shared source rows (PLM space)",
    },
    "clp_plus": {
        "options": {"chunk_rows": COUNT, "prefilter_k": COUNT},
        "module": "clp", "needs": ["plm"],
        "description": "CLP+: CLP with sparsemax weights",
    },
    "ofa": {
        "options": {
            "rank": COUNT_OR_NULL, "rank_fraction": {**POSITIVE, "maximum": 1}, "k": COUNT,
            "temperature": POSITIVE, "copy_shared": FLAG, "chunk_rows": COUNT,
            "chunk_cols": COUNT,
        },
        "module": "ofa", "needs": ["aligned"],
        "description": "OFA: low-rank coordinates averaged over aligned neighbours",
    },
    "wechsel": {
        "options": {"k": COUNT, "temperature": POSITIVE, "copy_shared": FLAG,
                    "chunk_rows": COUNT, "chunk_cols": COUNT},
        "module": "wechsel", "needs": ["aligned"],
        "description": "WECHSEL: softmax over top-k source tokens in aligned fastText space",
    },
    "heuristics": {
        "options": {"min_rows": {"type": "integer", "minimum": 2}},
        "module": "heuristics", "needs": [],
        "description": "normal per Unicode script and word position (Downey et al.)",
    },
    "multivariate": {
        "options": {"scale": POSITIVE, "jitter": POSITIVE},
        "module": "multivariate", "needs": [],
        "description": "copy shared; others from N(mean, covariance) of the source rows",
    },
    "random": {
        "options": {},
        "module": "random_init", "needs": [],
        "description": "every row from N(mean, std) of the source rows",
    },
    "random_copy": {
        "options": {},
        "module": "random_init", "needs": [],
        "description": "copy shared; others from N(mean, std)",
    },
    "mean": {
        "options": {},
        "module": "mean", "needs": [],
        "description": "copy shared; others the mean source row",
    },
    "subword_mean": {
        "options": {},
        "module": "mean", "needs": ["source_tokenizer"],
        "description": "copy shared; others the mean of their source-tokenizer pieces' rows",
    },
}


def options_schema() -> dict[str, Any]:
    """JSON schema of ``transfer.options``: per method, its option names' value types.

    Unknown option names are left to :func:`embtransfer.config.check_transfer`, whose
    message lists the method's options.
    """
    return {
        "type": "object",
        "properties": {
            name: {"type": "object", "properties": spec["options"]}
            for name, spec in METHODS.items()
        },
    }


def method_needs(name: str, options: dict[str, Any]) -> set[str]:
    """The inputs a method needs; ``neighbors`` becomes ``neighbors_word``/``neighbors_token``."""
    needs = set(METHODS[name]["needs"])
    if "neighbors" in needs:
        needs.discard("neighbors")
        needs.add(f"neighbors_{options.get('vectors', 'token')}")
    return needs
