"""A model that collapses to chance accuracy while its loss stays under the
governor's floors is rolled back (decision and its limits: RELIABILITY.md)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.recipe import LEGACY_SGD, recipe_overrides
from esper_core.run import api
from tests.plugin_set import plugin_manager
from tests.reliability.cli_runs import FAKE

FAULTY = [
    "run.task=faulty",
    "run.policy=scripted",
    "run.reward=acc_delta",
    'run.telemetry=["jsonl"]',
    "lifecycle.min_training_epochs=2",
    "env.max_epochs=10",
]


def rollbacks(run_dir: Path) -> list[dict]:  # type: ignore[type-arg]
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == "governor_rollback"]


def run(pm: PluginManager, run_dir: Path, *sets: str) -> dict:  # type: ignore[type-arg]
    config = load_config(overrides=list(sets))
    return api.run(config, pm, run_dir=run_dir, quiet=True, notify=lambda _m: None)


def test_accuracy_collapsed_to_chance_rolls_back_to_the_better_snapshot(tmp_path: Path) -> None:
    """From epoch 6 on the model reports a uniform guess: 25% on 4 classes, and a loss of
    ln 4, under the chance floor of 1.5 ln 4. The snapshot of epoch 5 is far above chance."""
    pm = plugin_manager(FAKE)
    summary = run(
        pm,
        tmp_path / "r",
        *FAULTY,
        'tasks.faulty.fault="chance"',
        "tasks.faulty.at_epoch=6",
        "tasks.faulty.epochs=5",
    )
    events = rollbacks(tmp_path / "r")
    assert [e["epoch"] for e in events][:1] == [8]  # three epochs at chance: 6, 7, 8
    # The snapshot restored is the last one before the collapse: epoch 5, or an earlier one
    # taken when the heuristic fossilized a seed.
    assert "at chance level" in events[0]["reason"] and 1 <= events[0]["snapshot_epoch"] <= 5
    assert summary["rollbacks"] >= 1


def test_a_too_high_host_learning_rate_is_rolled_back(tmp_path: Path) -> None:
    """digits under constant-rate SGD at lr=5: accuracy at chance (10%) from the first
    epochs with losses of 25-80, which used to become the history every later loss was
    judged by."""
    pm = plugin_manager()
    summary = run(
        pm,
        tmp_path / "r",
        "run.policy=wait",
        *recipe_overrides(attrs.evolve(LEGACY_SGD, lr=5.0)),
        "env.max_epochs=6",
        'run.telemetry=["jsonl"]',
        "run.threads=1",
    )
    events = rollbacks(tmp_path / "r")
    assert events and events[0]["epoch"] <= 3, [e["epoch"] for e in events]
    assert "above" in events[0]["reason"]
    assert summary["rollbacks"] >= 1


def test_a_healthy_run_is_never_rolled_back(tmp_path: Path) -> None:
    pm = plugin_manager(FAKE)
    summary = run(pm, tmp_path / "r", *FAULTY)
    assert summary["rollbacks"] == 0 and not rollbacks(tmp_path / "r")
