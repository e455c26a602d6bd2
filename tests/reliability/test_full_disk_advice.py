"""A full disk before the first checkpoint must not advise a resume (there
is nothing to resume: `--resume` then said the run has no checkpoint); after one, it does."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from esper_telemetry.files import AppendFile

from esper_core.run.checkpoint import DiskFullError
from tests.plugins.esper_telemetry.helpers import run_tiny


def test_the_event_log_filling_the_disk_before_any_checkpoint_says_start_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(self: AppendFile, fsync: bool | None = None) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(AppendFile, "flush", disk_full)
    with pytest.raises(DiskFullError) as info:
        run_tiny(tmp_path / "r", ["jsonl"], "run.checkpoint_every=5")
    message = str(info.value)
    assert "no checkpoint was written yet" in message and "start the run again" in message
    assert "resume the run" not in message
    assert not (tmp_path / "r" / "checkpoint.pt").exists()


@pytest.mark.parametrize(("failing", "advice"), [(1, "start the run again"), (2, "resume the run")])
def test_a_checkpoint_filling_the_disk_advises_by_what_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: int, advice: str
) -> None:
    real_fsync = os.fsync
    checkpoints = []

    def fsync(fd: int) -> None:
        # The temporary file a checkpoint is written to: RUN/.checkpoint.pt.HEX.tmp
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(".checkpoint.pt."):
            checkpoints.append(fd)
            if len(checkpoints) == failing:
                raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    run_dir = tmp_path / "r"
    with pytest.raises(DiskFullError) as info:
        run_tiny(run_dir, [], "run.checkpoint_every=2", "env.max_epochs=6")
    message = str(info.value)
    assert advice in message, message
    if failing == 1:
        assert "resume" not in message and not (run_dir / "checkpoint.pt").exists()
    else:
        assert f"esper run --resume {run_dir}" in message
