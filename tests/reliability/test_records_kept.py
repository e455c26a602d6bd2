"""A telemetry backend that cannot write fails the run instead of silently
dropping records, and a resume never cuts what it cannot prove came after the checkpoint."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
from esper_telemetry.files import AppendFile
from esper_telemetry.jsonl import JsonlBackend

from esper_core.errors import RunDirError
from esper_core.run.checkpoint import DiskFullError, load_checkpoint
from tests.plugins.esper_telemetry.faulty_plugin import CRASH_FILE
from tests.plugins.esper_telemetry.helpers import jsonl_records, resume_tiny, run_tiny

SETS = ("run.checkpoint_every=5", "run.episodes=2")


def crash_at(run_dir: Path, epoch: int) -> None:
    """Run with the ``crash`` backend killing the run in ``epoch`` (checkpoint at 5)."""
    run_dir.mkdir(parents=True)
    (run_dir / CRASH_FILE).write_text(str(epoch))
    with pytest.raises(BaseException) as crash:
        run_tiny(run_dir, ["jsonl", "crash"], *SETS)
    assert type(crash.value).__name__ == "SimulatedCrash"


def test_a_full_disk_under_the_event_log_fails_the_run_and_a_resume_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = tmp_path / "whole" / "run"
    run_tiny(whole, ["jsonl"], *SETS)

    real_flush = AppendFile.flush
    failures = []

    def disk_full_once(self: AppendFile, fsync: bool | None = None) -> None:
        # The disk is full for one write: the one carrying epoch 8 of the first episode.
        if not failures and any('"epoch":8,' in text for text in self._pending):
            failures.append(self.path)
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real_flush(self, fsync)

    cut = tmp_path / "cut" / "run"
    monkeypatch.setattr(AppendFile, "flush", disk_full_once)
    with pytest.raises(DiskFullError, match=r"no space left.*events\.jsonl.*resume") as info:
        run_tiny(cut, ["jsonl"], *SETS)
    assert "\n" not in str(info.value)
    assert failures and not (cut / "summary.json").exists()
    assert load_checkpoint(cut / "checkpoint.pt")["epoch"] == 5
    monkeypatch.setattr(AppendFile, "flush", real_flush)  # the disk has space again

    summary = resume_tiny(cut)
    assert summary["status"] == "completed"
    records = jsonl_records(cut / "events.jsonl")
    assert records[0]["kind"] == "run_started"
    assert records == jsonl_records(whole / "events.jsonl")


def test_a_checkpoint_offset_beyond_the_event_log_is_refused_and_nothing_is_cut(
    tmp_path: Path,
) -> None:
    cut = tmp_path / "cut" / "run"
    crash_at(cut, 8)
    events = cut / "events.jsonl"
    offset = load_checkpoint(cut / "checkpoint.pt")["telemetry"]["backends"]["jsonl"]["offset"]
    events.write_bytes(events.read_bytes()[: offset // 2])  # lost after the checkpoint
    before = events.read_bytes()
    with pytest.raises(RunDirError, match=rf"events\.jsonl has only {len(before)} bytes"):
        resume_tiny(cut)
    assert events.read_bytes() == before
    assert not (cut / "summary.json").exists()


def test_a_backend_disabled_before_the_checkpoint_keeps_its_file_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_handle = JsonlBackend.handle

    def buggy(self: JsonlBackend, events: Any) -> None:
        if any(getattr(e, "epoch", 0) == 3 for e in events):
            raise RuntimeError("a bug in the backend")
        real_handle(self, events)

    monkeypatch.setattr(JsonlBackend, "handle", buggy)
    cut = tmp_path / "cut" / "run"
    crash_at(cut, 8)
    monkeypatch.setattr(JsonlBackend, "handle", real_handle)
    events = cut / "events.jsonl"
    before = events.read_bytes()
    assert b'"kind":"run_started"' in before

    summary = resume_tiny(cut)
    assert summary["status"] == "completed"
    assert events.read_bytes() == before, "the resume rewrote a file it had no position for"
    assert "a bug in the backend" in summary["telemetry_disabled"]["jsonl"]
