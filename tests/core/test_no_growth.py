"""A comparison in which no arm grew says so and why; a run says why it grew nothing; the
progress lines of a comparison carry a measured time left."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from esper_core.compare.cell_result import CellResult
from esper_core.compare.eta import Eta
from esper_core.compare.no_growth import no_growth
from esper_core.compare.results import ComparisonResults
from esper_core.compare.tables import to_markdown
from esper_core.config import load_config
from esper_core.run.api import run
from esper_core.run.summary import growth_verdict
from tests.plugin_set import plugin_manager

TOO_LATE = "the heuristic's trigger first fired at epoch 9 with 1 epochs left"


def _cell(policy: str, seed: int, **fields: object) -> CellResult:
    base: dict = {
        "task": "digits",
        "policy": policy,
        "seed": seed,
        "final_test_acc": 80.0,
        "params_added": 0.0,
        "seeds_fossilized": 0,
        "seeds_pruned": 0,
        "wall_time": 1.0,
        "run_dir": f"cells/{policy}/{seed}",
    }
    return CellResult(**{**base, **fields})  # type: ignore[arg-type]


def test_no_growth_says_why_or_nothing_when_an_arm_grew() -> None:
    waits = [_cell("wait", s) for s in range(3)]
    late = [_cell("heuristic", s, growth_note=TOO_LATE) for s in range(2)]
    silent = [_cell("heuristic", 2)]
    assert no_growth(["heuristic"], [*waits, *late, *silent]) == (
        f"No arm grew: heuristic germinated no seed in 3 run(s); in 2 of 3 run(s), {TOO_LATE}."
    )
    pruned = [_cell("heuristic", s, seeds_germinated=2, seeds_pruned=2) for s in range(2)]
    assert "germinated 4 seed(s) in 2 run(s) and pruned every one" in (
        no_growth(["heuristic"], pruned) or ""
    )
    grew = [*late, _cell("heuristic", 5, seeds_fossilized=1, params_added=300.0)]
    assert no_growth(["heuristic"], grew) is None
    assert no_growth([], waits) is None  # no arm can grow: nothing to say


def _results(note: str | None) -> ComparisonResults:
    return ComparisonResults(
        schema_version=7,
        tasks=["digits"],
        policies=["heuristic", "wait"],
        seeds=[0, 1],
        baseline=None,
        confidence=0.95,
        resamples=100,
        bootstrap_seed=0,
        rows=[],
        cells=[],
        missing=[],
        no_growth=note,
    )


def test_results_md_and_the_terminal_say_no_arm_grew() -> None:
    from esper_cli.compare import print_tables

    note = f"No arm grew: heuristic germinated no seed in 2 run(s); in 2 of 2 run(s), {TOO_LATE}."
    markdown = to_markdown(_results(note)).splitlines()
    assert markdown[2] == f"**{note}**"  # right under the title
    assert not any("No arm grew" in line for line in to_markdown(_results(None)).splitlines())
    out = io.StringIO()
    print_tables(_results(note), Console(file=out, width=80))
    assert " ".join(out.getvalue().split()).endswith(note)


def test_a_run_too_short_for_the_heuristic_says_so_in_its_summary(tmp_path: Path) -> None:
    config = load_config(
        overrides=[
            "run.task=tiny",
            "run.policy=heuristic",
            "run.reward=acc_delta",
            "run.telemetry=[]",
            "run.threads=1",
            "env.max_epochs=2",
        ]
    )
    summary = run(config, plugin_manager("tests.fake_plugin"), run_dir=tmp_path / "r", quiet=True)
    assert summary["growth"].startswith(
        "no growth: no seed was germinated (the episode ended before the heuristic could "
        "germinate (it waits for min_epoch=2"
    )
    assert summary["episodes"][0]["growth_note"] is not None
    assert growth_verdict([{"seeds_germinated": 0}], []) == "no growth: no seed was germinated"


def _finished(directory: Path, seconds: float) -> Path:
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps({"wall_time": seconds}))
    return directory


def test_the_time_left_is_measured_from_the_runs_finished_so_far(tmp_path: Path) -> None:
    eta = Eta(left=5, jobs=2)
    assert eta.describe() == "time left: measured once a run finishes"
    eta.finished(tmp_path / "copied", "skipped")  # a copy took no time: not measured
    assert eta.seconds is None and eta.left == 4
    eta.finished(_finished(tmp_path / "a", 100.0), "completed")
    eta.finished(_finished(tmp_path / "b", 140.0), "completed")
    assert eta.left == 2
    assert eta.seconds == 120.0  # 2 runs left, 2 at a time: one round of the mean
    assert eta.describe() == "about 2 min left"
    eta.finished(tmp_path / "c", "interrupted")  # not a finished turn
    assert eta.left == 2
    eta.finished(_finished(tmp_path / "d", 60.0), "completed")
    eta.finished(tmp_path / "e", "failed")
    assert eta.describe() == "done"
