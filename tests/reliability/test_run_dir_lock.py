"""One writer per run directory. A second run on the same --out is refused in
one line naming the holder; the lock dies with its process, however it ends."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from esper_core.errors import RunDirError
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.helpers import run_tiny
from tests.reliability.cli_runs import TINY, esper, failed_in_one_line


def test_a_second_run_on_the_same_out_is_refused_while_the_first_runs(
    invoke: Invoke, tmp_path: Path
) -> None:
    out = tmp_path / "shared"
    first = esper("run", *TINY, "--max-epochs", "5000", "--out", str(out))
    try:
        deadline = time.time() + 120
        while not (out / "config.toml").exists():  # the first run holds the lock by now
            assert first.poll() is None and time.time() < deadline, first.communicate()[1]
            time.sleep(0.05)
        # The second run in this process: the holder is another process either way, and an
        # interpreter start costs seconds.
        second = invoke("run", *TINY, "--max-epochs", "3", "--out", str(out))
        line = failed_in_one_line(second)
        assert second.stdout == ""
        assert f"in use by another Esper process (pid {first.pid})" in line
        assert first.poll() is None, "the first run should still be running"
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    from esper_core.run.lock import LOCK_FILE, RunDirLock

    # SIGKILL released the lock: the file still names the dead process, yet it is free.
    assert (out / LOCK_FILE).read_text().strip() == str(first.pid)
    RunDirLock.acquire(out).release()


def test_the_lock_refuses_a_second_writer_in_the_same_process(tmp_path: Path) -> None:
    from esper_core.run.lock import LOCK_FILE, RunDirLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    held = RunDirLock.acquire(run_dir)
    try:
        with pytest.raises(RunDirError, match="in use by another Esper process"):
            run_tiny(run_dir, [])
        assert list(run_dir.iterdir()) == [run_dir / LOCK_FILE], "the refused run wrote files"
    finally:
        held.release()
    summary = run_tiny(run_dir, [], "env.max_epochs=2")  # released: the run may go ahead
    assert summary["status"] == "completed"
