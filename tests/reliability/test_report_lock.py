"""``esper report`` writes into a run directory only while no run holds it;
``--out`` elsewhere still reads a running run."""

from __future__ import annotations

from pathlib import Path

from esper_core.run.lock import RunDirLock
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.helpers import run_tiny
from tests.reliability.cli_runs import failed_in_one_line


def test_report_refuses_a_run_directory_another_process_holds(
    invoke: Invoke, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, ["jsonl"], "env.max_epochs=3")
    before = sorted(p.name for p in run_dir.iterdir())
    held = RunDirLock.acquire(run_dir)  # as a running `esper run --resume` would
    try:
        line = failed_in_one_line(invoke("report", str(run_dir), "--dpi", "40"))
        assert f"{run_dir} is in use by another Esper process" in line
        assert sorted(p.name for p in run_dir.iterdir()) == before
        elsewhere = tmp_path / "plots"
        result = invoke("report", str(run_dir), "--out", str(elsewhere), "--dpi", "40")
        assert result.exit_code == 0, result.output
        assert (elsewhere / "report.md").is_file()
    finally:
        held.release()
    result = invoke("report", str(run_dir), "--dpi", "40")
    assert result.exit_code == 0 and (run_dir / "report.md").is_file(), result.output
