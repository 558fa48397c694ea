"""A full disk, reached for real: every writer keeps the previous artifact, leaves no partial
file and raises DiskFullError naming the target, the bytes written and the free space.

Each test writes into a 2 MiB tmpfs mounted for it (root only: skipped elsewhere, saying
why), first a small artifact, then one too big for what is left.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import save_file, save_model

from embtransfer.core.atomic import (
    DiskFullError,
    atomic_path,
    payload_bytes,
    save_npy,
    write_json,
    write_parquet,
)
from embtransfer.lapt.checkpointing import rng_state
from embtransfer.lapt.distributed import Ranks
from embtransfer.lapt.metrics import CallMeasurements, Progress
from embtransfer.lapt.resume import ResumeCheckpoint
from embtransfer.lapt.settings import LaptSettings

DISK = 2 << 20


@pytest.fixture
def disk(tmp_path) -> Path:
    """A fresh 2 MiB tmpfs; unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    where = tmp_path / "disk"
    where.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(where)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _free(where: Path) -> int:
    stat = os.statvfs(where)
    return stat.f_bavail * stat.f_frsize


def _noise(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32)  # incompressible


def _safetensors_file(path, n):
    tensors = {"w": torch.from_numpy(_noise(n))}
    with atomic_path(path, expected_bytes=payload_bytes(tensors)) as tmp:
        save_file(tensors, str(tmp))


def _safetensors_model(path, n):
    model = torch.nn.Linear(n // 1000, 1000, bias=False)
    with atomic_path(path, expected_bytes=payload_bytes(model.state_dict())) as tmp:
        save_model(model, str(tmp))


def _torch_save(path, n):
    with atomic_path(path) as tmp:
        torch.save({"w": torch.from_numpy(_noise(n))}, tmp)


def _json(path, n):
    write_json(path, {"values": _noise(n // 8).tolist()})  # about 25 bytes a float


def _npy(path, n):
    save_npy(path, _noise(n).reshape(-1, 100))


def _parquet(path, n):
    write_parquet(path, pa.table({"x": _noise(n)}), {"rows": n})


BIG = 1_000_000  # float32s: 4 MB into 2 MiB
# writer, file name, the total it passes (None: unknown in advance; "text": JSON's, known
# once encoded), whether the partial file stays in the temporary (safetensors writes its
# own temporary beside it and removes that)
WRITERS = {
    "write_json": (_json, "stats.json", "text", True),
    "save_npy": (_npy, "matrix.npy", 4 * BIG, True),
    "write_parquet": (_parquet, "table.parquet", None, True),
    "safetensors.save_file": (_safetensors_file, "model.safetensors", 4 * BIG, False),
    "safetensors.save_model": (_safetensors_model, "model.safetensors", 4 * BIG, False),
    "torch.save": (_torch_save, "optimizer.pt", None, True),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_full_disk_keeps_the_previous_artifact_and_says_what_happened(disk, writer):
    write, name, expected, keeps_partial = WRITERS[writer]
    target = disk / name
    write(target, 1000)
    previous = target.read_bytes()
    with pytest.raises(DiskFullError) as caught:
        write(target, BIG)
    err = caught.value
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert target.read_bytes() == previous
    assert sorted(os.listdir(disk)) == [name]  # no partial file left
    message = str(err)
    assert str(target) in message and "disk full" in message
    assert err.free == _free(disk) and f"{err.free:,} bytes (2.0 MiB) free on its file" in message
    assert err.written is not None
    assert f"its temporary held {err.written:,} bytes" in message
    if keeps_partial:
        assert err.written > DISK // 2  # it filled the disk
    if expected == "text":
        assert err.expected is not None and err.expected > DISK
        assert f"of {err.expected:,} bytes" in message
    elif expected is not None:
        assert err.expected == expected and f"of {expected:,} bytes" in message
    else:
        assert err.expected is None and "the whole size was not known in advance" in message
    for what in ("*.work/", "results/", "clean_temporaries=True"):  # what to free
        assert what in message


def test_a_full_disk_during_a_lapt_checkpoint_keeps_the_previous_checkpoint(disk):
    torch.manual_seed(0)
    model = torch.nn.Linear(300, 300)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model(torch.ones(2, 300)).sum().backward()
    optimizer.step()  # the optimizer holds its moments: a checkpoint of about 1.1 MB
    settings = LaptSettings(keep_checkpoints=1, global_batch_size=8, micro_batch_size=8)
    saver = ResumeCheckpoint(disk / "out.work", {"seed": 1}, model, optimizer, scheduler,
                             settings, steps_per_epoch=10, ranks=Ranks(), log=print)
    first = saver.save(Progress(step=1, losses=[1.0]), CallMeasurements(1), rng_state())
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    optimizer.step()
    with pytest.raises(DiskFullError) as caught:  # the next one does not fit beside it
        saver.save(Progress(step=2, losses=[1.0, 0.9]), CallMeasurements(2), rng_state())
    assert saver.saved() == [first]  # kept although only one is to be kept
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert os.listdir(first.parent) == [first.name]  # no partial folder
    err = caught.value
    assert str(saver.folder(2)) in str(err) and err.free == _free(disk)
    assert err.written is not None and err.written > 0


def test_only_a_write_that_ran_out_of_space_is_called_disk_full(disk):
    target = disk / "out.json"
    target.write_text("{}")
    with pytest.raises(RuntimeError, match="not the disk"), atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 1000)
        raise RuntimeError("not the disk")  # plenty free: the writer's own error stands
    filler = disk / "filler"
    with pytest.raises(OSError), open(filler, "wb") as fh:
        fh.write(b"\0" * DISK)  # now the disk is full
    with pytest.raises(ValueError, match="bad value"), atomic_path(target):
        raise ValueError("bad value")  # not an I/O error: not the disk's either
    assert sorted(os.listdir(disk)) == ["filler", "out.json"]


def test_a_quota_says_so(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(DiskFullError) as caught, atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 10)
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    err = caught.value
    assert err.errno == errno.EDQUOT and err.written == 10
    assert str(err).startswith(f"disk quota exceeded writing {target}")
    assert "(the quota can leave less)" in str(err) and list(tmp_path.iterdir()) == []
