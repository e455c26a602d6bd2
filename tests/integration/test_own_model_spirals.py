"""examples/own_model_spirals.py: the default heuristic grows the README's own example."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_own_model_example import Run


def test_the_default_heuristic_grows_the_too_small_model_and_keeps_the_seed(
    run_script: Run,
) -> None:
    # Random seed 0 at the example's defaults (24 epochs, no heuristic option set): the
    # host's hidden layer widens 2x once its validation loss slows (epoch 5), then the
    # slot's expansion score passes the default ratio and the seed is kept.
    out = run_script("examples/own_model_spirals.py")
    assert "epoch 5: WIDEN host x2" in out
    assert "epoch 9: GERMINATE body/1 mlp/residual" in out
    assert "bottleneck: expansion score" in out and ">= 2" in out
    assert "body/1: germinated mlp/residual (4,256 params)" in out
    assert "epoch 14: FOSSILIZE body/1" in out
    assert "parameters: model 195, seeds 4,256" in out


def test_without_growth_the_same_loop_keeps_the_model_as_it_was(run_script: Run) -> None:
    out = run_script("examples/own_model_spirals.py", "--policy", "wait", "--epochs", "4")
    assert "germinated" not in out
    assert "parameters: model 99, seeds 0" in out


def test_the_example_builds_the_static_model_of_the_grown_size(run_script: Run) -> None:
    out = run_script(
        "examples/own_model_spirals.py",
        "--layers",
        "2",
        "--hidden",
        "32",
        "--policy",
        "wait",
        "--epochs",
        "2",
    )
    assert "parameters: model 1,251, seeds 0" in out


def test_the_measurement_pairs_the_heuristic_with_wait_on_one_seed(run_script: Run) -> None:
    printed = run_script("benchmarks/own_model_spirals.py", "--seeds", "0", "--epochs", "12")
    result = json.loads(printed)
    runs = {r["policy"]: r for r in result["runs"]}
    # In 12 epochs the default widens the hidden layer 2x (16 -> 32 units) and no seed
    # follows in time; the widened model costs more FLOPs than wait's.
    assert runs["heuristic"]["events"] == []
    assert (runs["heuristic"]["params"], runs["wait"]["params"]) == (195, 99)
    assert runs["heuristic"]["train_flops"] > 1.5 * runs["wait"]["train_flops"]
    paired = result["summary"]["heuristic_minus_wait"]
    diff = runs["heuristic"]["test_acc"] - runs["wait"]["test_acc"]
    assert paired["iqm"] == pytest.approx(diff)
    assert sum(paired["wins_ties_losses"]) == 1
