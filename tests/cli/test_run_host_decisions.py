"""``esper run`` records each epoch's decision as what the host does:
a run that widens its host reads WIDEN, the ramp and FOLD in events.jsonl (the console's
action column) and in report.md's Decisions, not WAIT throughout."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Invoke


def test_a_widening_run_names_the_growth_in_its_events_and_report(
    invoke: Invoke, tmp_path: Path
) -> None:
    run_dir = tmp_path / "r"
    result = invoke(
        "run", "--task", "digits", "--policy", "static", "--quiet", "--max-epochs", "5",
        "--set", "policies.static.widen_at=0.2", "--set", "policies.static.widen_tempo=3",
        "--set", 'run.telemetry=["jsonl"]', "--out", str(run_dir),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    said = [(e["action"], e["reason"]) for e in events if e["kind"] == "epoch_completed"]
    why = "policies.static: the seeds were fixed at birth, and the host widens at 0.2 of the run"
    assert said == [
        ("WAIT", why),
        ("WIDEN host x2", f"on schedule; {why}"),
        ("WAIT", f"host widening, ramp 2/3; {why}"),
        ("FOLD host widening", f"ramp 3/3 done, folded into the host; {why}"),
        ("WAIT", why),  # the last epoch's decision, recorded as every other
    ]
    result = invoke("report", str(run_dir))
    assert result.exit_code == 0, result.output
    decisions = (run_dir / "report.md").read_text().split("## Decisions", 1)[1]
    assert f"| 2 | WIDEN host x2 | on schedule; {why} |" in decisions
    assert f"| 4 | FOLD host widening | ramp 3/3 done, folded into the host; {why} |" in decisions


def test_a_deepening_the_host_cannot_stack_is_refused_naming_the_policys_option(
    invoke: Invoke, tmp_path: Path
) -> None:
    """glyphs' first stage has no channel-preserving conv to copy (G_stack); the
    heuristic's deepening by stacking is refused before the run starts, in one line that
    names the option a user of this policy sets."""
    run_dir = tmp_path / "r"
    result = invoke(
        "run", "--task", "glyphs", "--quiet", "--max-epochs", "2",
        "--set", 'policies.heuristic.host_growth="deepen"',
        "--set", 'policies.heuristic.host_growth_mode="stack"', "--out", str(run_dir),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert "run.policy 'heuristic' may grow the host so" in line
    assert 'mode "identity"' in line and "host_growth_mode" in line
    assert not (run_dir / "summary.json").exists()
