"""Every transfer method, as plain data: the one place a method is named, described,
given its options (value types and defaults) and its inputs.

Everything else is derived from here: the config schema's method names
(:func:`embtransfer.config.validation.load_schema`), the option checks and defaults
(:func:`resolve_options`, used when the config is read and when a method runs), and
the transfer rule's inputs (:func:`method_needs`, read by ``transfer/inputs.py``). The
method modules under ``embtransfer.transfer.methods`` hold only the functions; the registry
there maps a name to its function. This module imports neither torch nor the methods,
so ``snakemake -n`` stays fast. A unit test checks that the catalog and the registry
name the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema

from embtransfer.core.vocab_modes import method_modes


@dataclass(frozen=True)
class Option:
    """One option of a method: its default and its value's JSON-schema fragment."""

    default: Any
    schema: dict[str, Any]


# Option value types as JSON-schema fragments.
COUNT = {"type": "integer", "minimum": 1}
COUNT_OR_NULL = {"type": ["integer", "null"], "minimum": 1}
NON_NEGATIVE = {"type": "number", "minimum": 0}
POSITIVE = {"type": "number", "exclusiveMinimum": 0}
FLAG = {"type": "boolean"}
VECTORS = {"enum": ["word", "token"]}

#: Inputs a method may need beyond the source checkpoint, the vocabularies and the overlap.
#: Each name is also the transfer rule's input name and the key ``job.load_inputs``
#: reads (``neighbors`` in a method's needs stands for ``neighbors_<vectors option>``).
NEEDS = {
    "plm": "the target PLM's input embeddings (inputs.plm_input)",
    "neighbors_word": "neighbour tables in the word-level fastText space",
    "neighbors_token": "neighbour tables in the token-level fastText space",
    "projected": "the SALT regression stage's per-token coefficients (inputs.projected)",
    "aligned": "source- and target-token vectors in one aligned space (inputs.aligned)",
    "source_tokenizer": "the source tokenizer (inputs.source_tokenizer)",
    "truth": "the miniature world's ground truth of the target tokens (inputs.truth)",
    "glove_source": "GloVe vectors of the target language's corpus in the source "
    "tokenization (inputs.glove)",
    "glove_target": "GloVe vectors of the same corpus in the target tokenization "
    "(inputs.glove)",
    "corpus": "the target language's training text (inputs.corpus), where Token "
    "Distillation finds its snippets",
}

#: name -> module under embtransfer.transfer.methods, needs, one-line description, options (in the
#: order transfer.json lists them), ``long`` where the method's jobs are the longest of a
#: run (:func:`transfer_priority`) (the vocabulary modes each works in:
#: :mod:`embtransfer.core.vocab_modes`). The order of the methods is the default
#: ``transfer.methods``.
METHODS: dict[str, dict[str, Any]] = {
    "salt": {
        "module": "salt", "needs": ["projected"],
        "description": "SALT: copy shared rows; others = per-token least squares on the "
        "sparsemax neighbours in the PLM space (the regression stage projects them)",
        # All act in the regression stage (embtransfer.transfer.regression.salt_coefficients);
        # vectors picks the neighbour table it reads.
        "options": {
            "vectors": Option("word", VECTORS),
            "min_neighbors": Option(1, COUNT),
            "max_neighbors": Option(None, COUNT_OR_NULL),
            "ridge": Option(0.0, NON_NEGATIVE),
            # not numpy's 1e-15: embtransfer.transfer.regression says why
            "rcond": Option(1e-6, POSITIVE),
            "batch_tokens": Option(4096, COUNT),
            "dtype": Option("float64", {"enum": ["float32", "float64"]}),
        },
    },
    "omp": {
        "module": "omp", "needs": ["plm"],
        "description": "OMP (mergekit-tokensurgeon's default): copy shared rows; others = "
        "least squares on k shared tokens picked by orthogonal matching pursuit in the PLM "
        "space, applied to their source rows",
        "options": {"k": Option(64, COUNT), "centered": Option(False, FLAG)},
        "long": True,
    },
    "omp_salt_k": {
        "module": "omp", "needs": ["plm", "projected"],
        "description": "OMP with k = the median support size of SALT's projected tokens "
        "(read from SALT's projection): the support's size as SALT's, its choice OMP's",
        "options": {"centered": Option(False, FLAG)},
        "long": True,
    },
    "focus": {
        "module": "focus", "needs": ["neighbors"],
        "description": "FOCUS: copy shared rows; others = sparsemax-weighted sum of the "
        "fastText neighbours' source rows",
        "options": {"vectors": Option("token", VECTORS)},
    },
    "clp": {
        "module": "clp", "needs": ["plm"],
        "description": "CLP-Transfer: copy shared rows; others = PLM-cosine-weighted mean of "
        "the shared tokens' source rows",
        "options": {"k": Option(None, COUNT_OR_NULL), "chunk_rows": Option(512, COUNT)},
    },
    "clp_plus": {
        "module": "clp", "needs": ["plm"],
        "description": "CLP+: copy shared rows; others = sparsemax(PLM cosines to the shared "
        "tokens)-weighted sum of their source rows",
        "options": {"chunk_rows": Option(512, COUNT), "prefilter_k": Option(256, COUNT)},
    },
    "lstsq": {
        "module": "lstsq", "needs": ["plm"],
        "description": "one global least-squares map with bias, PLM space to source space",
        "options": {
            "rcond": Option(None, {"type": ["number", "null"], "exclusiveMinimum": 0}),
            "ridge": Option(0.0, NON_NEGATIVE),
            "bias": Option(True, FLAG),
        },
    },
    "multivariate": {
        "module": "multivariate", "needs": [],
        "description": "copy shared rows; others from N(mean, scale * full covariance) of "
        "the source rows",
        "options": {"scale": Option(1.0, POSITIVE), "jitter": Option(1e-6, POSITIVE)},
    },
    "random": {
        "module": "random_init", "needs": [],
        "description": "every row (shared too) from N(mean, std) of the source rows",
        "options": {},
    },
    "random_copy": {
        "module": "random_init", "needs": [],
        "description": "copy shared rows; the others from N(mean, std) of the source rows",
        "options": {},
    },
    "mean": {
        "module": "mean", "needs": [],
        "description": "copy shared rows; others = the mean source row",
        "options": {},
    },
    "subword_mean": {
        "module": "mean", "needs": ["source_tokenizer"],
        "description": "copy shared rows; others = mean source row of the source tokenization",
        "options": {},
    },
    "heuristics": {
        "module": "heuristics", "needs": [],
        "description": "copy shared rows; others from N(mean, std) of the source rows of the "
        "same Unicode script and word position (Downey et al. 2023)",
        "options": {"min_rows": Option(10, {"type": "integer", "minimum": 2})},
    },
    "wechsel": {
        "module": "wechsel", "needs": ["aligned"],
        "description": "WECHSEL: softmax over top-k source tokens in aligned fastText space",
        "options": {
            "k": Option(10, COUNT),
            "temperature": Option(0.1, POSITIVE),
            "copy_shared": Option(False, FLAG),
            "chunk_rows": Option(2048, COUNT),
            "chunk_cols": Option(4096, COUNT),
        },
    },
    "ofa": {
        "module": "ofa", "needs": ["aligned"],
        "description": "OFA: low-rank coordinates averaged over aligned neighbours",
        "options": {
            "rank": Option(None, COUNT_OR_NULL),
            "rank_fraction": Option(400 / 768, {**POSITIVE, "maximum": 1}),
            "k": Option(10, COUNT),
            "temperature": Option(0.1, POSITIVE),
            "copy_shared": Option(True, FLAG),
            "chunk_rows": Option(2048, COUNT),
            "chunk_cols": Option(4096, COUNT),
        },
    },
    "tokalign": {
        "module": "tokalign", "needs": ["glove_source", "glove_target"],
        "description": "TokAlign: copy shared rows; others = the rows of the source token "
        "whose GloVe relative representation (cosines to shared pivot tokens, each "
        "tokenization's own space on the same corpus) is nearest",
        # pivots act in the transfer; the rest in rule tokalign_glove (the reference's
        # script/train_glove.sh: 300 dimensions, window 15, 15 passes, min-count 5, x_max 10)
        "options": {
            "pivots": Option(300, COUNT),
            "dim": Option(300, COUNT),
            "window": Option(15, COUNT),
            "min_count": Option(5, COUNT),
            "iterations": Option(15, COUNT),
            "x_max": Option(10.0, POSITIVE),
            "learning_rate": Option(0.05, POSITIVE),
            "batch": Option(4096, COUNT),
            "max_lines": Option(None, COUNT_OR_NULL),
        },
    },
    "token_distillation": {
        "module": "distillation", "needs": ["source_tokenizer", "corpus"],
        # its rows start as Subword-mean's and the rows it trains are labelled "distilled":
        # the report tests it against that start (start_of)
        "starts": {"from": "subword_mean", "label": "distilled"},
        "description": "Token Distillation (extended vocabularies): copy shared rows; new "
        "tokens start at the mean of their pieces' source rows, and the most frequent ones' "
        "input rows are trained so that the frozen source reads them as it reads their "
        "pieces (last-layer hidden states, MSE); output rows keep the pieces' mean",
        # the reference package's defaults; max_tokens caps the distilled tokens (the most
        # frequent first: a per-language time budget), max_lines the corpus lines searched
        "options": {
            "snippets_per_token": Option(100, COUNT),
            "snippet_length": Option(50, COUNT),
            "learning_rate": Option(1e-4, POSITIVE),
            "epochs": Option(1, COUNT),
            "steps": Option(None, COUNT_OR_NULL),
            "batch_size": Option(1, COUNT),
            "max_tokens": Option(None, COUNT_OR_NULL),
            "min_snippets": Option(None, COUNT_OR_NULL),
            "max_lines": Option(None, COUNT_OR_NULL),
        },
    },
    "world_oracle": {
        "module": "oracle", "needs": ["truth"],
        "description": "the miniature world's oracle: copy shared rows; a token whose "
        "meaning the world knows = mean source row of its translation; others as Mean",
        "options": {},
        # Needs the world's ground truth: not in the default method list, refused outside it.
        "world_only": True,
        # an upper bound of the alignment metrics, shown beside the methods, never ranked
        "role": "oracle",
    },
}

#: The baseline every method is compared with, and the headline method.
RANDOM = "random"
SALT = "salt"
#: The source LLM untouched, with its own tokenizer: a reference point, not a method.
SOURCE_MODEL = "source_model"
#: The roles that compete in a setting (are ranked and compared); the others are shown.
COMPETING_ROLES = ("method", "random", "salt")


def role(name: str) -> str:
    """What ``name`` is in a comparison: ``salt``, ``random``, ``method`` (the other
    transfer methods), ``oracle`` (the catalog says so) or ``reference`` (the source model
    and any name not in the catalog: shown, never ranked)."""
    if name in (RANDOM, SALT):
        return name
    if name not in METHODS:
        return "reference"
    return METHODS[name].get("role", "method")


def start_of(name: str) -> tuple[str, str] | None:
    """(the method whose rows ``name`` starts from and refines, the label of the rows it
    refined) where the catalog says so (Token Distillation: Subword-mean's, ``distilled``);
    None for a method that makes its rows itself."""
    starts = METHODS.get(name, {}).get("starts")
    return (starts["from"], starts["label"]) if starts else None


#: The methods a run gets when its config names none: all but the miniature world's own and
#: those of extended vocabularies only.
DEFAULT_METHODS: list[str] = [m for m, spec in METHODS.items()
                              if not spec.get("world_only") and "replace" in method_modes(m)]


class OptionError(ValueError):
    """A method option is unknown or has a bad value; the message names it."""


def defaults(method: str) -> dict[str, Any]:
    """The method's options with their defaults, in catalog order."""
    return {name: option.default for name, option in METHODS[method]["options"].items()}


def resolve_options(method: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The method's defaults overridden by ``options``, after checking names and values.

    The one check of method options: the config is checked with it when it is read
    (:func:`embtransfer.config.validation.check_transfer`) and every run goes through it
    (:func:`embtransfer.transfer.method_runner.run_method`, the SALT regression script). Raises
    :class:`OptionError` naming ``transfer.options.<method>[.<option>]`` and the method's
    options.
    """
    if method not in METHODS:
        raise OptionError(
            f"unknown transfer method {method!r}; known methods: {', '.join(sorted(METHODS))}"
        )
    known = METHODS[method]["options"]
    takes = f"{method} takes: {', '.join(known) or '(no options)'}"
    options = options or {}
    unknown = [name for name in options if name not in known]
    if unknown:
        raise OptionError(f"transfer.options.{method}: unknown option(s) {unknown}; {takes}")
    for name, value in options.items():
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(known[name].schema).iter_errors(value)
        )
        if error is not None:
            raise OptionError(f"transfer.options.{method}.{name}: {error.message}; {takes}")
    return {**defaults(method), **options}


def method_needs(name: str, options: dict[str, Any] | None = None) -> set[str]:
    """The inputs (names in :data:`NEEDS`) a method needs with these options; ``neighbors``
    becomes ``neighbors_word`` or ``neighbors_token`` by the ``vectors`` option."""
    needs = set(METHODS[name]["needs"])
    if "neighbors" in needs:
        needs.discard("neighbors")
        vectors = {**defaults(name), **(options or {})}["vectors"]
        needs.add(f"neighbors_{vectors}")
    return needs


def transfer_priority(method: str) -> int:
    """Scheduling priority of a method's transfer jobs: 1 for the ``long`` ones (the OMP
    solve: minutes a job at real shapes, against seconds for most methods), so that they
    start as soon as their inputs exist instead of running alone at the end of a run with
    a core idle beside them (benchmarks/README.md, bench-real), 0 otherwise."""
    return int(bool(METHODS[method].get("long")))
