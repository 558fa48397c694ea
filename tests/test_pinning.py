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


def test_a_workflow_run_pins_the_config_to_the_recorded_download(tmp_path, monkeypatch):
    """A real run (offline) whose config names a hub model already downloaded into the local
    model store (resources/models/<key>/ with its snapshot.json, as fetch_model leaves it)
    ends with that model's revision pinned in the --configfile, and the pinned config
    plans no new download."""
    from test_paper_grid import OFFLINE
    from test_workflow import copy_workflow, small_config, snakemake

    from embtransfer.core import paths
    from embtransfer.models.tokenizer_training import train_tokenizer

    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    workdir = copy_workflow(tmp_path / "wf")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"ka lo mi tu {i} ren sal vor" for i in range(200)) + "\n")
    snapshot_dir = workdir / paths.MODELS_DIR / "tiny_hub"
    train_tokenizer("bytelevel_bpe", [str(text)], 300, "gpt2").save_pretrained(snapshot_dir)
    (snapshot_dir / "snapshot.json").write_text(
        json.dumps({"repo_id": "org/tiny", "revision": "main", "commit": A}))
    config = small_config()
    config["models"]["tiny_hub"] = {"type": "hub", "repo_id": "org/tiny", "revision": "main"}
    configfile = workdir / "test_config.yaml"
    configfile.write_text(yaml.safe_dump(config))

    vocab = paths.VOCAB.fill(model="tiny_hub")
    proc = snakemake(workdir, "--cores", "1", vocab)
    assert (workdir / vocab).is_file()
    pinned = yaml.safe_load(configfile.read_text())
    assert pinned["models"]["tiny_hub"]["revision"] == A, proc.stderr[-3000:]
    assert {k: v for k, v in pinned.items() if k != "models"} == {
        k: v for k, v in config.items() if k != "models"}
    # pinning changes no job's parameters: nothing is downloaded again
    dry = snakemake(workdir, "--cores", "1", "--dry-run", vocab)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
