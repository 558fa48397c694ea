"""The shared aligned-space search (``aligned.share_search``): its options and its inputs.

WECHSEL and OFA search the same top-k neighbours in the aligned fastText space, which is
most of both methods' time at real shapes (benchmarks/README.md, bench-real). With
``aligned.share_search: true`` the rule ``aligned_search`` runs that search once per
(language, source, target) and both methods' transfer jobs read it
(:func:`embtransfer.transfer.aligned.read_search`).
"""

from __future__ import annotations

from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import model_wildcards
from embtransfer.transfer.method_catalog import resolve_options

#: the methods that search the aligned space
SEARCHING = ("wechsel", "ofa")


def search_options(config: dict[str, Any]) -> dict[str, int]:
    """k (the larger of the searching methods') and the blocks of the shared search (the
    first searching method's, so its rows are searched as it would search them)."""
    methods = [m for m in SEARCHING if m in config["transfer"]["methods"]] or list(SEARCHING)
    options = [resolve_options(m, config["transfer"]["options"].get(m)) for m in methods]
    return {
        "k": max(int(o["k"]) for o in options),
        "chunk_rows": int(options[0]["chunk_rows"]),
        "chunk_cols": int(options[0]["chunk_cols"]),
    }


def search_inputs(config: dict[str, Any], wildcards: Any) -> dict[str, str]:
    """The transfer rule's ``aligned_search`` input: the shared search, for the searching
    methods when it is shared; nothing otherwise."""
    if not config["aligned"]["share_search"] or wildcards.method not in SEARCHING:
        return {}
    keys = ("lang", "source", "target", "seed")
    return {"aligned_search": paths.ALIGNED_SEARCH.fill(
        **model_wildcards({k: getattr(wildcards, k) for k in keys}))}
