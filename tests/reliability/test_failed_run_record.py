"""A failed run leaves a record that says so, and why.

``summary.json`` marks a finished run (DESIGN.md's run directory is the contract between
run, report and compare, and compare takes a summary as a finished cell), so a failed run
writes none. Its record is ``events.jsonl``: the last event is ``run_finished`` with status
``failed`` and the line the CLI printed; ``esper report`` says the run failed and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.plugin_set import write_broken_plugin
from tests.reliability.test_run_faults import one_line_error, run_cli

JSONL = 'run.telemetry=["jsonl"]'


def last_event(run_dir: Path) -> dict[str, Any]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    event: dict[str, Any] = json.loads(lines[-1])
    return event


def test_a_failed_run_records_why_and_report_says_it(invoke: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    line = one_line_error(
        run_cli(invoke, run_dir, JSONL, 'tasks.faulty.fault="oom"', "tasks.faulty.at_epoch=6")
    )
    reason = line.removeprefix("error: ")
    assert "out of device memory" in reason
    event = last_event(run_dir)
    assert (event["kind"], event["status"], event["error"]) == ("run_finished", "failed", reason)
    assert not (run_dir / "summary.json").exists()  # compare would take it as finished

    result = invoke("report", str(run_dir))
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"{run_dir}: the run failed: {reason}" in result.stderr.splitlines()
    report = (run_dir / "report.md").read_text()
    assert f"- **status**: failed ({reason}) after " in report


def test_report_on_a_run_that_failed_before_its_first_epoch_says_why(
    invoke: Any, tmp_path: Path
) -> None:
    plugin = write_broken_plugin(tmp_path / "broken.py", "tasks", "faulty", "loss", "no loss")
    run_dir = tmp_path / "r"
    sets = (JSONL, "run.task=broken")
    line = one_line_error(run_cli(invoke, run_dir, *sets, plugins=(str(plugin),)))
    result = invoke("report", str(run_dir))
    assert result.exit_code == 2
    shown = result.stderr.strip()
    assert shown.startswith("error: ") and "holds no completed epoch" in shown, shown
    assert f"the run failed: {line.removeprefix('error: ')}" in shown
    assert "no loss" in shown and "\n" not in shown


def test_report_on_a_completed_run_adds_no_outcome_line(invoke: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    assert run_cli(invoke, run_dir, JSONL, "env.max_epochs=3").exit_code == 0
    assert last_event(run_dir)["error"] == ""
    result = invoke("report", str(run_dir))
    assert result.exit_code == 0 and result.stderr == "", result.stderr


def test_report_on_a_run_that_never_finished_says_so(invoke: Any, tmp_path: Path) -> None:
    """A run killed with SIGKILL writes no run_finished: the report says it may be running
    or killed, and how to continue it."""
    run_dir = tmp_path / "r"
    assert run_cli(invoke, run_dir, JSONL, "env.max_epochs=3").exit_code == 0
    events = run_dir / "events.jsonl"
    events.write_text("".join(events.read_text().splitlines(keepends=True)[:-1]))
    result = invoke("report", str(run_dir))
    assert result.exit_code == 0
    assert "the run did not finish (events.jsonl has no run_finished event)" in result.stderr
    assert f"esper run --resume {run_dir} continues it" in result.stderr
