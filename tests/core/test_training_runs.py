"""A method trained in several independent runs: the ``checkpoints`` key, the crossed
bootstrap across training runs, and its section of the results (no cell is trained)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
from scipy import stats

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, write_results
from esper_core.compare.crossed_bootstrap import crossed_interval
from esper_core.compare.experiment import (
    ExperimentError,
    TrainingGroup,
    build_experiment,
    parse_experiment,
    shared_config,
)
from esper_core.compare.metric import LOSS
from esper_core.compare.plan import plan_cells
from esper_core.compare.results import ComparisonResults, aggregate, load_results
from esper_core.compare.stats import iqm_interval
from esper_core.converter import structure, unstructure
from esper_core.plugins import PluginManager

SHARED = {"run": {"reward": "acc_delta", "telemetry": []}, "env": {"max_epochs": 3}}
RUNS = ["runs/a/checkpoint.pt", "runs/b/checkpoint.pt", "runs/c/checkpoint.pt"]


def experiment_of(data: dict):  # type: ignore[no-untyped-def]
    spec = parse_experiment({"config": SHARED, **data})
    return build_experiment(spec, shared_config(spec))


# ---------------------------------------------------------------- the file


def test_checkpoints_expand_into_one_arm_per_training_run() -> None:
    experiment = experiment_of(
        {
            "policies": [
                "wait",
                {"name": "ppo", "checkpoints": RUNS, "options": {"deterministic": False}},
                {"name": "ppo", "label": "ppo-big", "checkpoints": RUNS[:2]},
            ],
            "baseline": "wait",
        }
    )
    arms = [(p.label, p.spec, p.name, p.options) for p in experiment.policies]
    assert arms == [
        ("wait", "wait", "wait", {}),
        ("ppo.run-1", "ppo:runs/a/checkpoint.pt", "ppo", {"deterministic": False}),
        ("ppo.run-2", "ppo:runs/b/checkpoint.pt", "ppo", {"deterministic": False}),
        ("ppo.run-3", "ppo:runs/c/checkpoint.pt", "ppo", {"deterministic": False}),
        ("ppo-big.run-1", "ppo:runs/a/checkpoint.pt", "ppo", {}),
        ("ppo-big.run-2", "ppo:runs/b/checkpoint.pt", "ppo", {}),
    ]
    assert experiment.training_groups == (
        TrainingGroup("ppo", ("ppo.run-1", "ppo.run-2", "ppo.run-3"), tuple(RUNS)),
        TrainingGroup("ppo-big", ("ppo-big.run-1", "ppo-big.run-2"), tuple(RUNS[:2])),
    )
    assert experiment_of({"policies": ["wait", "ppo:runs/a/checkpoint.pt"]}).training_groups == ()


@pytest.mark.parametrize(
    ("policies", "baseline", "expected"),
    [
        (
            [{"name": "ppo:runs/a/checkpoint.pt", "checkpoints": RUNS}],
            None,
            "policies[0].name: 'ppo:runs/a/checkpoint.pt' takes no argument with checkpoints; "
            'write name = "ppo"',
        ),
        (
            [{"name": "ppo", "checkpoints": RUNS[:1]}],
            None,
            "policies[0] (ppo): checkpoints lists 1 training run; list at least 2, or write "
            'name = "ppo:runs/a/checkpoint.pt" for one policy',
        ),
        (
            [{"name": "ppo", "checkpoints": [RUNS[0], RUNS[0]]}],
            None,
            "checkpoint 'runs/a/checkpoint.pt' is listed twice",
        ),
        (
            ["wait", {"name": "ppo", "checkpoints": RUNS}],
            "ppo",
            "baseline 'ppo' is a method trained in 3 runs, not one policy; name one policy",
        ),
        (
            [{"name": "wait", "label": "ppo"}, {"name": "ppo", "checkpoints": RUNS}],
            None,
            "label 'ppo' names both a method trained in several runs and a policy",
        ),
    ],
)
def test_a_wrong_training_group_is_one_line_saying_how_to_fix_it(
    policies: list, baseline: str | None, expected: str
) -> None:
    with pytest.raises(ExperimentError) as info:
        experiment_of(
            {"policies": policies, "baseline": baseline} if baseline else {"policies": policies}
        )
    (problem,) = info.value.problems
    assert expected in problem and "\n" not in problem


# ---------------------------------------------------------------- the statistics


def test_the_estimate_is_the_iqm_of_every_run_and_seed_pooled() -> None:
    runs = [[0.1, 0.5, 0.2, 0.9], [3.0, 0.4, 0.3, 0.6], [0.6, 0.7, 0.8, 0.05]]
    interval = crossed_interval(runs, 0.95, 500, 0)
    assert interval.estimate == pytest.approx(stats.trim_mean([v for r in runs for v in r], 0.25))
    assert interval.low is not None and interval.high is not None
    assert interval.low <= interval.estimate <= interval.high
    assert crossed_interval(runs, 0.95, 500, 0) == interval  # seeded
    assert crossed_interval(runs[:1], 0.95, 500, 0).low is None  # one run: no spread known


def _one_level_width(runs: list[list[float]]) -> float:
    interval = iqm_interval([[v for r in runs for v in r]], 0.95, 2000, 0)
    assert interval.low is not None and interval.high is not None
    return interval.high - interval.low


def _crossed_width(runs: list[list[float]]) -> float:
    interval = crossed_interval(runs, 0.95, 2000, 0)
    assert interval.low is not None and interval.high is not None
    return interval.high - interval.low


def test_copies_of_one_training_run_are_no_narrower_than_the_run_alone() -> None:
    """The nested bootstrap gave four copies of one run, submitted as four
    runs, an interval 2.5x narrower than the run's own. Crossed, the copies share every
    seed draw, so they say nothing more than the one run."""
    seeds = list(np.random.default_rng(1).normal(80.0, 2.0, size=10))
    assert _crossed_width([seeds] * 4) >= 0.95 * _one_level_width([seeds])


def test_a_training_run_unlike_the_others_widens_the_interval() -> None:
    """Seeds of one trained policy are no independent draws of the method: with one run
    far from the others, resampling the runs must widen the interval well beyond a
    bootstrap of the pooled values (which would pass if the run level were dropped)."""
    noise = np.random.default_rng(2).normal(0.0, 0.1, size=(3, 10))
    runs = [list(noise[0]), list(noise[1]), list(noise[2] + 10.0)]
    assert _crossed_width(runs) > 1.5 * _one_level_width(runs)


# ---------------------------------------------------------------- the results


def _finished(directory: Path, acc: float, loss: float) -> None:
    directory.mkdir(parents=True)
    summary = {
        "status": "completed",
        "final_test_acc_mean": acc,
        "params_added_mean": 0.0,
        "seeds_fossilized": 0,
        "seeds_pruned": 0,
        "wall_time": 1.0,
        "episodes": [{"final_test_loss": loss}],
    }
    (directory / "summary.json").write_text(json.dumps(summary))


# The test loss of each arm per seed (seeds 0..3); wait is the baseline.
LOSSES = {
    "scripted.run-1": [1.0, 1.1, 1.2, 0.9],
    "scripted.run-2": [1.5, 1.4, 1.6, 1.5],
    "scripted.run-3": [0.8, 0.7, 0.9, 2.5],
    "wait": [1.3, 1.3, 1.3, 1.3],
}


def _results(
    pm: PluginManager, root: Path, *, one_run_unfinished: bool = False
) -> ComparisonResults:
    experiment = experiment_of(
        {
            "policies": ["wait", {"name": "scripted", "checkpoints": RUNS}],
            "tasks": ["tiny"],
            "seeds": 4,
            "baseline": "wait",
            "resamples": 500,
            "sweep": {"metric": "loss"},
        }
    )
    cells = plan_cells(experiment, pm)
    for cell in cells:
        if one_run_unfinished and cell.policy == "scripted.run-3":
            continue
        loss = LOSSES[cell.policy][cell.seed - experiment.seeds[0]]
        _finished(cell.directory(root), 50.0, loss)
    return aggregate(experiment, cells, root, {"tiny": LOSS})


def test_results_report_the_method_across_its_training_runs(
    pm: PluginManager, tmp_path: Path
) -> None:
    results = _results(pm, tmp_path)
    (group,) = results.training_groups
    assert (group.task, group.label, group.metric, group.higher_is_better) == (
        "tiny",
        "scripted",
        LOSS,
        False,
    )
    assert (group.runs, group.n) == (3, 12)
    pooled = [v for k in (1, 2, 3) for v in LOSSES[f"scripted.run-{k}"]]
    assert group.iqm == pytest.approx(stats.trim_mean(pooled, 0.25))
    assert [(r.arm, r.n) for r in group.per_run] == [(f"scripted.run-{k}", 4) for k in (1, 2, 3)]
    assert [r.iqm for r in group.per_run] == pytest.approx([1.05, 1.5, 0.85])
    assert (group.run_min, group.run_max) == pytest.approx((0.85, 1.5))
    versus = group.versus
    assert versus is not None and versus.against == "wait" and versus.metric == LOSS
    differences = [v - 1.3 for v in pooled]
    assert versus.iqm == pytest.approx(stats.trim_mean(differences, 0.25))
    # A lower loss than wait's run of the same seed is a win: 7 lower, 5 higher.
    assert (versus.wins, versus.ties, versus.losses) == (7, 0, 5)
    assert versus.low is not None and versus.high is not None
    assert versus.low < versus.iqm < versus.high
    # Every run is still a row of its own.
    assert results.row("tiny", "scripted.run-2") is not None

    write_results(results, tmp_path)
    assert load_results(tmp_path / RESULTS_JSON) == results
    markdown = (tmp_path / RESULTS_MD).read_text()
    section = markdown.split("## Across training runs\n", 1)[1]
    assert "| scripted | tiny | 3 × 4 random seeds | test loss: " in section
    assert "| 0.8500–1.5000 | " in section and "(7/0/5) |" in section
    assert "one draw of the evaluation random seeds that every drawn run" in section


def test_a_training_run_without_finished_cells_is_counted_as_missing(
    pm: PluginManager, tmp_path: Path
) -> None:
    (group,) = _results(pm, tmp_path, one_run_unfinished=True).training_groups
    assert group.runs == 3 and [r.arm for r in group.per_run] == [
        "scripted.run-1",
        "scripted.run-2",
    ]
    assert group.n == 8


def test_results_without_training_groups_load_as_before(pm: PluginManager, tmp_path: Path) -> None:
    results = _results(pm, tmp_path)
    old = unstructure(results)
    del old["training_groups"]
    old["schema_version"] = 8
    loaded = structure(old, ComparisonResults)
    assert loaded.training_groups == []
    assert loaded == attrs.evolve(results, training_groups=[], schema_version=8)
