"""A search's runs that repeat another's settings are trained once.

``wait`` and the sweep's size of the same host (``sweep.w4``: the tiny task's default
width) try the same points on the same tuning seeds, and points that differ only in an
option of a policy ``wait`` does not use (``policies.scripted.seed``) are one run of
``wait``. Each is trained once and copied, and ``--dry-run`` lists the copies before
anything ran.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from esper_core.compare.comparison import CompareReport, compare, prepare
from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import SUMMARY
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_PLUGIN

PLUGINS = (FAKE_PLUGIN, "policies.wait")
EXPERIMENT = """
policies = ["wait"]
tasks = ["tiny"]
seeds = 2
baselines = ["size-sweep"]
resamples = 200

[[sweep.sizes]]
label = "w4"
options = { width = 4 }

[tuning]
seeds = [100]
[tuning.grid]
"env.batch_size" = [8, 16]
"policies.scripted.seed" = [0, 1]

[config]
run = { reward = "acc_delta", telemetry = [], threads = 1 }
env = { max_epochs = 1 }
"""
# Grid order, the last key fastest: (8, 0), (8, 1), (16, 0), (16, 1). wait trains points 0
# and 2 (1 and 3 repeat them); every point of sweep.w4 is wait's; so is each evaluation
# cell of sweep.w4.
POINTS = 4
TRAINED_POINTS = (0, 2)
ORIGINAL = {0: 0, 1: 0, 2: 2, 3: 2}
SEEDS = (0, 1)
TRAINED = len(TRAINED_POINTS) + len(SEEDS)
COPIES = 2 * POINTS - len(TRAINED_POINTS) + len(SEEDS)


def experiment():  # type: ignore[no-untyped-def]
    spec = parse_experiment(tomllib.loads(EXPERIMENT))
    return build_experiment(spec, shared_config(spec), plugins=PLUGINS)


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return PluginManager(extra=[*PLUGINS, INLINE_RUNNER], autoload=False)


def test_the_plan_counts_each_repeated_run_once(pm: PluginManager, tmp_path: Path) -> None:
    _, _, plan = prepare(experiment(), pm, tmp_path / "out")
    assert (plan.total, plan.tuning, plan.duplicates) == (TRAINED, len(TRAINED_POINTS), COPIES)


@pytest.fixture(scope="module")
def done(pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> CompareReport:
    out = tmp_path_factory.mktemp("copies")
    report = compare(experiment(), pm, out, notify=lambda _m: None, runner="inline")
    assert not report.failed and not report.results.missing
    return report


def _summary(directory: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((directory / SUMMARY).read_text(encoding="utf-8"))


def test_each_repeated_run_is_trained_once_and_copied(done: CompareReport) -> None:
    out = done.directory
    trained = sorted(
        Path(o.directory).relative_to(out).as_posix()
        for o in done.outcomes
        if o.status == "completed"
    )
    assert trained == sorted(
        [f"tuning/cells/tiny/wait/point-{k}/seed-100" for k in TRAINED_POINTS]
        + [f"cells/tiny/wait/seed-{s}" for s in SEEDS]
    )
    tuning = out / "tuning" / "cells" / "tiny"
    for k, original in ORIGINAL.items():
        source = _summary(tuning / "wait" / f"point-{original}" / "seed-100")
        assert _summary(tuning / "wait" / f"point-{k}" / "seed-100") == source
        assert _summary(tuning / "sweep.w4" / f"point-{k}" / "seed-100") == source
    for seed in SEEDS:
        cells = out / "cells" / "tiny"
        assert _summary(cells / "sweep.w4" / f"seed-{seed}") == _summary(
            cells / "wait" / f"seed-{seed}"
        )
    # The copies are read like runs: every arm's search is complete and chose alike.
    tuned = done.results.tuning
    assert tuned is not None and tuned.finished
    (wait,) = [a for a in tuned.arms if a.arm == "wait"]
    (size,) = [a for a in tuned.arms if a.arm == "sweep.w4"]
    assert wait.points == size.points and wait.chosen == size.chosen
    assert {(c.policy, c.seed) for c in done.results.cells} == {
        (p, s) for p in ("wait", "sweep.w4") for s in SEEDS
    }


def test_a_rerun_runs_nothing(done: CompareReport, pm: PluginManager) -> None:
    _, _, plan = prepare(experiment(), pm, done.directory)
    assert plan.total == plan.completed == TRAINED and plan.stale == 0


def test_dry_run_lists_the_copies(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.toml"
    path.write_text(EXPERIMENT)
    plugins = ("--plugin", FAKE_PLUGIN, "--plugin", "policies.wait")
    result = invoke("compare", str(path), *plugins, "--out", str(tmp_path / "o"), "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"experiment OK: {TRAINED} runs")
    for k, original in ORIGINAL.items():
        copy = f"same settings as tuning tiny/wait point {original}: copied, not run"
        wait = f"  tuning       tiny / wait point {k} / random seeds 100: "
        assert wait + ("to run" if k == original else copy) in lines
        assert f"  tuning       tiny / sweep.w4 point {k} / random seeds 100: {copy}" in lines
    assert (
        "  evaluation   tiny / sweep.w4 / random seeds 0, 1: same settings as tiny/wait: copied, not run"
    ) in lines
    assert lines[-1].startswith(
        f"{TRAINED} runs ({len(TRAINED_POINTS)} of them tuning runs; {TRAINED} to run), "
        f"{COPIES} copies of another run's settings"
    )
