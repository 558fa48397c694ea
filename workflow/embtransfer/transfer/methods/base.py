"""What every embedding-initialisation method sees and returns, and the registry.

A method initialises one embedding matrix of the transferred model: the input
embeddings and, when the source LLM's LM head is untied, the output
embeddings, in a second call with ``side="output"``. It returns one row per
target token (``replace`` mode) plus a label per row saying how the row was
made (``copied``, ``projected``, ``weighted``, ``random``, ``mean``,
``missing_vector``, ...), which ``transfer.json`` counts.

Each method's function is registered with :func:`register` in its own module under
``embtransfer.transfer.methods``; its name, description, options and needs are in
:mod:`embtransfer.transfer.method_catalog`, and :func:`get_method` refuses unknown names with
the list of known ones.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.neighbors.search import Neighbors
from embtransfer.transfer import method_catalog
from embtransfer.transfer.aligned import AlignedVectors
from embtransfer.transfer.method_catalog import METHODS

SIDES = ("input", "output")


@dataclass
class TransferInputs:
    """Everything a method may read. Optional fields are filled when a method needs them."""

    source_input: np.ndarray  # (V_s, h_s) source input embeddings
    source_output: np.ndarray | None  # (V_s, h_s) untied LM head, None when tied
    source_vocab: pd.DataFrame  # embtransfer.vocab.canonical table
    target_vocab: pd.DataFrame
    overlap: pd.DataFrame  # target_id, source_id, how
    seed: int
    neighbors: dict[str, Neighbors] = field(default_factory=dict)  # by "word" / "token"
    plm_input: np.ndarray | None = None  # (V_t, h_t) target PLM input embeddings
    plm_output: np.ndarray | None = None  # (V_t, h_t) the PLM's untied output head, if any
    projected: dict[str, np.ndarray] | None = None  # SALT regression: per-token coefficients
    aligned: AlignedVectors | None = None
    source_tokenizer: Any | None = None
    truth: pd.DataFrame | None = None  # the miniature world's ground truth (world_oracle)
    # TokAlign: (vectors, missing) of the corpus's GloVe space per tokenization, by
    # "source" / "target" (embtransfer.transfer.glove)
    glove: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    # Source ids held out (transfer.holdout, embtransfer.vocab.holdout): shared tokens the
    # methods must treat as though the source lacked them. Their rows enter no statistic,
    # no search and no decomposition; the overlap already lacks them.
    hidden: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # The target ids a held-out transfer scores (None: every row counts): a method with a
    # budget of tokens (Token Distillation's max_tokens) spends it on these.
    scored: np.ndarray | None = None
    # The source checkpoint's directory (a method that runs the model: Token Distillation)
    # and the target language's training text (its snippets)
    source_dir: str | None = None
    corpus: str | None = None
    # how the run lets the source checkpoint be read (trust_remote_code, allow_pickle)
    source_loading: dict[str, bool] = field(
        default_factory=lambda: {"trust_remote_code": False, "allow_pickle": False})
    memo: dict[Any, Any] = field(default_factory=dict)  # a method's work shared by both sides

    def statistic_ids(self) -> np.ndarray:
        """Source ids whose rows enter statistics over the source's embeddings (ascending).

        Text tokens only: special tokens (roles, added control tokens such as
        Gemma 3's 6,242 never-trained ``<unusedN>`` placeholders, see
        :mod:`embtransfer.vocab.canonical`), padding rows beyond the source
        tokenizer's ids and the held-out ids (:attr:`hidden`) are left out. Every
        mean, std or covariance of source rows (Mean, Multivariate, Heuristics,
        N(mean, std) draws) uses these.
        """
        vocab = self.source_vocab
        ids = vocab["id"].to_numpy(np.int64)
        if "kind" in vocab.columns:  # a table without kinds (hand-made in tests) is all text
            ids = ids[(vocab["kind"] != "special").to_numpy()]
        ids = np.unique(ids[(ids >= 0) & (ids < self.source_input.shape[0])])
        ids = ids[~np.isin(ids, self.hidden)]
        if ids.size == 0:
            raise ValueError("the source vocabulary has no text tokens to take statistics over")
        return ids

    def source_matrix(self, side: str) -> np.ndarray:
        if side == "output":
            if self.source_output is None:
                raise ValueError("the source is tied: it has no separate output embeddings")
            return self.source_output
        return self.source_input

    def visible(self, matrix: np.ndarray) -> np.ndarray:
        """``matrix`` (a source matrix) with the held-out rows zeroed, for a method that
        factorises or searches every row: a zero row adds nothing to a Gram matrix."""
        if self.hidden.size == 0:
            return matrix
        out = np.array(matrix, copy=True)
        out[self.hidden[self.hidden < out.shape[0]]] = 0
        return out

    @property
    def n_target(self) -> int:
        return len(self.target_vocab)

    def shared(self) -> tuple[np.ndarray, np.ndarray]:
        """(target ids, source ids) of the shared tokens, sorted by target id."""
        order = np.argsort(self.overlap["target_id"].to_numpy(), kind="stable")
        return (
            self.overlap["target_id"].to_numpy(np.int64)[order],
            self.overlap["source_id"].to_numpy(np.int64)[order],
        )

    def rng(self, method: str, side: str) -> np.random.Generator:
        """A generator per (seed, method, side): reproducible, independent streams."""
        return np.random.default_rng([self.seed, zlib.crc32(method.encode()), SIDES.index(side)])


@dataclass
class SideResult:
    """One initialised matrix: a row per target token and how each row was made."""

    rows: np.ndarray  # (V_t, h_s) float32
    how: np.ndarray  # (V_t,) str labels
    stats: dict[str, Any] = field(default_factory=dict)


Method = Callable[[TransferInputs, dict[str, Any], str], SideResult]


REGISTRY: dict[str, Method] = {}


@dataclass(frozen=True)
class MethodSpec:
    """A method as the runner sees it: its function, and the rest read from the catalog."""

    name: str
    fn: Method

    @property
    def defaults(self) -> dict[str, Any]:
        return method_catalog.defaults(self.name)

    @property
    def needs(self) -> frozenset[str]:
        return frozenset(method_catalog.method_needs(self.name))

    @property
    def description(self) -> str:
        return str(METHODS[self.name]["description"])


def register(name: str) -> Callable[[Method], Method]:
    """Register ``fn`` as the method ``name``, which the catalog must describe."""
    if name not in METHODS:
        raise ValueError(f"method {name!r} is not in embtransfer.transfer.method_catalog.METHODS")

    def wrap(fn: Method) -> Method:
        if name in REGISTRY:
            raise ValueError(f"method {name!r} registered twice")
        REGISTRY[name] = fn
        return fn

    return wrap


def get_method(name: str) -> MethodSpec:
    """The registered method ``name``; unknown names are refused with the known ones.

    Only the method's own module is imported (by name, from the catalog), so a
    rule's code hash covers that module and not every other method's.
    """
    if name not in METHODS:
        raise KeyError(
            f"unknown transfer method {name!r}; known methods: {', '.join(sorted(METHODS))}"
        )
    importlib.import_module(f"embtransfer.transfer.methods.{METHODS[name]['module']}")
    return MethodSpec(name, REGISTRY[name])
