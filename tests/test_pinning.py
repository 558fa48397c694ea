"""Pinning hub revisions to the commits the downloads recorded (embtransfer.core.pinning)."""

from __future__ import annotations

import json

import yaml

from embtransfer.core.pinning import fetch_params, main, pin_config_file, unpinned

A = "a" * 40
B = "b" * 40
CONFIG = f"""\
# header comment stays
models:
  # a comment inside models
  src: {{type: hub, repo_id: org/src, revision: main, description: "Gemma (gated)"}}
  plm:
    type: hub
    repo_id: org/plm
    revision: "v1.0"   # a tag
  other: {{type: hub, repo_id: org/other, revision: main}}
  moved: {{type: hub, repo_id: org/moved, revision: main}}
  fixed: {{type: hub, repo_id: org/fixed, revision: {A}}}
  mini: {{type: mini, family: gpt2}}
sources: [src]
"""


def snapshot(models, key, repo, commit, revision="main"):
    (models / key).mkdir(parents=True)
    (models / key / "snapshot.json").write_text(
        json.dumps({"repo_id": repo, "revision": revision, "commit": commit}))


def test_pins_only_revisions_and_keeps_the_file(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(CONFIG)
    models = tmp_path / "models"
    snapshot(models, "src", "org/src", A)
    snapshot(models, "plm", "org/plm", B, revision="v1.0")
    snapshot(models, "moved", "org/elsewhere", B)  # a snapshot of another repository
    snapshot(models, "fixed", "org/fixed", B)  # stale: the config pins another commit
    before = yaml.safe_load(CONFIG)
    report = pin_config_file(path, models)
    after = yaml.safe_load(path.read_text())
    before["models"]["src"]["revision"] = A
    before["models"]["plm"]["revision"] = B
    assert after == before
    text = path.read_text()
    assert "# header comment stays" in text and "# a tag" in text
    assert f'revision: "{B}"   # a tag' in text
    assert any(line.startswith("other:") and "not downloaded yet" in line for line in report)
    assert any(line.startswith("moved:") and "not pinned" in line for line in report)
    assert any(line.startswith("fixed:") and "fetch rule will download" in line for line in report)
    assert unpinned(after) == {"other": "main", "moved": "main"}
    # idempotent
    assert [ln for ln in pin_config_file(path, models) if "' pinned to" in ln] == []
    assert path.read_text() == text


def test_pinning_does_not_change_the_fetch_parameters(tmp_path):
    """Snakemake must not re-download a model because its config was pinned."""
    models = tmp_path / "models"
    snapshot(models, "src", "org/src", A)
    spec = {"type": "hub", "repo_id": "org/src", "revision": "main"}
    assert fetch_params({**spec, "revision": A}, "src", models) == spec
    # any other revision is a real change
    assert fetch_params({**spec, "revision": B}, "src", models)["revision"] == B
    assert fetch_params(spec, "src", models) == spec


def test_check_mode_writes_nothing_and_fails_on_unpinned(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text(CONFIG)
    models = tmp_path / "models"
    snapshot(models, "src", "org/src", A)
    assert main(["--check", str(path), "--models-dir", str(models)]) == 1
    assert path.read_text() == CONFIG
    assert "src: revision 'main' pinned to" in capsys.readouterr().out
