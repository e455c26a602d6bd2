"""What a run's events.jsonl says is checked the same way by every reader,
and its text is text in report.md.

``esper compare`` read a finished cell's events (its growth paths) without the checks
``esper report`` applies: a ``val_acc`` of 1e300 reached results.json and the Pareto
plot. Both now go through :func:`esper_core.run.event_fields.check_fields`, which also
bounds an epoch's accuracies (percentages) and losses (>= 0). ``esper report`` copied a
forged growth plan into report.md as it was: a ``<script>`` tag, a heading of its own.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from esper_core.errors import RunDirError
from tests.reliability.test_event_fields import START, contents, esper, lines, write

FORGED_PLAN = "stage 0 -> 16\n# Injected heading\n<script>alert(1)</script> [x](http://e)"


def _epoch_line(records: list[dict[str, object]]) -> int:
    return next(i for i, r in enumerate(records) if r["kind"] == "epoch_completed")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("val_acc", 1e300, "a percentage in [0, 100]"),
        ("train_acc", -1.0, "a percentage in [0, 100]"),
        ("test_acc", math.nan, "a percentage in [0, 100]"),
        ("val_loss", -0.5, "a loss >= 0"),
    ],
)
def test_report_refuses_an_epoch_score_no_run_writes(
    tmp_path: Path, field: str, value: float, expected: str
) -> None:
    records = lines()
    records[_epoch_line(records)][field] = value
    run_dir = tmp_path / "run"
    write(run_dir, records)
    code, output = esper("report", str(run_dir))
    assert code == 2, output
    assert f"epoch_completed.{field} = " in output and expected in output, output
    assert list(contents(run_dir)) == ["events.jsonl"]


def test_compare_reads_a_cells_events_with_the_same_checks(tmp_path: Path) -> None:
    from esper_core.compare.growth_paths import read_episode

    records = lines()
    i = _epoch_line(records)
    records[i]["val_acc"] = 1e300
    run_dir = tmp_path / "cell"
    write(run_dir, records)
    with pytest.raises(RunDirError, match=rf"events\.jsonl:{i + 1}: epoch_completed\.val_acc"):
        read_episode(run_dir)
    # The epochs the checks bound come from the run's own run_started (max_epochs 4).
    records[i]["val_acc"] = 50.0
    records[i]["epoch"] = 10**6
    (run_dir / "events.jsonl").unlink()
    run_dir.rmdir()
    write(run_dir, records)
    with pytest.raises(RunDirError, match=r"epoch_completed\.epoch = 1000000"):
        read_episode(run_dir)


def test_report_md_shows_a_forged_growth_plan_as_text(tmp_path: Path) -> None:
    records = lines()
    records[START - 1]["plan"] = FORGED_PLAN
    records[0]["task"] = "digits<img src=x onerror=alert(1)>"
    run_dir = tmp_path / "run"
    write(run_dir, records)
    code, output = esper("report", str(run_dir), "--out", str(tmp_path / "out"))
    assert code == 0, output
    report = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in report and "<img" not in report
    # A "<" that could open a tag is an entity; one that cannot (a reason's "x < y") and
    # a ">" inside a line stay as written.
    assert "&lt;script>alert(1)&lt;/script>" in report
    assert "<" not in report.replace("&lt;", "").replace(" < ", "")
    assert "\n# Injected" not in report and "16 # Injected heading" in report
    assert "\\[x\\](http://e)" in report  # no link either
    headings = [line for line in report.splitlines() if line.startswith("# ")]
    assert headings == ["# Esper run report: synthetic"]
