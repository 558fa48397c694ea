"""LAPT: resume equals an uninterrupted run, embedding-only stage, replay mix, schedule."""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from embtransfer.lapt import (
    CheckpointError,
    CorpusTooSmallError,
    MicroBatchOOMError,
    epoch_order,
    lr_factor,
    replay_count,
    train_lapt,
)
from embtransfer.world.pretrain import build_model
from embtransfer.world.tokenizers import special_token_ids, train_tokenizer

WORDS = "ka lo mi tu ren sal vor ix bema tori quel nap dru fen go shi".split()
CFG = {
    "max_length": 16, "lr": 1e-3, "warmup_ratio": 0.2, "global_batch_size": 8,
    "micro_batch_size": 4, "log_every": 1, "checkpoint_every": 2, "threads": 1,
}


def _text(path: Path, n_lines: int, seed: int, words: list[str] = WORDS) -> Path:
    rng = random.Random(seed)
    path.write_text(
        "\n".join(" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(n_lines))
        + "\n"
    )
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lapt")
    train = _text(root / "train.txt", 300, 0)
    valid = _text(root / "valid.txt", 30, 1)
    english = _text(root / "en.txt", 100, 2, "the cat sat on a mat and ran to its home".split())
    tok = train_tokenizer("bytelevel_bpe", [str(train), str(english)], 320, "gpt2")
    dirs = {"train": train, "valid": valid, "english": english}
    for family, tied in (("gpt2", True), ("llama", False)):
        model = build_model(family, len(tok), {"hidden_size": 32, "num_heads": 2,
                                               "intermediate_size": 64,
                                               "max_position_embeddings": 32},
                            tied, special_token_ids(tok), 0)
        model.save_pretrained(root / family)
        tok.save_pretrained(root / family)
        dirs[family] = root / family
    return dirs


def _run(world: dict[str, Path], out: Path, cfg: dict | None = None, family: str = "gpt2",
         **kw) -> dict:
    return train_lapt(world[family], world["train"], world["valid"], out, {**CFG, **(cfg or {})},
                      seed=3, log=lambda s: None, **kw)


def _trajectory(out: Path) -> list[dict]:
    # Everything but wall-clock fields.
    lines = [json.loads(x) for x in (Path(f"{out}.work") / "metrics.jsonl").read_text().split("\n")
             if x]
    drop = {"tokens_per_s", "elapsed_s", "eta_s", "peak_memory_bytes"}
    return [{k: v for k, v in r.items() if k not in drop} for r in lines]


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


@pytest.fixture(scope="module")
def straight(world: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "out"
    result = _run(world, out, {"max_steps": 10})
    assert result["status"] == "done" and result["total_steps"] == 10
    return out


def test_resume_after_kill_equals_straight_run(world, straight, tmp_path):
    out = tmp_path / "out"
    # Stop after step 5 without saving: the last checkpoint is step 4, step 5 is redone.
    stopped = _run(world, out, {"max_steps": 10}, stop_after_steps=5)
    assert stopped == {"status": "stopped", "step": 5, "total_steps": 10}
    assert (tmp_path / "out.work" / "checkpoint" / "state.json").is_file()
    assert not out.exists()
    assert _run(world, out, {"max_steps": 10})["status"] == "done"
    _assert_same_weights(straight, out)
    assert _trajectory(out) == _trajectory(straight)
    assert not (tmp_path / "out.work" / "checkpoint").exists()  # superseded by the output


def test_sigterm_saves_checkpoint_and_resume_matches(world, straight, tmp_path):
    out = tmp_path / "out"
    # Slow logging (every step) so the signal arrives mid-run.
    script = (
        "import sys, time\n"
        "from embtransfer.lapt import train_lapt, Preempted\n"
        f"cfg = {json.dumps({**CFG, 'max_steps': 10})}\n"
        "def log(s):\n    print(s, flush=True); time.sleep(0.3)\n"
        "try:\n"
        f"    train_lapt({str(world['gpt2'])!r}, {str(world['train'])!r}, "
        f"{str(world['valid'])!r}, {str(out)!r}, cfg, 3, log=log)\n"
        "except Preempted as exc:\n    print('PREEMPTED', exc.step, flush=True); sys.exit(3)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "out.work" / "metrics.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if metrics.exists() and '"step": 3' in metrics.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, output
    assert "SIGTERM: checkpoint saved at step" in output
    step = int(output.split("PREEMPTED")[1].split()[0])
    assert 3 <= step < 10
    state = json.loads((tmp_path / "out.work" / "checkpoint" / "state.json").read_text())
    assert state["step"] == step and state["sequences_seen"] == step * 8
    assert _run(world, out, {"max_steps": 10})["status"] == "done"
    _assert_same_weights(straight, out)
    assert _trajectory(out) == _trajectory(straight)


def test_embedding_only_stage_freezes_the_rest(world, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 3, "embedding_only_steps": 3, "warmup_ratio": 0.0},
         family="llama")
    before, after = _weights(world["llama"]), _weights(out)
    emb = {"model.embed_tokens.weight", "lm_head.weight"}
    assert emb <= before.keys()
    for k in before:
        if k in emb:
            assert not torch.equal(before[k], after[k]), k
        else:
            assert torch.equal(before[k], after[k]), k


def test_replay_ratio_over_an_epoch(world, tmp_path):
    for n_target, n_blocks, ratio in ((250, 40, 0.25), (97, 500, 0.1), (10, 3, 0.5)):
        order = epoch_order(n_target, n_blocks, ratio, seed=1, epoch=0)
        n_rep = int((order >= n_target).sum())
        assert n_rep == replay_count(n_target, ratio)
        assert abs(n_rep / len(order) - ratio) <= 1 / len(order)
        assert sorted(order[order < n_target].tolist()) == list(range(n_target))
        # Spread evenly: every prefix is within one sequence of the ratio.
        prefix = np.cumsum(order >= n_target)
        k = np.arange(1, len(order) + 1)
        assert np.all(np.abs(prefix - k * n_rep / len(order)) <= 1)
    assert not np.array_equal(epoch_order(50, 10, 0.2, 1, 0), epoch_order(50, 10, 0.2, 1, 1))

    # One full epoch of training on the mix sees the ratio too.
    cfg = {"replay": {"file": str(world["english"]), "ratio": 0.25}, "checkpoint_every": 1000,
           "log_every": 1000}
    result = _run(world, tmp_path / "out", cfg)
    seen = result["sequences_this_run"]
    n = seen["target"] + seen["replay"]
    assert result["total_steps"] == result["steps_per_epoch"] and n == 8 * result["total_steps"]
    assert abs(seen["replay"] / n - 0.25) <= 1 / n + 1 / result["target_blocks"]


def test_eval_points_and_lr_schedule(world, straight):
    traj = _trajectory(straight)
    evals = [r for r in traj if "eval_loss" in r]
    assert [(r["step"], r["fraction"]) for r in evals] == [(3, 0.3), (6, 0.6), (9, 0.9)]
    assert all(math.isfinite(r["eval_loss"]) for r in evals)
    steps = [r for r in traj if "train_loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 11))
    total, warmup = 10, math.ceil(10 * 0.2)
    for r in steps:
        s = r["step"] - 1  # the lr an optimizer step used
        expected = 1e-3 * (s / warmup if s < warmup else
                           0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
        assert r["lr"] == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert lr_factor(0, 2, 10) == 0.0 and lr_factor(1, 2, 10) == 0.5
    assert lr_factor(2, 2, 10) == 1.0 and lr_factor(10, 2, 10) == pytest.approx(0.0)
    final = traj[-1]
    assert final["final"] and final["step"] == 10 and math.isfinite(final["final_train_loss"])
    raw = json.loads((Path(f"{straight}.work") / "metrics.jsonl").read_text().splitlines()[-1])
    assert raw["peak_memory_bytes"] > 0 and raw["peak_memory_kind"] == "cpu_max_rss"
    assert json.loads((straight / "lapt.json").read_text())["status"] == "done"
    assert (straight / "tokenizer.json").is_file()


def test_corrupt_checkpoint_is_named(world, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 6}, stop_after_steps=3)
    ckpt = tmp_path / "out.work" / "checkpoint"
    (ckpt / "optimizer.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match=str(ckpt)):
        _run(world, out, {"max_steps": 6})
    (ckpt / "optimizer.pt").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        _run(world, out, {"max_steps": 6})
    assert not out.exists()


def test_checkpoint_of_another_config_is_refused(world, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 6}, stop_after_steps=3)
    with pytest.raises(CheckpointError, match="another config"):
        _run(world, out, {"max_steps": 6, "lr": 2e-3})


def test_too_small_corpus(world, tmp_path):
    with pytest.raises(CorpusTooSmallError, match="fewer than one global batch"):
        _run(world, tmp_path / "out", {"global_batch_size": 4096, "micro_batch_size": 4})


def test_oom_suggests_smaller_micro_batch(world, tmp_path, monkeypatch):
    import transformers

    def boom(self, *a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "forward", boom)
    with pytest.raises(MicroBatchOOMError, match="smaller micro_batch_size"):
        _run(world, tmp_path / "out", {"max_steps": 2})


def test_unknown_key_and_bad_accumulation(world, tmp_path):
    with pytest.raises(ValueError, match="unknown LAPT keys"):
        _run(world, tmp_path / "out", {"learning_rate": 1})
    with pytest.raises(ValueError, match="multiple of micro_batch_size"):
        _run(world, tmp_path / "out", {"micro_batch_size": 3})



def test_two_processes_follow_the_one_process_trajectory(world, tmp_path):
    # accelerate's distributed launcher, ranks over gloo on CPU: each rank takes half
    # of every step's micro batches; summed gradients give the one-process step.
    import os
    import socket

    from embtransfer.lapt import launch_command

    cfg = {**CFG, "max_steps": 4, "micro_batch_size": 2}
    one, two = tmp_path / "one", tmp_path / "two"
    spec = {"model_dir": str(world["llama"]), "train_file": str(world["train"]),
            "valid_file": str(world["valid"]), "out_dir": str(two), "cfg": cfg, "seed": 3}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "workflow"))
    proc = subprocess.run(launch_command(tmp_path / "spec.json", 2, port), capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 2 processes" in proc.stdout
    _run(world, one, {"max_steps": 4, "micro_batch_size": 2}, family="llama")
    ta, tb = _trajectory(one), _trajectory(two)
    assert [sorted(r) for r in ta] == [sorted(r) for r in tb]
    for ra, rb in zip(ta, tb, strict=True):
        for key in ("train_loss", "eval_loss", "final_train_loss"):
            if key in ra:
                assert math.isclose(ra[key], rb[key], rel_tol=1e-6), (key, ra, rb)
    wa, wb = _weights(one), _weights(two)
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6)


def test_settings_from_the_config_section():
    from embtransfer.config import validate_config
    from embtransfer.lapt import settings_from_config

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml")
                            .read_text())
    config["lapt"].update(variant="lora", replay={"ratio": 0.25},
                          lora={"r": 4, "lr": 3e-4})
    section = validate_config(config)["lapt"]
    assert section["replay"]["language"] == "en_mini"  # the source language by default
    cfg = settings_from_config(section, 2, "en.txt")
    assert cfg["lr"] == 3e-4  # LoRA's own learning rate
    assert cfg["lora"] == {"r": 4, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear",
                           "train_embeddings": True, "int8": False}
    assert cfg["replay"] == {"file": "en.txt", "ratio": 0.25}
    assert cfg["threads"] == 2 and cfg["max_length"] == section["max_length"]
    section["variant"] = "full"
    full = settings_from_config(section, 2, "en.txt")
    assert full["lora"] is None and full["lr"] == section["lr"]
