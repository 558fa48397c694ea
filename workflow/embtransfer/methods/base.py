"""What every embedding-initialisation method sees and returns, and the registry.

A method initialises one embedding matrix of the transferred model: the input
embeddings and, when the source LLM's LM head is untied, the output
embeddings, in a second call with ``side="output"``. It returns one row per
target token (``replace`` mode) plus a label per row saying how the row was
made (``copied``, ``projected``, ``weighted``, ``random``, ``mean``,
``missing_vector``, ...), which ``transfer.json`` counts.

Methods are registered with :func:`register` in their own module under
``embtransfer.methods``; the config names them, and :func:`get_method` refuses
unknown names with the list of known ones.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from embtransfer.method_catalog import METHODS

SIDES = ("input", "output")

#: What a method may need beyond the source embeddings, vocabularies and overlap.
NEEDS = {
    "plm": "the target PLM's input embeddings (inputs.plm_input)",
    "neighbors_word": "neighbour tables in the word-level fastText space",
    "neighbors_token": "neighbour tables in the token-level fastText space",
    "regression": "the SALT regression stage's projected rows (inputs.projected)",
    "aligned": "source- and target-token vectors in one aligned space (inputs.aligned)",
    "source_tokenizer": "the source tokenizer (inputs.source_tokenizer)",
}


@dataclass
class Neighbors:
    """A neighbour table in CSR form (see embtransfer.neighbors for the columns)."""

    target_ids: np.ndarray  # (n,) int64, non-shared target tokens
    offsets: np.ndarray  # (n + 1,) int64 into the flat arrays below
    neighbor_target_ids: np.ndarray  # (nnz,) int64
    neighbor_source_ids: np.ndarray  # (nnz,) int64
    similarities: np.ndarray  # (nnz,) float32
    weights: np.ndarray  # (nnz,) float32, each row sums to 1
    missing: np.ndarray  # (n,) bool: no fastText vector, empty row

    @classmethod
    def from_table(cls, table: Any) -> Neighbors:
        """From the pyarrow table (or DataFrame) written by the neighbours stage."""
        import pyarrow as pa  # noqa: PLC0415 (lead: to review)

        if not isinstance(table, pa.Table):
            table = pa.Table.from_pandas(table, preserve_index=False)

        def flat(name: str, dtype: Any) -> np.ndarray:
            column = table.column(name).combine_chunks()
            return column.values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)

        lists = table.column("neighbor_target_ids").combine_chunks()
        return cls(
            target_ids=table.column("target_id").to_numpy().astype(np.int64),
            offsets=lists.offsets.to_numpy().astype(np.int64),
            neighbor_target_ids=flat("neighbor_target_ids", np.int64),
            neighbor_source_ids=flat("neighbor_source_ids", np.int64),
            similarities=flat("similarities", np.float32),
            weights=flat("weights", np.float32),
            missing=table.column("missing").to_numpy().astype(bool),
        )

    def row(self, i: int) -> slice:
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    @property
    def k(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass
class AlignedVectors:
    """Static vectors of source and target tokens in one (aligned) space: WECHSEL, OFA."""

    source: np.ndarray  # (V_s, d)
    source_missing: np.ndarray  # (V_s,) bool
    target: np.ndarray  # (V_t, d)
    target_missing: np.ndarray  # (V_t,) bool


@dataclass
class TransferInputs:
    """Everything a method may read. Optional fields are filled when a method needs them."""

    source_input: np.ndarray  # (V_s, h_s) source input embeddings
    source_output: np.ndarray | None  # (V_s, h_s) untied LM head, None when tied
    source_vocab: pd.DataFrame  # embtransfer.vocab table
    target_vocab: pd.DataFrame
    overlap: pd.DataFrame  # target_id, source_id, how
    seed: int
    neighbors: dict[str, Neighbors] = field(default_factory=dict)  # by "word" / "token"
    plm_input: np.ndarray | None = None  # (V_t, h_t) target PLM input embeddings
    projected: dict[str, np.ndarray] | None = None  # SALT regression: target_ids, input, output
    aligned: AlignedVectors | None = None
    source_tokenizer: Any | None = None

    def statistic_ids(self) -> np.ndarray:
        """Source ids whose rows enter statistics over the source's embeddings (ascending).

        Text tokens only: special tokens (roles, added control tokens such as
        Gemma 3's 6,242 never-trained ``<unusedN>`` placeholders, see
        :mod:`embtransfer.vocab`) and padding rows beyond the source
        tokenizer's ids are left out. Every mean, std or covariance of source
        rows (Mean, Multivariate, Heuristics, N(mean, std) draws) uses these.
        """
        vocab = self.source_vocab
        ids = vocab["id"].to_numpy(np.int64)
        if "kind" in vocab.columns:  # a table without kinds (hand-made in tests) is all text
            ids = ids[(vocab["kind"] != "special").to_numpy()]
        ids = np.unique(ids[(ids >= 0) & (ids < self.source_input.shape[0])])
        if ids.size == 0:
            raise ValueError("the source vocabulary has no text tokens to take statistics over")
        return ids

    def source_matrix(self, side: str) -> np.ndarray:
        if side == "output":
            if self.source_output is None:
                raise ValueError("the source is tied: it has no separate output embeddings")
            return self.source_output
        return self.source_input

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


@dataclass(frozen=True)
class MethodSpec:
    name: str
    fn: Method
    needs: frozenset[str]
    description: str
    defaults: dict[str, Any]


REGISTRY: dict[str, MethodSpec] = {}


def register(
    name: str, needs: set[str] | frozenset[str] = frozenset(), description: str = "",
    defaults: dict[str, Any] | None = None,
) -> Callable[[Method], Method]:
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"method {name!r} declares unknown needs {sorted(unknown)}")

    def wrap(fn: Method) -> Method:
        if name in REGISTRY:
            raise ValueError(f"method {name!r} registered twice")
        REGISTRY[name] = MethodSpec(name, fn, frozenset(needs), description, dict(defaults or {}))
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
    importlib.import_module(f"embtransfer.methods.{METHODS[name]['module']}")
    return REGISTRY[name]


def load_all() -> dict[str, MethodSpec]:
    """Import every method module; returns the full registry."""
    for name in METHODS:
        get_method(name)
    return REGISTRY


# -- helpers shared by methods ---------------------------------------------------------


def copy_shared(inputs: TransferInputs, side: str, rows: np.ndarray, how: np.ndarray) -> None:
    """Copy the source row of every shared token into ``rows`` (in place)."""
    target_ids, source_ids = inputs.shared()
    rows[target_ids] = inputs.source_matrix(side)[source_ids]
    how[target_ids] = "copied"


def row_blocks(
    matrix: np.ndarray, ids: np.ndarray | None = None, block_rows: int = 8192
) -> Iterator[np.ndarray]:
    """float64 blocks of ``matrix``'s rows (all, or ``ids``): no full-size temporary."""
    n = matrix.shape[0] if ids is None else ids.size
    for s in range(0, n, block_rows):
        part = matrix[s : s + block_rows] if ids is None else matrix[ids[s : s + block_rows]]
        yield part.astype(np.float64)


def column_moments(
    matrix: np.ndarray, ddof: int = 0, ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and std in float64 of ``matrix``'s rows (all, or ``ids``)."""
    n = matrix.shape[0] if ids is None else ids.size
    if n <= ddof:
        raise ValueError(f"need more than {ddof} rows for a standard deviation, got {n}")
    mean = sum(b.sum(axis=0) for b in row_blocks(matrix, ids)) / n
    sq = sum(np.square(b - mean).sum(axis=0) for b in row_blocks(matrix, ids))
    return mean, np.sqrt(sq / (n - ddof))


def diagonal_normal(
    matrix: np.ndarray, rng: np.random.Generator, n: int, ddof: int = 0,
    ids: np.ndarray | None = None,
) -> np.ndarray:
    """``n`` rows from N(mean, std) of ``matrix``'s rows (all, or ``ids``), per dimension."""
    mean, std = column_moments(matrix, ddof, ids)
    return (mean + std * rng.standard_normal((n, matrix.shape[1]))).astype(np.float32)


def source_mean(inputs: TransferInputs, side: str) -> np.ndarray:
    """The mean source row over :meth:`TransferInputs.statistic_ids` (float64)."""
    ids = inputs.statistic_ids()
    return sum(b.sum(axis=0) for b in row_blocks(inputs.source_matrix(side), ids)) / ids.size


def source_normal(
    inputs: TransferInputs, side: str, rng: np.random.Generator, n: int
) -> np.ndarray:
    """``n`` rows drawn from N(mean, std) of the source's text-token rows (per dimension)."""
    return diagonal_normal(inputs.source_matrix(side), rng, n, ids=inputs.statistic_ids())


def empty_result(inputs: TransferInputs, side: str) -> tuple[np.ndarray, np.ndarray]:
    """A zero matrix (V_t, h_s) and an all-"unset" label array to fill."""
    h = inputs.source_matrix(side).shape[1]
    return np.zeros((inputs.n_target, h), np.float32), np.full(inputs.n_target, "unset", object)
