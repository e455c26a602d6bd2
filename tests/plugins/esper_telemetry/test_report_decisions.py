"""report.md lists each decision with the policy's reason (issue 34, item 6)."""

from __future__ import annotations

from pathlib import Path

import attrs
from esper_telemetry.jsonl import JsonlBackend, JsonlOptions
from esper_telemetry.report import load_run
from esper_telemetry.report.markdown import render

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import epoch_event, run_started

WAITING = "no capacity limit: loss 0.310 < 0.8 x chance 2.303"
GROWING = "r0c0: cnn/res: capacity limit: loss 2.100 falls 0.5%/epoch < 5.0%, chance 2.303"


def write(run_dir: Path, reasons: list[tuple[str, str]]) -> None:
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=run_dir, quiet=True))
    backend.handle([run_started(n_envs=1, episodes=1, max_epochs=len(reasons))])
    for epoch, (action, reason) in enumerate(reasons, start=1):
        backend.handle([attrs.evolve(epoch_event(0, 0, epoch), action=action, reason=reason)])
    backend.close()


def test_report_md_lists_each_run_of_decisions_with_its_reason(tmp_path: Path) -> None:
    germinate = "GERMINATE r0c0 cnn/res linear_add tempo=5"
    write(tmp_path, [("WAIT", WAITING)] * 3 + [(germinate, GROWING)] + [("WAIT", WAITING)])
    report = render(load_run(tmp_path), [])
    section = report.split("## Decisions", 1)[1]
    assert f"| 1–3 | WAIT | {WAITING} |" in section
    assert f"| 4 | {germinate} | {GROWING} |" in section
    assert f"| 5 | WAIT | {WAITING} |" in section


def test_a_run_without_reasons_has_no_decisions_section(tmp_path: Path) -> None:
    write(tmp_path, [("WAIT", "")] * 3)  # events of schema 1, or a policy that gives none
    assert "## Decisions" not in render(load_run(tmp_path), [])
