"""The report's prose (``texts.yaml``), apart from the code that fills it in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TEXTS: dict[str, Any] = yaml.safe_load(
    Path(__file__).with_name("texts.yaml").read_text(encoding="utf-8"))


def prose(key: str, **fields: Any) -> str:
    """The text at ``key`` (dotted: ``probes.intro``), its ``{fields}`` filled in."""
    node: Any = TEXTS
    for part in key.split("."):
        node = node[part]
    return node.format(**fields)
