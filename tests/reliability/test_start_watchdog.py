"""A ``tasks.dataset`` data function that never returns hung the run
forever, even with ``run.epoch_timeout`` set: the watchdog watched the run's loop, not
its start. The data function's call is bounded now: one line naming the user's function,
exit 2, no run directory left behind."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import Invoke
from tests.plugins.esper_tasks.test_dataset_task import MODULE
from tests.reliability.cli_runs import failed_in_one_line


def test_a_data_function_that_never_returns_is_stopped(invoke: Invoke, tmp_path: Path) -> None:
    started = time.monotonic()
    result = invoke(
        "run", "--task", "dataset", "--quiet", "--max-epochs", "1",
        "--set", f"tasks.dataset.model={MODULE}:small_cnn",
        "--set", 'tasks.dataset.slots=["0"]',
        "--set", f"tasks.dataset.data={MODULE}:hangs",
        "--set", "run.telemetry=[]", "--set", "run.epoch_timeout=2",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    line = failed_in_one_line(result)
    assert time.monotonic() - started < 60
    assert "loading the data (tasks.dataset.data), in the run's start" in line, line
    assert "run.epoch_timeout = 2 s" in line, line
    assert f"{MODULE}:hangs was running (run by plugin tasks.dataset's" in line, line
    assert not (tmp_path / "r").exists()
