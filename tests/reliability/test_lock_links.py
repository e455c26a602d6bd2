"""The lock file is opened like every run file is written. A symbolic link
planted at ``RUN/.esper.lock`` (out of the run directory, or to a file inside it) and a
FIFO in its place are refused in one line; the file a link points to keeps its bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from esper_core.errors import RunDirError
from esper_core.run.lock import LOCK_FILE, RunDirLock
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.helpers import resume_tiny, run_tiny
from tests.reliability.cli_runs import TINY, failed_in_one_line


def test_a_link_out_of_the_run_directory_is_not_followed(invoke: Invoke, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).symlink_to(victim)
    result = invoke("run", *TINY, "--max-epochs", "1", "--out", str(run_dir))
    line = failed_in_one_line(result)
    assert "outside the run directory" in line
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_FILE], "the refused run wrote files"


def test_a_link_planted_before_a_resume_is_not_followed(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_tiny(run_dir, [], "env.max_epochs=2")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run_dir / LOCK_FILE).unlink()
    (run_dir / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunDirError, match="outside the run directory"):
        resume_tiny(run_dir)
    assert victim.read_text() == "precious\n"


def test_a_link_to_a_run_file_is_not_followed_either(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    kept = run_dir / "notes.txt"
    kept.write_text("mine\n")
    (run_dir / LOCK_FILE).symlink_to("notes.txt")
    with pytest.raises(RunDirError, match=r"\.esper\.lock is a symbolic link"):
        RunDirLock.acquire(run_dir)
    assert kept.read_text() == "mine\n"


def test_a_fifo_in_place_of_the_lock_file_is_refused_without_blocking(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    os.mkfifo(run_dir / LOCK_FILE)
    with pytest.raises(RunDirError, match="is a special file"):
        RunDirLock.acquire(run_dir)
