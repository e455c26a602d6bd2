"""The estimate of ``esper compare --dry-run``: a fresh experiment is priced from each
task's benchmark (its measured seconds per sample and per GFLOP), and a host size not yet
run is scaled from the task's finished runs by its own samples and FLOPs (a larger host
was once given its smaller siblings' seconds per epoch: charlm's ``base`` was estimated
at about a minute a run and took two)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from esper_tasks.glyphs import GlyphsTask

from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.overhead import COMMAND_SECONDS, POOL_SECONDS, overhead
from esper_core.compare.plan import plan_cells
from esper_core.compare.preview import (
    BENCHMARK,
    MEASURED,
    SCALED,
    Group,
    Preview,
    preview,
    preview_lines,
)
from esper_core.compare.run_cost import CellCosts
from esper_core.config import dump_toml
from esper_core.plugins import PluginManager
from esper_core.run.run_dir import CONFIG, SUMMARY

PLUGINS = ("tasks.glyphs", "policies.wait", "rewards.pbrs")


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    return PluginManager(extra=list(PLUGINS), autoload=False)


def experiment() -> Any:
    data = {
        "policies": ["wait"],
        "tasks": [{"name": "glyphs", "options": {"preset": "tiny"}}],
        "seeds": 2,
        "sweep": {"sizes": [{"label": "large", "options": {"preset": "large"}}]},
        "baselines": ["size-sweep"],
        "config": {"run": {"telemetry": [], "reward": "pbrs"}, "env": {"max_epochs": 4}},
    }
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec), plugins=PLUGINS)


def groups(p: Preview) -> dict[str, Any]:
    return {g.arm: g for g in p.groups}


def test_a_fresh_experiment_is_priced_by_each_tasks_benchmark(
    pm: PluginManager, tmp_path: Path
) -> None:
    p = preview(experiment(), pm, tmp_path / "fresh", threads=1, jobs=1)
    cells = {c.policy: c for c in plan_cells(experiment(), pm, 1)}
    cost = GlyphsTask.measured_cost
    for arm, group in groups(p).items():
        work = CellCosts(pm)(cells[arm].config)
        assert work is not None
        assert group.basis == BENCHMARK
        assert group.seconds == pytest.approx(work.work.seconds(cost))
    # The large host computes 50 times the tiny one's FLOPs: it is not priced alike.
    assert groups(p)["sweep.large"].seconds > 2 * groups(p)["wait"].seconds
    # Two runs of each group, one job, and the command's own start, checks and figures.
    assert p.estimate == pytest.approx(2 * sum(g.seconds for g in p.groups) + overhead(1))
    summary = preview_lines(p)[-1]
    assert "an estimate from each task's benchmark" in summary and "no estimate" not in summary


def finish(cell: Any, root: Path, seconds: float) -> None:
    """A finished cell as a run leaves it, as far as the preview reads it."""
    directory = cell.directory(root)
    directory.mkdir(parents=True)
    (directory / CONFIG).write_text(dump_toml(cell.config), encoding="utf-8")
    summary = {"status": "completed", "wall_time": seconds}
    (directory / SUMMARY).write_text(json.dumps(summary), encoding="utf-8")


def test_a_size_not_yet_run_is_scaled_by_its_flops(pm: PluginManager, tmp_path: Path) -> None:
    root = tmp_path / "half"
    cells = plan_cells(experiment(), pm, 1)
    for cell in cells:
        if cell.policy == "wait":
            finish(cell, root, 30.0)
    p = groups(preview(experiment(), pm, root, threads=1, jobs=1))
    assert p["wait"].basis == MEASURED and p["wait"].seconds == 30.0
    large = p["sweep.large"]
    assert large.basis == SCALED
    # This machine ran the tiny host at some multiple of its benchmark's prediction; the
    # large one is predicted by the benchmark's split and scaled by that same multiple.
    costs = CellCosts(pm)
    first = {c.policy: costs(c.config) for c in cells}
    predicted = {k: v.work.seconds(GlyphsTask.measured_cost) for k, v in first.items() if v}
    assert large.seconds == pytest.approx(30.0 * predicted["sweep.large"] / predicted["wait"])
    # Not the tiny host's seconds per epoch, which underestimated every larger host.
    assert large.seconds > 2 * 30.0


def test_the_estimate_is_its_runs_jobs_at_a_time_and_the_commands_own_overhead() -> None:
    """The parts of the estimate: each run left at its seconds, ``jobs`` at a time; the
    command's start, checks and figures once; one start of workers per pool (the search's,
    the evaluation's, the static-final runs'). A run's wall_time and the tasks' benchmarks
    start in a running worker: the comparisons they missed this by took 3 to 12 times
    their estimate."""
    tuning = Group("tuning", "digits", "wait point 0", (100, 101), 0, seconds=10.0)
    evaluation = Group("evaluation", "digits", "wait", (0, 1, 2), 1, seconds=4.0)
    done = Group("evaluation", "digits", "heuristic", (0, 1, 2), 3, seconds=99.0)
    assert COMMAND_SECONDS > 0 and POOL_SECONDS > 0
    p = Preview((tuning, evaluation, done), jobs=2)
    assert p.pools == 2
    runs = (2 * 10.0 + 2 * 4.0) / 2
    assert p.estimate == pytest.approx(runs + COMMAND_SECONDS + 2 * POOL_SECONDS)
    # Nothing left to run: no command overhead to estimate.
    assert Preview((done,), jobs=1).estimate is None
    assert overhead(0) == 0.0
