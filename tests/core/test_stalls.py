"""Runs that did not train: the rule, and a comparison that flags them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from esper_core.compare.comparison import RESULTS_JSON, RESULTS_MD, write_results
from esper_core.compare.experiment import (
    Experiment,
    build_experiment,
    parse_experiment,
    shared_config,
)
from esper_core.compare.metric import LOSS
from esper_core.compare.plan import plan_cells
from esper_core.compare.results import ComparisonResults, aggregate, load_results
from esper_core.compare.stalls import StallRule, failed_seeds, seed_cost
from esper_core.plugins import PluginManager

SHARED = {"run": {"reward": "acc_delta", "telemetry": []}, "env": {"max_epochs": 3}}


def test_a_run_far_behind_its_arms_median_or_not_finite_did_not_train() -> None:
    rule = StallRule()
    accuracy = {1: 90.0, 2: 91.0, 3: 80.0, 4: math.nan, 5: 89.9, 6: 85.6}
    assert failed_seeds(accuracy, True, rule) == [3, 4]  # 85.6 is 4.4 below 90: kept
    # charlm's `wide` at lr 0.006: three seeds on a plateau at 1.75-1.78.
    losses = {1: 1.38, 2: 1.40, 3: 1.76, 4: 1.37, 5: 1.39, 6: 1.78, 7: 1.36, 8: 1.75}
    assert failed_seeds(losses, False, rule) == [3, 6, 8]
    assert failed_seeds(losses, False, StallRule(loss_ratio=0.5)) == []
    assert failed_seeds({1: 1.0, 2: math.inf, 3: None}, False, rule) == [2, 3]
    # Of two runs either may be the odd one: only a diverged run counts.
    assert failed_seeds({1: 90.0, 2: 50.0}, True, rule) == []


def test_a_seed_that_cost_the_other_arms_as_much_is_excused() -> None:
    rule = StallRule()
    accuracy = {1: 90.0, 2: 91.0, 3: 80.0, 4: 89.0}
    hard_for_all = [{1: 70.0, 2: 71.0, 3: 61.0, 4: 70.5}, {1: 95.0, 2: 95.0, 3: 86.0, 4: 94.0}]
    # Seed 3 cost the others 9.25 and 8.5 points against their medians (median 8.875); 80
    # is 9.5 below 89.5, 0.625 beyond that. Seeds better than a median cost nothing.
    assert seed_cost(hard_for_all, True) == pytest.approx({1: 0.0, 2: 0.0, 3: 8.875, 4: 0.125})
    assert failed_seeds(accuracy, True, rule, hard_for_all) == []
    # An easy seed excuses nothing, and a seed the others found easy leaves the stall.
    easy = [{1: 70.0, 2: 71.0, 3: 75.0, 4: 70.5}]
    assert failed_seeds(accuracy, True, rule, easy) == [3]
    # An arm with fewer than three finite runs has no median to fall behind.
    assert failed_seeds(accuracy, True, rule, [{3: 10.0, 1: 90.0}]) == [3]
    # A loss: the others' ratio to their own median on the seed scales the margin.
    losses = {1: 1.38, 2: 1.40, 3: 1.76, 4: 1.37}
    higher_loss_there = [{1: 2.0, 2: 2.02, 3: 2.6, 4: 1.98}]
    assert seed_cost(higher_loss_there, False)[3] == pytest.approx(2.6 / 2.01)
    assert failed_seeds(losses, False, rule, higher_loss_there) == []
    assert failed_seeds(losses, False, rule, [{1: 2.0, 2: 2.02, 3: 2.0, 4: 1.98}]) == [3]
    # A diverged run is never excused.
    assert failed_seeds({**accuracy, 3: math.nan}, True, rule, hard_for_all) == [3]


def _finished(directory: Path, acc: float, val_acc: float) -> None:
    directory.mkdir(parents=True)
    summary = {
        "status": "completed",
        "final_test_acc_mean": acc,
        "final_val_acc_mean": val_acc,
        "params_added_mean": 0.0,
        "seeds_fossilized": 0,
        "seeds_pruned": 0,
        "wall_time": 1.0,
        "episodes": [{"final_test_loss": 1.0, "final_val_loss": 1.0}],
    }
    (directory / "summary.json").write_text(json.dumps(summary))


# Test and validation accuracy per seed (seeds 0..5); wait, the baseline, stalls on seed 3.
ACC = {
    "scripted": [90.0, 91.0, 90.5, 92.0, 90.0, 91.5],
    "wait": [89.0, 89.5, 90.0, 60.0, 89.0, 90.5],
}


def _compared(
    pm: PluginManager, tmp_path: Path, acc: dict[str, list[float]]
) -> tuple[Experiment, ComparisonResults]:
    spec = parse_experiment(
        {
            "config": SHARED,
            "policies": ["wait", "scripted"],
            "tasks": ["tiny"],
            "seeds": 6,
            "baseline": "wait",
            "resamples": 200,
        }
    )
    experiment = build_experiment(spec, shared_config(spec))
    for cell in plan_cells(experiment, pm):
        value = acc[cell.policy][cell.seed - experiment.seeds[0]]
        _finished(cell.directory(tmp_path), value, value)
    return experiment, aggregate(experiment, plan_cells(experiment, pm), tmp_path)


def test_a_comparison_flags_an_arm_that_did_not_train_and_leaves_its_verdict_unresolved(
    pm: PluginManager, tmp_path: Path
) -> None:
    experiment, results = _compared(pm, tmp_path, ACC)
    (failure,) = results.failures
    assert (failure.task, failure.arm, failure.seeds) == ("tiny", "wait", [experiment.seeds[3]])
    assert failure.median == pytest.approx(89.25) and failure.values == [60.0]
    assert results.cautions == []
    write_results(results, tmp_path)
    markdown = (tmp_path / RESULTS_MD).read_text()
    assert "**Did not train: wait on tiny did not train on 1 seed" in markdown
    scripted = next(line for line in markdown.splitlines() if line.startswith("| scripted |"))
    assert "| unresolved (" in scripted
    assert load_results(tmp_path / RESULTS_JSON) == results


def test_a_seed_hard_for_every_arm_of_a_comparison_is_no_stall(
    pm: PluginManager, tmp_path: Path
) -> None:
    # Seed 3 costs scripted 29 points too: the seed is hard, not wait's training.
    hard = {"scripted": [90.0, 91.0, 90.5, 62.0, 90.0, 91.5], "wait": ACC["wait"]}
    _, results = _compared(pm, tmp_path, hard)
    assert results.failures == []


def test_too_few_evaluation_seeds_are_a_caution(pm: PluginManager, tmp_path: Path) -> None:
    spec = parse_experiment(
        {"config": SHARED, "policies": ["wait"], "tasks": ["tiny"], "seeds": 2, "resamples": 200}
    )
    experiment = build_experiment(spec, shared_config(spec))
    results = aggregate(experiment, [], tmp_path, {"tiny": LOSS})
    (caution,) = results.cautions
    assert caution.startswith("only 2 evaluation random seeds: too few for a claim")
    write_results(results, tmp_path)
    assert f"**Caution: {caution}.**" in (tmp_path / RESULTS_MD).read_text()
