"""LAPT's resume checkpoints (lapt/resume.py, lapt/checkpointing.py): the older ones are
kept until a newer one is complete; a damaged or unfinished one is set aside, never
deleted, and the run resumes from the newest good one, as an uninterrupted run would.

One stopped run (:func:`stopped`) gives the checkpoints every test copies and damages. A
resumed run equals it when the checkpoint it saves after step 13 holds the same weights,
optimizer, scheduler and RNG bytes as the stopped run's and its metrics lines are the same.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file
from test_lapt import _run, _trajectory, world  # noqa: F401  (module fixture)

import embtransfer.lapt.checkpointing as checkpointing
from embtransfer.lapt.blocks import file_sha256
from embtransfer.lapt.checkpointing import CHECKPOINT_FILES, MANIFEST, CheckpointError
from embtransfer.lapt.settings import LaptSettings

# A checkpoint after every step, 13 kept: the stopped run's are after steps 1 to 13 of 14.
# One micro batch a step and one held-out batch per evaluation keep the runs short.
STEPS = {"max_steps": 14, "checkpoint_every": 1, "keep_checkpoints": 13,
         "micro_batch_size": 8, "eval_batches": 1}
NEWEST, OLDER = "step-00000013", "step-00000012"


def _step(n: int) -> str:
    return f"step-{n:08d}"


@pytest.fixture(scope="module")
def stopped(world, tmp_path_factory) -> Path:  # noqa: F811
    """The output path of a run stopped, without a checkpoint, after step 13 of 14."""
    out = tmp_path_factory.mktemp("stopped") / "out"
    assert _run(world, out, STEPS, stop_after_steps=13)["status"] == "stopped"
    return out


def _copy(stopped: Path, tmp_path: Path, keep: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A copy of the stopped run's work directory (only the checkpoints ``keep``, if
    given): the copy's output path and checkpoints folder."""
    shutil.copytree(f"{stopped}.work", tmp_path / "out.work")
    checkpoints = tmp_path / "out.work" / "checkpoints"
    for folder in checkpoints.iterdir():
        if keep and folder.name not in keep:
            shutil.rmtree(folder)
    return tmp_path / "out", checkpoints


def _assert_continues_the_stopped_run(out: Path, stopped: Path, step: str = NEWEST) -> None:
    """``out``'s checkpoint ``step`` and metrics lines are the stopped run's, bit for bit."""
    new, old = (Path(f"{p}.work") / "checkpoints" / step for p in (out, stopped))
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt"):
        assert (new / name).read_bytes() == (old / name).read_bytes(), name
    # state.json's metrics lines hold timings: the metrics files are compared without them.
    untimed = ("elapsed_s", "metrics")
    new_state, old_state = ({k: v for k, v in json.loads((p / "state.json").read_text()).items()
                             if k not in untimed} for p in (new, old))
    assert new_state == old_state
    resumed = _trajectory(out)
    assert resumed == _trajectory(stopped)[: len(resumed)]


def _restate(folder: Path, name: str) -> None:
    """Make ``folder``'s manifest agree with its file ``name`` again."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][name] = {"bytes": (folder / name).stat().st_size,
                               "sha256": file_sha256(folder / name)}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _set_aside(tmp_path: Path, label: str) -> Path:
    (aside,) = tmp_path.glob(f"out.work.{label}-*")
    return aside


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 8):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_every_kept_checkpoint_has_its_manifest(stopped):
    folders = sorted((Path(f"{stopped}.work") / "checkpoints").iterdir())
    assert [p.name for p in folders] == [_step(n) for n in range(1, 14)]
    for folder in folders:
        manifest = json.loads((folder / MANIFEST).read_text())
        assert sorted(manifest["files"]) == sorted(CHECKPOINT_FILES)
        for name, entry in manifest["files"].items():
            assert entry == {"bytes": (folder / name).stat().st_size,
                             "sha256": file_sha256(folder / name)}


# Each file of a checkpoint, garbled and truncated: one damage per checkpoint, steps 13 to 2.
DAMAGES = [(name, damage) for name in [*CHECKPOINT_FILES, MANIFEST]
           for damage in (_garble, _truncate)]


def test_each_damaged_checkpoint_falls_back_to_the_older(world, stopped, tmp_path):  # noqa: F811
    # Newest first, each damaged checkpoint is the newest left when the resume reaches it:
    # one run shows every damage set aside in turn and the resume from the one before.
    out, checkpoints = _copy(stopped, tmp_path)
    damaged = {_step(13 - i): (name, damage) for i, (name, damage) in enumerate(DAMAGES)}
    for folder, (name, damage) in damaged.items():
        damage(checkpoints / folder / name)
    logs: list[str] = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=13)
    assert any(f"resuming from {checkpoints / _step(1)} at step 1/14" in m for m in logs), logs
    _assert_continues_the_stopped_run(out, stopped)
    for folder, (name, damage) in damaged.items():
        aside = _set_aside(tmp_path, f"corrupt-{folder}")
        assert name in (aside / "SET_ASIDE.txt").read_text(), (folder, damage.__name__)
        intact = (Path(f"{stopped}.work") / "checkpoints" / folder / name).read_bytes()
        assert (aside / name).read_bytes() != intact  # the damaged folder, kept whole
        assert any(folder in m and "corrupt" in m and str(aside) in m for m in logs), folder


def test_both_checkpoints_damaged_starts_at_step_0(world, stopped, tmp_path):  # noqa: F811
    out, checkpoints = _copy(stopped, tmp_path, keep=(OLDER, NEWEST))
    _garble(checkpoints / NEWEST / "model.safetensors")
    _truncate(checkpoints / OLDER / "optimizer.pt")
    logs: list[str] = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=2)
    assert any("no usable checkpoint" in m and "step 0" in m for m in logs), logs
    assert not any("resuming" in m for m in logs), logs
    _assert_continues_the_stopped_run(out, stopped, _step(1))
    for folder, file in ((NEWEST, "model.safetensors"), (OLDER, "optimizer.pt")):
        note = (_set_aside(tmp_path, f"corrupt-{folder}") / "SET_ASIDE.txt").read_text()
        assert file in note


def test_an_unfinished_save_is_not_resumed(world, stopped, tmp_path):  # noqa: F811
    # No manifest: the save stopped before its last file. A temporary: a kill mid-save.
    out, checkpoints = _copy(stopped, tmp_path)
    (checkpoints / NEWEST / MANIFEST).unlink()
    shutil.copytree(checkpoints / OLDER, checkpoints / ".step-00000014.tmp-x")
    logs: list[str] = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=13)
    assert any(f"resuming from {checkpoints / OLDER} at step 12/14" in m for m in logs), logs
    aside = _set_aside(tmp_path, f"incomplete-{NEWEST}")
    assert "no manifest.json" in (aside / "SET_ASIDE.txt").read_text()
    assert (aside / "state.json").is_file()  # kept whole
    _assert_continues_the_stopped_run(out, stopped)


def _drop_a_weight(folder: Path) -> None:
    """Weights that match the manifest but lack a tensor: they fail to load only after the
    optimizer and scheduler states were loaded."""
    weights = load_file(folder / "model.safetensors")
    weights.pop(sorted(weights)[-1])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    _restate(folder, "model.safetensors")


def test_a_checkpoint_that_does_not_load_is_set_aside(world, stopped, tmp_path):  # noqa: F811
    # The older checkpoint replaces all the newer one had loaded.
    out, checkpoints = _copy(stopped, tmp_path)
    _drop_a_weight(checkpoints / NEWEST)
    logs: list[str] = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=13)
    assert any(f"resuming from {checkpoints / OLDER}" in m for m in logs), logs
    _assert_continues_the_stopped_run(out, stopped)
    note = (_set_aside(tmp_path, f"corrupt-{NEWEST}") / "SET_ASIDE.txt").read_text()
    assert "does not load" in note

    # Alone, and failing before anything was loaded: the run starts at step 0.
    out, checkpoints = _copy(stopped, tmp_path / "unread", keep=(NEWEST,))
    (checkpoints / NEWEST / "optimizer.pt").write_bytes(b"not a torch file")
    _restate(checkpoints / NEWEST, "optimizer.pt")
    logs = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=1)
    assert _set_aside(tmp_path / "unread", f"corrupt-{NEWEST}")
    assert any("no usable checkpoint" in m for m in logs), logs

    # Alone, and failing after the optimizer was loaded: this run cannot start at step 0
    # with it; it stops, and the rerun starts at step 0.
    out, checkpoints = _copy(stopped, tmp_path / "half", keep=(NEWEST,))
    _drop_a_weight(checkpoints / NEWEST)
    with pytest.raises(CheckpointError, match=rf"(?s){NEWEST} is corrupt: does not load.*rerun"):
        _run(world, out, STEPS)
    assert _set_aside(tmp_path / "half", f"corrupt-{NEWEST}")
    logs = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=1)
    assert not any("resuming" in m for m in logs), logs
    _assert_continues_the_stopped_run(out, stopped, _step(1))


def test_keep_checkpoints(world, tmp_path, monkeypatch):  # noqa: F811
    keep_one = {**STEPS, "max_steps": 4, "keep_checkpoints": 1}
    real = checkpointing.write_json

    def killed_before_the_manifest_of_step_3(path, obj):
        if path.name == MANIFEST and path.parent.name.startswith(f".{_step(3)}"):
            raise KeyboardInterrupt("killed while saving")
        real(path, obj)

    # One kept: the older one stays until the newer one's manifest is written.
    monkeypatch.setattr(checkpointing, "write_json", killed_before_the_manifest_of_step_3)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        _run(world, out, keep_one)
    checkpoints = tmp_path / "out.work" / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == [_step(2)]
    monkeypatch.setattr(checkpointing, "write_json", real)
    logs: list[str] = []
    _run(world, out, keep_one, log=logs.append, stop_after_steps=3)
    assert any("at step 2/4" in m for m in logs), logs
    assert [p.name for p in checkpoints.iterdir()] == [_step(3)]

    with pytest.raises(ValueError, match="keep_checkpoints must be at least 1"):
        LaptSettings(keep_checkpoints=0)
    from embtransfer.config.validation import ConfigError, validate_config

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml")
                            .read_text())
    config["lapt"]["keep_checkpoints"] = 0
    with pytest.raises(ConfigError, match="config key lapt.keep_checkpoints"):
        validate_config(config)


def test_a_checkpoint_of_another_run_sets_the_work_directory_aside(world, stopped, tmp_path):  # noqa: F811
    # The damaged newest is set aside as corrupt; the intact older one, of other settings,
    # makes the whole work directory stale.
    out, checkpoints = _copy(stopped, tmp_path)
    _garble(checkpoints / NEWEST / "rng.pt")
    logs: list[str] = []
    _run(world, out, {**STEPS, "lr": 2e-3}, log=logs.append, stop_after_steps=1)
    stale = _set_aside(tmp_path, "stale")
    assert (stale / "checkpoints" / OLDER / MANIFEST).is_file()
    assert "settings.lr" in (stale / "SET_ASIDE.txt").read_text()
    assert _set_aside(tmp_path, f"corrupt-{NEWEST}")
    assert any("starting fresh" in m for m in logs) and not any("resuming" in m for m in logs)


def test_a_checkpoint_without_the_step_folders_is_set_aside(world, stopped, tmp_path):  # noqa: F811
    # A lone work/checkpoint/ (no manifest, no step folder) is never resumed unverified.
    out, checkpoints = _copy(stopped, tmp_path, keep=(NEWEST,))
    os.replace(checkpoints / NEWEST, tmp_path / "out.work" / "checkpoint")
    (tmp_path / "out.work" / "checkpoint" / MANIFEST).unlink()
    logs: list[str] = []
    _run(world, out, STEPS, log=logs.append, stop_after_steps=1)
    assert not any("resuming" in m for m in logs), logs
    aside = _set_aside(tmp_path, "unverified-checkpoint")
    assert "no manifest" in (aside / "SET_ASIDE.txt").read_text()
    assert (aside / "model.safetensors").is_file()
    assert any(str(aside) in m for m in logs), logs
