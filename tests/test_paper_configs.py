"""The paper configs equal docs/slurm.md's table of paper settings, and the table lists them all.

The table (docs/slurm.md, "Paper configs against their papers") gives, per config and key,
the value the config holds and the paper's value with its section. Here every row's
"config" value is compared with the config file as the workflow reads it (validated,
schema defaults filled in), and every setting written in the files must have a row.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from embtransfer.config.validation import load_config_file
from embtransfer.lapt.settings import DEFAULT_LAPT

REPO = Path(__file__).resolve().parents[1]
PAGE = "docs/slurm.md"
FILES = {"salt": "config/paper_salt.yaml", "cva": "config/paper_cva.yaml"}
BEGIN, END = "<!-- paper-config-table: begin -->", "<!-- paper-config-table: end -->"
#: run settings, not paper settings: not in the table
RUN_SETTINGS = re.compile(
    r"^(seed|threads|trust_remote_code|models\.[^.]+\.(type|revision|description)|"
    r"lapt\.(gpus|mem_mb)|transfer\.(device|mem_mb)|evaluation\.(batch_size|device)|report\..*)$"
)
BRACES = re.compile(r"\{([^{}:]+,[^{}:]+)\}")  # {de,ar,vi}, not a YAML flow map


def table_rows() -> list[dict[str, str]]:
    text = (REPO / PAGE).read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{PAGE} lost its paper-config table markers"
    body = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    header = [c.strip() for c in body[0].strip("|").split("|")]
    assert header == ["config", "key", "config", "paper", "where"], header
    rows = []
    for line in body[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"malformed table row: {line}"
        rows.append(dict(zip(["file", "key", "value", "paper", "where"], cells, strict=True)))
    return rows


def expand(key: str, value: str) -> list[tuple[str, str]]:
    """``languages.{de,ar}.x`` with value ``a/{de,ar}`` -> one (key, value) per language."""
    match = BRACES.search(key)
    if not match:
        return [(key, value)]
    out = []
    for alt in match.group(1).split(","):
        out += expand(key.replace(match.group(0), alt, 1), value.replace(match.group(0), alt))
    return out


def lookup(config: dict[str, Any], key: str) -> Any:
    if key.startswith("(trainer) "):
        return DEFAULT_LAPT[key.removeprefix("(trainer) ")]
    node: Any = config
    for part in key.split("."):
        assert isinstance(node, dict) and part in node, f"{key}: no such setting"
        node = node[part]
    return node


def leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return table_rows()


@pytest.mark.parametrize("name", sorted(FILES))
def test_config_equals_table(name: str, rows: list[dict[str, str]]) -> None:
    config = load_config_file(REPO / FILES[name])
    checked = 0
    for row in (r for r in rows if r["file"] == name):
        if row["key"] == "`—`":
            assert "**missing**" in row["paper"], f"a row without a key must say missing: {row}"
            continue
        assert row["key"].startswith("`") and row["value"].startswith("`"), row
        for key, value in expand(row["key"].strip("`"), row["value"].strip("`")):
            want = yaml.safe_load(value)
            got = lookup(config, key)
            assert got == want, f"{FILES[name]}: {key} is {got!r}, {PAGE} says {want!r}"
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_setting_is_in_the_table(name: str, rows: list[dict[str, str]]) -> None:
    raw = yaml.safe_load((REPO / FILES[name]).read_text())
    keys = [k for r in rows if r["file"] == name and r["key"] != "`—`"
            for k, _ in expand(r["key"].strip("`"), "")]
    missing = [
        leaf for leaf in leaves(raw)
        if not RUN_SETTINGS.match(leaf)
        and not any(leaf == k or leaf.startswith(k + ".") for k in keys)
    ]
    assert not missing, f"{FILES[name]}: settings without a row in {PAGE}: {missing}"


def test_table_rejects_a_drifted_value(rows: list[dict[str, str]]) -> None:
    # the comparison can fail: a value changed in the table no longer matches the file
    config = load_config_file(REPO / FILES["cva"])
    row = next(r for r in rows if r["file"] == "cva" and r["key"] == "`lapt.weight_decay`")
    assert lookup(config, "lapt.weight_decay") == yaml.safe_load(row["value"].strip("`"))
    assert lookup(config, "lapt.weight_decay") != 0.0
