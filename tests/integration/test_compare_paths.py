"""`esper compare` draws each grown run as a path: on the tiny task, the scripted
policy germinates in its first epochs; its cells' events.jsonl give every seed's path in
results.json, and pareto.png is drawn with them. The wait policy and the sweep's sizes
never grow and have none."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.compare.comparison import PARETO_PLOT, RESULTS_JSON
from esper_core.compare.results import RESULTS_SCHEMA_VERSION, load_results
from esper_core.plugins import PluginManager
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import FAKE_PLUGIN

SEEDS = 1
EPOCHS = 3
EXPERIMENT = f"""
policies = ["scripted", "wait"]
tasks = ["tiny"]
seeds = {SEEDS}
baseline = "wait"
baselines = ["size-sweep"]
resamples = 100

[[sweep.sizes]]
label = "w8"
options = {{ width = 8 }}

[config]
run = {{ reward = "acc_delta", telemetry = ["jsonl"] }}
env = {{ max_epochs = {EPOCHS} }}
"""
PLUGINS = ("--plugin", FAKE_PLUGIN, "--policy", "scripted", "--plugin", "policies.wait")
PLUGINS += ("--plugin", "telemetry.jsonl")  # the per-epoch events the paths are read from


def test_compare_writes_each_grown_runs_path(tmp_path: Path) -> None:
    (tmp_path / "paths.toml").write_text(EXPERIMENT)
    out = tmp_path / "out"
    # `esper compare` in this process, with only the plugins it names (as in a subprocess
    # of the tests); the cells run one after another here (tests/inline_runner.py), each
    # through the same cell code and writing its events.jsonl as in a worker.
    group, pm = build_cli(PluginManager(extra=[INLINE_RUNNER], autoload=False))
    command = ["compare", str(tmp_path / "paths.toml"), *PLUGINS, "--runner", "inline"]
    done = CliRunner().invoke(group, [*command, "--out", str(out), "--quiet"], obj={"pm": pm})
    assert done.exit_code == 0, done.output
    results = load_results(out / RESULTS_JSON)
    assert results.schema_version == RESULTS_SCHEMA_VERSION >= 4  # paths since schema 4
    assert {p.policy for p in results.paths} == {"scripted"}
    cells = {(c.policy, c.seed): c for c in results.cells}
    for path in results.paths:
        first, *_, end = path.points
        cell = cells[path.policy, path.seed]
        assert "start" in first.events and first.epoch == 1 and first.metric == "val_acc"
        # The path ends at the run's own point in the results: final cost, test value.
        assert (end.events, end.metric, end.epoch) == (["end"], "final_test_acc", EPOCHS)
        assert (end.params_forward, end.train_flops, end.value) == (
            cell.params_forward,
            cell.train_flops,
            cell.final_test_acc,
        )
        flops = [p.train_flops for p in path.points]
        assert flops == sorted(flops) and flops[0] > 0
        # The scripted policy germinates before the first epoch: the path starts grown, past
        # the host alone (the wait policy's run of the same seed).
        assert "grew" in first.events
        assert cells["wait", path.seed].params_forward < first.params_forward
    raw = json.loads((out / RESULTS_JSON).read_text())
    assert raw["paths"][0]["points"][0].keys() == {
        "epoch",
        "params_forward",
        "train_flops",
        "value",
        "metric",
        "events",
        "note",  # since schema 8: the host's own growth (empty here: seeds only)
    }
    assert (out / PARETO_PLOT).stat().st_size > 0


def test_results_of_an_older_schema_load_without_paths(tmp_path: Path) -> None:
    """Schema 3 results (before the paths) still load: their paths are empty."""
    old = {
        "schema_version": 3,
        "tasks": ["tiny"],
        "policies": ["wait"],
        "seeds": [0],
        "baseline": None,
        "confidence": 0.95,
        "resamples": 10,
        "bootstrap_seed": 0,
        "rows": [],
        "cells": [],
        "missing": [],
        "frontier": [],
    }
    (tmp_path / RESULTS_JSON).write_text(json.dumps(old))
    assert load_results(tmp_path / RESULTS_JSON).paths == []
