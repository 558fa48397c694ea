"""Pin hub models' revisions to the commits their downloads recorded.

A hub model in a config names a ``revision``: a branch or tag (``main``) moves,
a 40-hex commit hash does not. :func:`embtransfer.data.download.fetch_hub_snapshot`
records the commit a download resolved to in ``resources/models/<key>/snapshot.json``;
:func:`pin_config_file` writes those commits back into the config file, in
place, changing only the ``revision`` values (comments and layout stay), so the
grid is frozen the moment its models are downloaded. The workflow does this
itself at the end of every run (:func:`embtransfer.core.hooks.on_end`) for
the files given with ``--configfile``; by hand::

    python -m embtransfer.core.pinning config/paper_salt.yaml [--models-dir resources/models]
    python -m embtransfer.core.pinning --check config/paper_salt.yaml   # exit 1 if unpinned

Pinning does not re-download: :func:`fetch_params` gives the fetch rule the
revision the snapshot was downloaded with while the config's commit equals the
snapshot's, so Snakemake sees unchanged parameters.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from embtransfer.core.atomic import atomic_path

COMMIT = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str) -> bool:
    return COMMIT.fullmatch(str(revision)) is not None


def read_snapshot(models_dir: str | Path, key: str) -> dict[str, Any] | None:
    path = Path(models_dir) / key / "snapshot.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def fetch_params(spec: dict[str, Any], key: str, models_dir: str | Path) -> dict[str, Any]:
    """The fetch rule's parameters: ``spec``, with the revision it was downloaded as.

    When the config's revision is the commit a snapshot recorded (the config was
    pinned after the download), the snapshot's requested revision stands in, so
    pinning never triggers a new download; any other change of revision does.
    """
    snap = read_snapshot(models_dir, key)
    if snap and snap.get("commit") == spec.get("revision") and (
        snap.get("repo_id") == spec.get("repo_id")
    ):
        return {**spec, "revision": snap.get("revision", spec["revision"])}
    return spec


def unpinned(config: dict[str, Any]) -> dict[str, str]:
    """Hub models (key -> revision) whose revision is not a commit hash."""
    return {
        key: str(spec.get("revision"))
        for key, spec in (config.get("models") or {}).items()
        if isinstance(spec, dict) and spec.get("type") == "hub"
        and not is_commit(str(spec.get("revision")))
    }


def _replace_revision(lines: list[str], key: str, old: str, new: str) -> bool:
    """Replace ``revision: old`` in the mapping of ``models.<key>`` (flow or block style)."""
    start = next((i for i, line in enumerate(lines)
                  if re.match(rf"\s+{re.escape(key)}\s*:", line)), None)
    if start is None:
        return False
    indent = len(lines[start]) - len(lines[start].lstrip())
    pattern = re.compile(rf"(\brevision\s*:\s*)(['\"]?){re.escape(old)}\2(?=\s*[,}}#\n]|\s*$)")
    for i in range(start, len(lines)):
        line = lines[i]
        if i > start and line.strip() and not line.lstrip().startswith("#") and (
            len(line) - len(line.lstrip()) <= indent
        ):
            return False  # left the model's mapping
        if pattern.search(line):
            lines[i] = pattern.sub(rf"\g<1>\g<2>{new}\g<2>", line, count=1)
            return True
    return False


def pin_config_file(
    path: str | Path, models_dir: str | Path = "resources/models", write: bool = True
) -> list[str]:
    """Pin every unpinned hub revision of ``path`` that a snapshot has a commit for.

    Returns one line per model: what was pinned, or why it was not (no
    snapshot yet, a snapshot of another repository). A config already pinned to
    a commit other than the snapshot's is reported (the snapshot is stale and
    the fetch rule will replace it) and left alone.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    config = yaml.safe_load(text) or {}
    lines = text.splitlines(keepends=True)
    report: list[str] = []
    changed: dict[str, str] = {}
    for key, spec in (config.get("models") or {}).items():
        if not isinstance(spec, dict) or spec.get("type") != "hub":
            continue
        revision = str(spec.get("revision"))
        snap = read_snapshot(models_dir, key)
        if snap is None:
            if not is_commit(revision):
                report.append(f"{key}: revision {revision!r} not pinned (not downloaded yet)")
            continue
        commit = str(snap.get("commit") or "")
        if snap.get("repo_id") != spec.get("repo_id") or not is_commit(commit):
            report.append(f"{key}: snapshot.json is for {snap.get('repo_id')!r}, not "
                          f"{spec.get('repo_id')!r}; not pinned")
            continue
        if revision == commit:
            continue
        if is_commit(revision):
            report.append(f"{key}: pinned to {revision} but the snapshot is {commit}; "
                          "the fetch rule will download the pinned commit")
            continue
        if not _replace_revision(lines, key, revision, commit):
            report.append(f"{key}: could not find 'revision: {revision}' in {path}; pin by hand "
                          f"to {commit}")
            continue
        changed[key] = commit
        report.append(f"{key}: revision {revision!r} pinned to {commit}")
    if changed and write:
        new_text = "".join(lines)
        # the edit must change the revisions and nothing else
        expected = json.loads(json.dumps(config))
        for key, commit in changed.items():
            expected["models"][key]["revision"] = commit
        if yaml.safe_load(new_text) != expected:
            raise RuntimeError(f"pinning {path} would change more than the revisions; "
                               "pin by hand: " + ", ".join(f"{k}={c}" for k, c in changed.items()))
        with atomic_path(path) as tmp:
            tmp.write_text(new_text, encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", type=Path)
    parser.add_argument("--models-dir", default="resources/models")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a hub revision is not a commit")
    args = parser.parse_args(argv)
    status = 0
    for path in args.configs:
        for line in pin_config_file(path, args.models_dir, write=not args.check):
            print(f"{path}: {line}")
        if args.check and unpinned(yaml.safe_load(path.read_text()) or {}):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
