"""`esper run` end to end on the tiny task: run directory, determinism, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from esper_core.config import load_config
from esper_core.converter import structure, unstructure
from esper_core.errors import ConfigError, RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.api import run, train
from esper_core.run.boundary import explained_failures
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.failures import ResourceError
from esper_core.run.interrupts import Interrupted
from esper_core.run.summary import RunSummary

BASE = [
    "run.task=tiny",
    "run.policy=scripted",
    "run.reward=acc_delta",
    "run.telemetry=[]",
    "lifecycle.min_training_epochs=2",
    "env.max_epochs=10",
    "run.n_envs=2",
    "run.episodes=2",
    "run.checkpoint_every=4",
]


BaseRun = tuple[dict[str, Any], Path]


def stable(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without wall-clock numbers."""
    out = {k: v for k, v in summary.items() if k not in ("wall_time", "run_name")}
    out["episodes"] = [{k: v for k, v in e.items() if k != "time"} for e in summary["episodes"]]
    return out


@pytest.fixture(scope="module")
def base_run(pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> BaseRun:
    """One run of BASE and its directory, for the tests that read a run or compare others
    with it: each run takes seconds, and none of them changes it."""
    run_dir = tmp_path_factory.mktemp("base") / "r"
    return run(load_config(overrides=BASE), pm, run_dir=run_dir, quiet=True), run_dir


def test_run_writes_the_run_directory(base_run: BaseRun) -> None:
    summary, run_dir = base_run
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.toml", "checkpoint.pt", "checkpoint.json", "summary.json"} <= names
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert summary["episodes_completed"] == 4 and summary["seeds_fossilized"] > 0
    assert load_checkpoint(run_dir / "checkpoint.pt")["outer"] == 2
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_summary_json_is_a_run_summary(base_run: BaseRun) -> None:
    summary, run_dir = base_run
    written = json.loads((run_dir / "summary.json").read_text())
    value = structure(written, RunSummary)  # the converter is strict: no extra or missing key
    assert unstructure(value) == written == json.loads(json.dumps(summary))
    assert value.seeds and value.seeds[0].fate in ("live", "fossilized", "pruned")
    # Every task's test loss (cross-entropy) and its perplexity, not only the accuracy.
    losses = [e["final_test_loss"] for e in written["episodes"]]
    assert value.final_test_loss_mean == pytest.approx(sum(losses) / len(losses))
    assert value.final_test_perplexity_mean == pytest.approx(math.exp(value.final_test_loss_mean))
    assert value.language_model is False  # the fake task is a classifier


def test_same_seed_same_summary(base_run: BaseRun, pm: PluginManager, tmp_path: Path) -> None:
    a, _ = base_run
    b = run(load_config(overrides=BASE), pm, run_dir=tmp_path / "b", quiet=True)
    assert stable(a) == stable(b)
    c = run(load_config(overrides=[*BASE, "run.seed=1"]), pm, run_dir=tmp_path / "c", quiet=True)
    assert stable(a) != stable(c)


def test_interrupted_run_resumes_identically(
    base_run: BaseRun, pm: PluginManager, tmp_path: Path
) -> None:
    reference, _ = base_run
    interrupted = [
        *BASE,
        'run.telemetry=["interrupter"]',
        "telemetry.interrupter.at_epoch=6",
        "telemetry.interrupter.at_outer=1",
    ]
    with pytest.raises(Interrupted, match=r"episode 1 epoch 6.*esper run --resume"):
        run(load_config(overrides=interrupted), pm, run_dir=tmp_path / "cut", quiet=True)
    state = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert (state["outer"], state["epoch"]) == (1, 6)
    config = load_config(tmp_path / "cut" / "config.toml", ["run.telemetry=[]"])
    resumed = run(config, pm, run_dir=tmp_path / "cut", resume=True, quiet=True)
    assert stable(resumed) == stable(reference)


def test_existing_run_is_not_overwritten(pm: PluginManager, tmp_path: Path) -> None:
    run(
        load_config(overrides=[*BASE, "run.episodes=1", "env.max_epochs=2"]),
        pm,
        run_dir=tmp_path / "x",
        quiet=True,
    )
    with pytest.raises(RunDirError, match="already holds a run"):
        run(load_config(overrides=BASE), pm, run_dir=tmp_path / "x", quiet=True)
    with pytest.raises(RunDirError, match=r"no checkpoint\.pt"):
        run(load_config(overrides=BASE), pm, run_dir=tmp_path / "empty", resume=True, quiet=True)


def test_errors_propagate_unchanged_and_the_boundary_explains_them(
    pm: PluginManager, tmp_path: Path
) -> None:
    oom = load_config(overrides=[*BASE, "run.task=faulty", 'tasks.faulty.fault="oom"'])
    with pytest.raises(torch.OutOfMemoryError):
        run(oom, pm, run_dir=tmp_path / "raw", quiet=True)
    with (
        pytest.raises(ResourceError, match="out of device memory"),
        explained_failures(pm, tmp_path / "explained", "run"),
    ):
        run(oom, pm, run_dir=tmp_path / "explained", quiet=True)


def test_train_refuses_a_policy_that_cannot_learn(pm: PluginManager, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'scripted' is not trainable"):
        train(load_config(overrides=BASE), pm, run_dir=tmp_path / "t", quiet=True)
    assert not (tmp_path / "t" / "checkpoint.pt").exists()
