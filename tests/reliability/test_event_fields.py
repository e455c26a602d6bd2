"""``esper report`` on an events.jsonl with forged fields: values of the right type that
a run cannot have written (epoch -5 or 10**9, ``1e308`` taken as a whole number,
negative parameters, a stage ``"x"``, a host growth that never started) were drawn
without a word. Each is now refused in one line naming the file, the line and the field,
exit code 2, and nothing is written into the run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.run.lock import LOCK_FILE
from esper_core.run.telemetry import (
    HostGrowthFossilized,
    HostGrowthStageChanged,
    HostGrowthStarted,
    dumps,
)
from tests.plugin_set import plugin_manager
from tests.plugins.esper_telemetry.helpers import synthetic_batches

COMMON: dict[str, Any] = {"env": 0, "episode": 0, "growth_id": "width-0", "operator": "width"}
# Lines 2..4 of the file: a width growth of env 0 in episode 0, after run_started (line 1).
GROWTH = [
    HostGrowthStarted(
        **COMMON,
        epoch=1,
        plan="stage 0 -> 16",
        widths_before={"stage0": 4},
        widths_after={"stage0": 16},
        params_before=1702,
        params_after=24058,
        tempo=1,
        curve="linear",
    ),
    HostGrowthStageChanged(**COMMON, epoch=2, from_stage="BLENDING", to_stage="HOLDING"),
    HostGrowthFossilized(
        **COMMON, epoch=3, started_epoch=1, params_before=1702, params_after=24058
    ),
]
START, STAGE, FOSSIL = 2, 3, 4


def lines() -> list[dict[str, Any]]:
    events = [e for batch in synthetic_batches(n_envs=1, episodes=2, max_epochs=4) for e in batch]
    return [json.loads(dumps(e)) for e in [events[0], *GROWTH, *events[1:]]]


def write(run_dir: Path, records: list[dict[str, Any]]) -> None:
    run_dir.mkdir()
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)
    (run_dir / "events.jsonl").write_text(text)


def contents(run_dir: Path) -> dict[str, bytes]:
    """The run directory's files but the lock file (a run directory has one; it stays)."""
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != LOCK_FILE}


def esper(*args: str) -> tuple[int, str]:
    group, pm = build_cli(plugin_manager())
    result = CliRunner().invoke(group, list(args), obj={"pm": pm})
    return result.exit_code, result.output


# (line, field, forged value); the line's event is named by its kind in the message.
FORGED = [
    (START, "epoch", -5),
    (START, "epoch", 10**9),
    (START, "epoch", 1e308),
    (START, "params_before", -5),
    (START, "params_after", -5),
    (START, "tempo", -5),
    (START, "growth_id", "x"),
    (START, "curve", "x"),
    (START, "time", float("nan")),
    (STAGE, "epoch", -5),
    (STAGE, "epoch", 10**9),
    (STAGE, "to_stage", "x"),
    (STAGE, "from_stage", "x"),
    (STAGE, "growth_id", "width-7"),
    (FOSSIL, "epoch", 1e308),
    (FOSSIL, "started_epoch", -5),
    (FOSSIL, "started_epoch", 10**9),
    (FOSSIL, "params_after", -5),
    (FOSSIL, "growth_id", "x"),
    (FOSSIL + 1, "params", -5),  # a seed_germinated
    (FOSSIL + 2, "epoch", 10**9),  # the first epoch_completed
    (FOSSIL + 2, "train_flops", -5),
]


@pytest.mark.parametrize(
    ("line", "name", "value"), FORGED, ids=[f"{n}={v!r}" for _, n, v in FORGED]
)
def test_a_forged_event_field_is_refused_in_one_line(
    tmp_path: Path, line: int, name: str, value: Any
) -> None:
    records = lines()
    records[line - 1][name] = value
    run_dir = tmp_path / "run"
    write(run_dir, records)
    before = contents(run_dir)
    code, output = esper("report", str(run_dir))
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output, output
    kind = records[line - 1]["kind"]
    assert f"{run_dir / 'events.jsonl'}:{line}: {kind}.{name} = " in output, output
    assert "events file is damaged" in output and "intact copy" in output, output
    assert contents(run_dir) == before


@pytest.mark.parametrize("how", ["dropped", "doubled"])
def test_a_host_growth_start_dropped_or_doubled_is_refused(tmp_path: Path, how: str) -> None:
    records = lines()
    if how == "dropped":
        del records[START - 1]
    else:
        records.insert(START, records[START - 1])
    run_dir = tmp_path / "run"
    write(run_dir, records)
    code, output = esper("report", str(run_dir))
    assert code == 2, output
    assert f"events.jsonl:{START + (how == 'doubled')}: host_growth_" in output, output
    assert ".growth_id = 'width-0'" in output and "damaged" in output, output
    assert list(contents(run_dir)) == ["events.jsonl"]


def test_the_intact_file_is_reported(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write(run_dir, lines())
    code, output = esper("report", str(run_dir), "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "width-0" in (tmp_path / "out" / "report.md").read_text()
