"""What the cell-runner tests share: a 2 policies x 2 seeds study on the tiny task, an
`esper` that loads exactly the plugins the cells load, the study's reference results and
results.json made comparable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esper_core.plugins import PluginManager
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_COMPONENTS

STUDY = [
    "compare",
    *FAKE_COMPONENTS,  # --policy scripted
    "--plugin",
    "policies.wait",
    "--seeds",
    # Two seeds: four cells, so --jobs 2 (RUNNER_JOBS) still refills the runner's slots
    # once; every cell more costs a process start-up under the slurm runner.
    "2",
    "--max-epochs",
    "3",
    "--set",
    "run.telemetry=[]",
    "--set",
    "lifecycle.min_training_epochs=1",
    "--quiet",
]
# The runner under test runs two cells at a time.
RUNNER_JOBS = ["--jobs", "2"]


def esper_with(runner_plugin: str) -> Callable[..., Any]:
    """`esper` in this process with the runner's plugin and no autoloading (a cell must see
    the blueprints its experiment was validated with)."""
    from click.testing import CliRunner

    from esper_cli.main import build_cli

    group, pm = build_cli(PluginManager(extra=[runner_plugin], autoload=False))

    def call(*args: str) -> Any:
        return CliRunner().invoke(group, list(args), obj={"pm": pm})

    return call


def reference(out: Path) -> Any:
    """The study's results.json in ``out``, its cells run one after another in this process
    (tests/inline_runner.py): each through the run_cell every runner calls, with the config
    every runner is handed (torch threads included), so the results are the ones a correct
    runner gives. The local runner's pool of spawned interpreters gives the same file after
    seconds of imports (19 s against 3 s for the cells here, 2026-11-29)."""
    return esper_with(INLINE_RUNNER)(*STUDY, "--runner", "inline", "--out", str(out))


def stable_results(root: Path) -> dict[str, Any]:
    """results.json without wall-clock times, run directories relative to the experiment's."""
    data = json.loads((root / "results.json").read_text(encoding="utf-8"))
    for row in data["rows"]:
        row["metrics"].pop("wall_time")
    for cell in data["cells"]:
        cell.pop("wall_time")
        cell["run_dir"] = str(Path(cell["run_dir"]).relative_to(root))
    return data
