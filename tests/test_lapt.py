"""LAPT: resume equals an uninterrupted run, embedding-only stage, replay mix, schedule.

What a resume does with damaged or unfinished checkpoints: tests/test_lapt_resume.py.
"""

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

from embtransfer.core.schedule import cosine_with_warmup
from embtransfer.lapt.data import CorpusTooSmallError, epoch_order, replay_count
from embtransfer.lapt.settings import LaptSettings, Replay
from embtransfer.lapt.trainer import MicroBatchOOMError, train_lapt
from embtransfer.models.pretrain import build_model
from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer

WORDS = "ka lo mi tu ren sal vor ix bema tori quel nap dru fen go shi".split()
CFG = {
    "max_length": 16,
    "lr": 1e-3,
    "warmup_ratio": 0.2,
    "global_batch_size": 8,
    "micro_batch_size": 4,
    "log_every": 1,
    "checkpoint_every": 2,
    "threads": 1,
}


def _text(path: Path, n_lines: int, seed: int, words: list[str] = WORDS) -> Path:
    rng = random.Random(seed)
    path.write_text(
        "\n".join(" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(n_lines)) + "\n"
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
        model = build_model(
            family,
            len(tok),
            {
                "hidden_size": 32,
                "num_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 32,
            },
            tied,
            special_token_ids(tok),
            0,
        )
        model.save_pretrained(root / family)
        tok.save_pretrained(root / family)
        dirs[family] = root / family
    return dirs


def _run(
    world: dict[str, Path], out: Path, cfg: dict | None = None, family: str = "gpt2", **kw
) -> dict:
    kw.setdefault("log", lambda s: None)
    return train_lapt(
        world[family], world["train"], world["valid"], out, {**CFG, **(cfg or {})}, seed=3, **kw
    )


def _trajectory(out: Path) -> list[dict]:
    # Everything but wall-clock fields.
    lines = [
        json.loads(x) for x in (Path(f"{out}.work") / "metrics.jsonl").read_text().split("\n") if x
    ]
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
    checkpoints = tmp_path / "out.work" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000004"]
    assert not out.exists()
    assert _run(world, out, {"max_steps": 10})["status"] == "done"
    _assert_same_weights(straight, out)
    assert _trajectory(out) == _trajectory(straight)
    assert not checkpoints.exists()  # superseded by the output
    # The output holds no run-to-run values (timings, this run's share): byte-identical files.
    files = sorted(p.name for p in straight.iterdir())
    assert files == sorted(p.name for p in out.iterdir())
    for name in files:
        assert (out / name).read_bytes() == (straight / name).read_bytes(), name


def test_sigterm_saves_checkpoint_and_resume_matches(world, straight, tmp_path):
    out = tmp_path / "out"
    # Slow logging (every step) so the signal arrives mid-run.
    script = (
        "import sys, time\n"
        "from embtransfer.lapt.preemption import Preempted\n"
        "from embtransfer.lapt.trainer import train_lapt\n"
        f"cfg = {json.dumps({**CFG, 'max_steps': 10})}\n"
        "def log(s):\n    print(s, flush=True); time.sleep(0.3)\n"
        "try:\n"
        f"    train_lapt({str(world['gpt2'])!r}, {str(world['train'])!r}, "
        f"{str(world['valid'])!r}, {str(out)!r}, cfg, 3, log=log)\n"
        "except Preempted as exc:\n    print('PREEMPTED', exc.step, flush=True); sys.exit(3)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    metrics = tmp_path / "out.work" / "metrics.jsonl"
    # generous: on a loaded machine the child's imports alone can take a minute
    deadline = time.time() + 600
    while not (metrics.exists() and '"step": 3' in metrics.read_text()):
        assert time.time() < deadline and proc.poll() is None, "the run never reached step 3"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, output
    assert "SIGTERM: checkpoint saved at step" in output
    step = int(output.split("PREEMPTED")[1].split()[0])
    assert 3 <= step < 10
    folder = tmp_path / "out.work" / "checkpoints" / f"step-{step:08d}"
    state = json.loads((folder / "state.json").read_text())
    assert state["step"] == step and state["sequences_seen"] == step * 8
    assert _run(world, out, {"max_steps": 10})["status"] == "done"
    _assert_same_weights(straight, out)
    assert _trajectory(out) == _trajectory(straight)


def test_embedding_only_stage_freezes_the_rest(world, tmp_path):
    out = tmp_path / "out"
    _run(
        world, out, {"max_steps": 3, "embedding_only_steps": 3, "warmup_ratio": 0.0}, family="llama"
    )
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
    cfg = {
        "replay": {"file": str(world["english"]), "ratio": 0.25},
        "checkpoint_every": 1000,
        "log_every": 1000,
    }
    result = _run(world, tmp_path / "out", cfg)
    seen = result["sequences_this_run"]
    n = seen["target"] + seen["replay"]
    assert result["total_steps"] == result["steps_per_epoch"] and n == 8 * result["total_steps"]
    assert abs(seen["replay"] / n - 0.25) <= 1 / n + 1 / result["target_blocks"]


def test_plan_and_global_batches():
    """The plan's steps, warm-up and evaluation points; each step's global batch a slice of
    its epoch's order (lapt/plan.py, lapt/data.py)."""
    from embtransfer.lapt.data import GlobalBatches, TrainingRows
    from embtransfer.lapt.plan import make_plan

    training = TrainingRows(np.zeros((20, 4), dtype=np.uint32), np.ones((5, 4), dtype=np.uint32))
    settings = LaptSettings.from_dict(
        {
            **CFG,
            "eval_fractions": [0.5, 1.0],
            "max_steps": 5,
            "replay": {"file": "en.txt", "ratio": 0.2},
        }
    )
    plan = make_plan(settings, training, world=1)
    # 20 target + 5 replay blocks an epoch: 3 steps of 8 (the last partial batch dropped)
    assert (plan.steps_per_epoch, plan.total_steps, plan.warmup_steps) == (3, 5, 1)
    assert plan.micro_batches == 2 and plan.eval_at == {2: [0.5], 5: [1.0]}
    with pytest.raises(ValueError, match="do not split evenly over 3 processes"):
        make_plan(settings, training, world=3)
    batches = GlobalBatches(training, 8, plan.steps_per_epoch, plan.replay_ratio, seed=1)
    first = epoch_order(20, 5, 0.2, 1, 0)
    assert np.array_equal(np.concatenate([batches.at(s) for s in range(3)]), first[:24])
    assert np.array_equal(batches.at(3), epoch_order(20, 5, 0.2, 1, 1)[:8])
    rows = training.rows(np.array([0, 21]))
    assert rows.dtype == torch.int64 and rows.tolist() == [[0] * 4, [1] * 4]


def test_metrics_log_lines(tmp_path):
    """metrics.jsonl: the mean train loss every ``every`` steps, in a fixed key order; rank 0
    writes, every rank keeps the lines; a resume rewinds the file (lapt/metrics.py)."""
    from embtransfer.lapt.metrics import CallMeasurements, MetricsLog, Progress, log_train_loss

    logs: list[str] = []
    metrics = MetricsLog(tmp_path / "metrics.jsonl", True, logs.append)
    metrics.rewrite([{"step": 0}])
    progress, measured = Progress(step=1, losses=[1.0]), CallMeasurements(0)
    log_train_loss(metrics, progress, measured, 0.1, every=2, total=3)
    assert progress.records == [] and logs == []
    progress.step, progress.losses = 2, [1.0, 2.0]
    log_train_loss(metrics, progress, measured, 0.1, every=2, total=3)
    (line,) = progress.records
    assert list(line) == ["step", "train_loss", "lr", "tokens_per_s", "elapsed_s", "eta_s"]
    assert (line["step"], line["train_loss"], line["lr"]) == (2, 1.5, 0.1)
    written = [json.loads(x) for x in metrics.path.read_text().splitlines()]
    assert written == [{"step": 0}, line] and logs[0].startswith("[lapt] step 2/3 loss 1.5000")
    metrics.rewrite([])
    assert metrics.path.read_text() == ""
    silent = MetricsLog(tmp_path / "other.jsonl", False, logs.append)
    silent.record(progress, {"step": 3})
    assert progress.records[-1] == {"step": 3} and not silent.path.exists()


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
        expected = 1e-3 * (
            s / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup)))
        )
        assert r["lr"] == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert cosine_with_warmup(0, 2, 10) == 0.0 and cosine_with_warmup(1, 2, 10) == 0.5
    assert cosine_with_warmup(2, 2, 10) == 1.0
    assert cosine_with_warmup(10, 2, 10) == pytest.approx(0.0)
    final = traj[-1]
    assert final["final"] and final["step"] == 10 and math.isfinite(final["final_train_loss"])
    raw = json.loads((Path(f"{straight}.work") / "metrics.jsonl").read_text().splitlines()[-1])
    assert raw["peak_memory_bytes"] > 0 and raw["peak_memory_kind"] == "cpu_max_rss"
    assert json.loads((straight / "lapt.json").read_text())["status"] == "done"
    assert (straight / "tokenizer.json").is_file()


def test_checkpoint_of_another_config_is_set_aside(world, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 6}, stop_after_steps=3)
    logs: list[str] = []
    assert _run(world, out, {"max_steps": 6, "lr": 2e-3}, log=logs.append)["status"] == "done"
    (aside,) = tmp_path.glob("out.work.stale-*")
    assert (aside / "checkpoints" / "step-00000002" / "state.json").is_file()  # kept
    assert "settings.lr" in (aside / "SET_ASIDE.txt").read_text()
    assert any("settings.lr" in m and "starting fresh" in m for m in logs), logs
    assert not any("resuming" in m for m in logs)


def test_too_small_corpus(world, tmp_path):
    with pytest.raises(CorpusTooSmallError, match="fewer than one global batch"):
        _run(world, tmp_path / "out", {"global_batch_size": 4096, "micro_batch_size": 4})


def test_oom_suggests_smaller_micro_batch(world, tmp_path, monkeypatch):
    import transformers

    def boom(self, *a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(transformers.GPT2Model, "forward", boom)  # the chunked loss's body
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

    from embtransfer.lapt.distributed import launch_command

    cfg = {**CFG, "max_steps": 4, "micro_batch_size": 2}
    one, two = tmp_path / "one", tmp_path / "two"
    spec = {
        "model_dir": str(world["llama"]),
        "train_file": str(world["train"]),
        "valid_file": str(world["valid"]),
        "out_dir": str(two),
        "cfg": cfg,
        "seed": 3,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "workflow"))
    proc = subprocess.run(
        launch_command(tmp_path / "spec.json", 2, port),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
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
    from embtransfer.config.validation import validate_config
    from embtransfer.lapt.settings import settings_from_config

    config = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text()
    )
    config["lapt"].update(variant="lora", replay={"ratio": 0.25}, lora={"r": 4, "lr": 3e-4})
    section = validate_config(config)["lapt"]
    assert section["replay"]["language"] == "en_mini"  # the source language by default
    settings = settings_from_config(section, 2, "en.txt")
    assert settings.lr == 3e-4  # LoRA's own learning rate
    assert settings.lora == {
        "r": 4,
        "alpha": 32,
        "dropout": 0.05,
        "target_modules": "all-linear",
        "train_embeddings": True,
        "int8": False,
    }
    assert settings.replay == Replay(file="en.txt", ratio=0.25)
    assert settings.threads == 2 and settings.max_length == section["max_length"]
    assert settings.as_dict()["replay"] == {"file": "en.txt", "ratio": 0.25}
    section["variant"] = "full"
    full = settings_from_config(section, 2, "en.txt")
    assert full.lora is None and full.lr == section["lr"]
    # Unvalidated defaults come from the dataclass, the same the schema fills in.
    assert settings_from_config({}, None, None) == LaptSettings()


# ---------------------------------------------------------------- what a checkpoint continues


def _copy_model(src: Path, dst: Path, noise: float) -> Path:
    """Another starting checkpoint of the same shapes (as another transfer would give)."""
    import shutil

    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    weights = load_file(src / "model.safetensors")
    gen = torch.Generator().manual_seed(7)
    weights = {k: v + noise * torch.randn(v.shape, generator=gen) for k, v in weights.items()}
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_checkpoint_of_another_starting_model_is_set_aside(world, tmp_path):
    # Fails on the old trainer: it continued the old run's weights silently.
    other = _copy_model(world["gpt2"], tmp_path / "other_transfer", 0.01)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _run(world, out, {"max_steps": 6}, stop_after_steps=4)
    logs: list[str] = []
    train_lapt(
        other, world["train"], world["valid"], out, {**CFG, "max_steps": 6}, seed=3, log=logs.append
    )
    assert any("start_checkpoint_sha256" in m and "starting fresh" in m for m in logs), logs
    assert len(list(tmp_path.glob("out.work.stale-*"))) == 1
    train_lapt(
        other,
        world["train"],
        world["valid"],
        fresh,
        {**CFG, "max_steps": 6},
        seed=3,
        log=lambda m: None,
    )
    _assert_same_weights(fresh, out)


def test_checkpoint_of_another_corpus_is_set_aside(world, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 6}, stop_after_steps=4)
    edited = tmp_path / "train.txt"
    edited.write_text(world["train"].read_text().replace("ka", "lo"))  # same size, new text
    logs: list[str] = []
    train_lapt(
        world["gpt2"], edited, world["valid"], out, {**CFG, "max_steps": 6}, seed=3, log=logs.append
    )
    assert any("blocks.train.corpus_sha256" in m for m in logs), logs
    assert len(list(tmp_path.glob("out.work.stale-*"))) == 1


# ---------------------------------------------------------------- preemption


@pytest.fixture(scope="module")
def straight_micro2(world: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight2") / "out"
    _run(world, out, {"max_steps": 6, "micro_batch_size": 2})
    return out


def test_stop_between_micro_batches_resumes_bit_identically(
    world, straight_micro2, tmp_path, monkeypatch
):
    import os

    import embtransfer.lapt.loss as loss_mod
    from embtransfer.lapt.preemption import Preempted

    # 4 micro batches per step; SIGUSR1 arrives during the 2nd micro batch of step 5.
    real, calls = loss_mod.MicroBatchLoss.forward, {"n": 0}

    def forward(self, ids):
        calls["n"] += self.training  # evaluation passes do not count
        if self.training and calls["n"] == 4 * 4 + 2:
            os.kill(os.getpid(), signal.SIGUSR1)
        return real(self, ids)

    monkeypatch.setattr(loss_mod.MicroBatchLoss, "forward", forward)
    out = tmp_path / "out"
    logs: list[str] = []
    with pytest.raises(Preempted) as info:
        _run(world, out, {"max_steps": 6, "micro_batch_size": 2}, log=logs.append)
    assert info.value.step == 4
    assert any("between micro batches of step 5" in m for m in logs), logs
    folder = tmp_path / "out.work" / "checkpoints" / "step-00000004"
    assert json.loads((folder / "state.json").read_text())["step"] == 4
    monkeypatch.setattr(loss_mod.MicroBatchLoss, "forward", real)
    _run(world, out, {"max_steps": 6, "micro_batch_size": 2})
    _assert_same_weights(straight_micro2, out)
    assert _trajectory(out) == _trajectory(straight_micro2)


def test_slurm_time_limit_checkpoints_early(world, tmp_path, monkeypatch):
    from embtransfer.lapt.preemption import Preempted

    # The job "ends" 1 s from now: it stops after half of that, at the first chance.
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(time.time() + 1))
    out = tmp_path / "out"
    logs: list[str] = []

    def slow_log(msg: str) -> None:  # 0.2 s a step: the stop comes before step 6
        logs.append(msg)
        time.sleep(0.2)

    with pytest.raises(Preempted):
        _run(world, out, {"max_steps": 6, "stop_before_end_s": 1000, "log_every": 1}, log=slow_log)
    assert any("SLURM time limit" in m for m in logs), logs
    assert any("the SLURM time limit is near" in m and "checkpoint saved" in m for m in logs)
    assert list((tmp_path / "out.work" / "checkpoints").glob("step-*/manifest.json"))


# ---------------------------------------------------------------- the vocabulary loss


def _full_loss(hidden, weight, bias, labels, cap=None):
    logits = hidden @ weight.T + (0 if bias is None else bias)
    if cap is not None:
        logits = cap * torch.tanh(logits / cap)
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)


@pytest.mark.parametrize("bias,cap,chunk", [(False, None, 7), (True, None, 64), (False, 5.0, 5)])
def test_chunked_loss_equals_full_logits(bias, cap, chunk):
    from embtransfer.lapt.loss import chunked_cross_entropy

    gen = torch.Generator().manual_seed(0)
    n, h, v = 37, 16, 101
    hidden = torch.randn(n, h, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(v, h, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(v, generator=gen, dtype=torch.float64, requires_grad=True) if bias else None
    labels = torch.randint(0, v, (n,), generator=gen)
    labels[[3, 20]] = -100
    args = [t for t in (hidden, weight, b) if t is not None]
    ours = chunked_cross_entropy(hidden, weight, b, labels, chunk_rows=chunk, cap=cap)
    ref = _full_loss(hidden, weight, b, labels, cap)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    g_ours = torch.autograd.grad(ours, args)
    g_ref = torch.autograd.grad(ref, args)
    for a, r in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma"])
def test_chunked_loss_equals_the_models_own_loss(family):
    from embtransfer.lapt.loss import causal_lm_loss

    model = build_model(
        family,
        300,
        {
            "hidden_size": 32,
            "num_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 32,
            "dropout": 0.0,
        },
        None,
        {},
        0,
    )
    model.train()
    ids = torch.randint(0, 300, (3, 16), generator=torch.Generator().manual_seed(1))
    ref = model(input_ids=ids, labels=ids).loss
    g_ref = torch.autograd.grad(ref, list(model.parameters()), allow_unused=True)
    ours = causal_lm_loss(model, ids, chunk_rows=10)
    g_ours = torch.autograd.grad(ours, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    for (name, _), a, r in zip(model.named_parameters(), g_ours, g_ref, strict=True):
        if r is None:
            assert a is None or not a.any(), name
        else:
            torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6, msg=name)


def test_chunked_and_whole_logits_runs_agree(world, straight, tmp_path):
    # The trainer's default (chunked) loss against the model's own loss on whole logits.
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 10, "loss_chunk_rows": 0})
    for ra, rb in zip(_trajectory(out), _trajectory(straight), strict=True):
        for key in ("train_loss", "eval_loss", "final_train_loss"):
            if key in ra:
                assert math.isclose(ra[key], rb[key], rel_tol=1e-4), (key, ra, rb)


# ---------------------------------------------------------------- blocks


@pytest.mark.parametrize(
    "algorithm,family,role",
    [
        ("bytelevel_bpe", "gpt2", "eos"),
        ("wordpiece", "bert", "sep"),
        ("sentencepiece_bpe", "llama", "eos"),
    ],
)
def test_documents_are_separated_in_every_packing(world, tmp_path, algorithm, family, role):
    # Fails on the old packing for WordPiece: no EOS, documents ran into each other.
    from embtransfer.lapt.blocks import build_blocks

    tok = train_tokenizer(algorithm, [str(world["train"])], 300, family)
    docs = ["ka lo mi", "tu ren sal vor", "ix bema"] * 8
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(docs) + "\n")
    meta = build_blocks(tok, None, text, 8, tmp_path / "b.npy")
    sep = getattr(tok, f"{role}_token_id")
    assert sep is not None and meta["separator_id"] == sep and meta["separator"] == role
    stream = np.load(tmp_path / "b.npy").reshape(-1).tolist()
    expect: list[int] = []
    for d in docs:
        expect += tok(d, add_special_tokens=False)["input_ids"] + [sep]
    assert stream == expect[: len(stream)] and len(stream) == len(expect) // 8 * 8
    assert meta["blocks"] == len(expect) // 8 and meta["tokens"] == len(expect)


def test_separator_falls_back_to_the_configs_eos_and_refuses_none(world, tmp_path):
    from embtransfer.lapt.blocks import separator_id

    tok = train_tokenizer("wordpiece", [str(world["train"])], 300, "bert")
    tok.sep_token = None
    assert tok.eos_token_id is None and tok.sep_token_id is None
    assert separator_id(tok, 5, "tok") == (5, "config eos")
    with pytest.raises(ValueError, match="no EOS or SEP.*eos_token_id"):
        separator_id(tok, None, "some/model")


def test_prebuilt_blocks_equal_text_and_are_checked(world, straight, tmp_path):
    from transformers import AutoTokenizer

    from embtransfer.lapt.blocks import BlocksMismatchError, build_blocks

    tok = AutoTokenizer.from_pretrained(world["gpt2"])
    for name in ("train", "valid"):
        build_blocks(tok, None, world[name], 16, tmp_path / f"{name}.npy")
    out = tmp_path / "out"
    train_lapt(
        world["gpt2"],
        tmp_path / "train.npy",
        tmp_path / "valid.npy",
        out,
        {**CFG, "max_steps": 10},
        seed=3,
        log=lambda s: None,
    )
    _assert_same_weights(straight, out)
    assert not (tmp_path / "out.work" / "blocks").exists() or not any(
        (tmp_path / "out.work" / "blocks").iterdir()
    )
    with pytest.raises(BlocksMismatchError, match="blocks of 16 tokens, the run wants 8"):
        train_lapt(
            world["gpt2"],
            tmp_path / "train.npy",
            tmp_path / "valid.npy",
            tmp_path / "o2",
            {**CFG, "max_length": 8},
            seed=3,
            log=lambda s: None,
        )
    other = train_tokenizer("bytelevel_bpe", [str(world["english"])], 300, "gpt2")
    build_blocks(other, None, world["train"], 16, tmp_path / "other.npy")
    with pytest.raises(BlocksMismatchError, match="another tokenizer"):
        train_lapt(
            world["gpt2"],
            tmp_path / "other.npy",
            tmp_path / "valid.npy",
            tmp_path / "o3",
            CFG,
            seed=3,
            log=lambda s: None,
        )


# Schema keys that only the workflow reads (settings_from_config maps variant and replay).
WORKFLOW_ONLY = {"enabled", "select", "variant", "gpus", "mem_mb", "runtime"}


def test_settings_defaults_are_written_once():
    """lapt/settings.py holds the trainer's defaults; the schema file writes none of them,
    and the loaded schema fills in exactly those (a validated empty section is the
    dataclass's defaults; LoRA's, with its learning rate, likewise)."""
    from dataclasses import fields

    from embtransfer.config.validation import load_schema, validate_config
    from embtransfer.lapt.settings import LORA_LR, lora_settings, settings_from_config

    raw = yaml.safe_load(
        (
            Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "lapt.schema.yaml"
        ).read_text()
    )["properties"]
    names = {f.name for f in fields(LaptSettings)}
    assert not set(raw) - names - WORKFLOW_ONLY, "schema keys with no LaptSettings field"
    assert not WORKFLOW_ONLY & names
    written = [k for k in set(raw) & names - {"lora"} if "default" in raw[k]]
    written += [f"lora.{k}" for k, v in raw["lora"]["properties"].items() if "default" in v]
    assert not written, f"defaults written in the schema file too: {sorted(written)}"
    loaded = load_schema()["properties"]["lapt"]["properties"]
    assert all("default" in loaded[k] for k in set(raw) - {"lora"})
    assert all("default" in v for v in loaded["lora"]["properties"].values())

    config = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text()
    )
    config["lapt"] = {}
    section = validate_config(config)["lapt"]
    assert settings_from_config(section, None, None) == LaptSettings()
    config["lapt"] = {"variant": "lora"}
    lora = settings_from_config(validate_config(config)["lapt"], None, None)
    assert lora.lr == LORA_LR and lora.lora == lora_settings({})


def test_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="unknown LAPT keys"):
        LaptSettings.from_dict({"learning_rate": 1})
    with pytest.raises(ValueError, match="replay ratio"):
        LaptSettings.from_dict({"replay": {"file": "en.txt", "ratio": 1.0}})
    with pytest.raises(ValueError, match="loss_chunk_rows"):
        LaptSettings(loss_chunk_rows=-1)
    with pytest.raises(ValueError, match="multiple of micro_batch_size"):
        LaptSettings(global_batch_size=10, micro_batch_size=4)
    with pytest.raises(ValueError, match="unknown LoRA keys"):
        LaptSettings.from_dict({"lora": {"rank": 4}})
    given = {"max_steps": 7, "replay": {"file": "en.txt", "ratio": 0.5}}
    assert LaptSettings.from_dict(
        LaptSettings.from_dict(given).as_dict()
    ) == LaptSettings.from_dict(given)


def test_activation_checkpointing_keeps_the_trajectory(world, straight, tmp_path):
    out = tmp_path / "out"
    _run(world, out, {"max_steps": 10, "activation_checkpointing": True})
    for ra, rb in zip(_trajectory(out), _trajectory(straight), strict=True):
        assert ra.keys() == rb.keys()
        for key in ("train_loss", "eval_loss"):
            if key in ra:
                assert math.isclose(ra[key], rb[key], rel_tol=1e-5), (key, ra, rb)


def test_failed_run_keeps_its_checkpoint_and_a_rerun_resumes(
    world, straight, tmp_path, monkeypatch
):
    import embtransfer.lapt.loss as loss_mod

    real, calls = loss_mod.MicroBatchLoss.forward, {"n": 0}

    def forward(self, ids):  # NaN in step 5 (2 micro batches a step)
        calls["n"] += self.training
        loss = real(self, ids)
        return loss * float("nan") if self.training and calls["n"] == 9 else loss

    monkeypatch.setattr(loss_mod.MicroBatchLoss, "forward", forward)
    out = tmp_path / "out"
    with pytest.raises(FloatingPointError, match=r"at step 5; the last checkpoint in .* is kept"):
        _run(world, out, {"max_steps": 10})
    monkeypatch.setattr(loss_mod.MicroBatchLoss, "forward", real)
    logs: list[str] = []
    _run(world, out, {"max_steps": 10}, log=logs.append)
    assert any("resuming" in m and "at step 4/10" in m for m in logs), logs
    _assert_same_weights(straight, out)


def test_lapt_modules_import_no_private_names():
    """The trainer's modules use other modules' public names only (shared helpers have a
    public home; models/pretrain.py's privates stay its own)."""
    import ast

    pkg = Path(__file__).resolve().parents[1] / "workflow" / "embtransfer"
    for path in sorted((pkg / "lapt").glob("*.py")):
        name = path.name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"
                ]
                assert not private, f"{name} imports {private} from {node.module}"
