"""Checkpoints survive what goes wrong: kills mid-write, corruption, unsafe pickles, full disks."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from esper_core.errors import CheckpointError
from esper_core.run.checkpoint import DiskFullError, atomic_writer, load_checkpoint, save_checkpoint


def payload(step: int) -> dict[str, object]:
    return {"step": step, "weights": torch.full((256, 1024), float(step))}


def test_round_trip(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "c.pt", payload(3), {"step": 3})
    data = load_checkpoint(tmp_path / "c.pt")
    assert data["step"] == 3 and torch.equal(data["weights"], torch.full((256, 1024), 3.0))
    assert (tmp_path / "c.json").read_text().strip().startswith("{")


def test_sigkill_during_writes_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    """A writer saving ~1 MB checkpoints in a loop is SIGKILLed at random moments."""
    target = tmp_path / "checkpoint.pt"
    save_checkpoint(target, payload(0))
    script = textwrap.dedent(f"""
        import torch
        from esper_core.run.checkpoint import save_checkpoint
        step = 1
        while True:
            save_checkpoint({str(target)!r}, {{"step": step, "weights": torch.full((256, 1024), float(step))}})
            step += 1
    """)
    for delay in (0.05, 0.2, 0.45, 0.8):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(1.0 + delay)  # import time, then a few writes
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        data = load_checkpoint(target)  # never torn: the old or a complete new file
        step = data["step"]
        assert torch.equal(data["weights"], torch.full((256, 1024), float(step)))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_checkpoint_is_a_clear_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, payload(1))
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(raw[:100] + os.urandom(2000) + raw[2100:])
    else:
        path.write_bytes(b"")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "corrupt" in str(info.value)


class Evil:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, ("echo pwned",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_checkpoint_with_a_pickled_callable_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "policy": Evil()}, path)
    with pytest.raises(CheckpointError, match="pickled Python objects"):
        load_checkpoint(path)
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps({"format": 1, "x": print}))
    with pytest.raises(CheckpointError, match=str(raw)):
        load_checkpoint(raw)


def test_missing_and_foreign_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="format"):
        load_checkpoint(tmp_path / "other.pt")


def test_disk_full_while_writing_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, payload(1))
    before = path.read_bytes()
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(DiskFullError, match=r"no space left.*previous version.*intact") as info:
        save_checkpoint(path, payload(2))
    assert str(path) in str(info.value)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == before, "the previous checkpoint changed"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"], "temporary files left"


def test_an_exception_mid_write_removes_the_temporary_file(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), atomic_writer(tmp_path / "f.txt", "w") as fh:
        fh.write("partial")
        raise RuntimeError("writer failed")
    assert list(tmp_path.iterdir()) == []
