"""`esper run` end to end on the tiny task: run directory, determinism, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper_core.config import load_config
from esper_core.errors import RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.runner import Interrupted, run

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


def stable(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without wall-clock numbers."""
    out = {k: v for k, v in summary.items() if k not in ("wall_time", "run_name")}
    out["episodes"] = [{k: v for k, v in e.items() if k != "time"} for e in summary["episodes"]]
    return out


def test_run_writes_the_run_directory(pm: PluginManager, tmp_path: Path) -> None:
    summary = run(load_config(overrides=BASE), pm, run_dir=tmp_path / "r", quiet=True)
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert {"config.toml", "checkpoint.pt", "checkpoint.json", "summary.json"} <= names
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "completed"
    assert summary["episodes_completed"] == 4 and summary["seeds_fossilized"] > 0
    assert load_checkpoint(tmp_path / "r" / "checkpoint.pt")["outer"] == 2
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp")]


def test_same_seed_same_summary(pm: PluginManager, tmp_path: Path) -> None:
    a = run(load_config(overrides=BASE), pm, run_dir=tmp_path / "a", quiet=True)
    b = run(load_config(overrides=BASE), pm, run_dir=tmp_path / "b", quiet=True)
    assert stable(a) == stable(b)
    c = run(load_config(overrides=[*BASE, "run.seed=1"]), pm, run_dir=tmp_path / "c", quiet=True)
    assert stable(a) != stable(c)


def test_interrupted_run_resumes_identically(pm: PluginManager, tmp_path: Path) -> None:
    reference = run(load_config(overrides=BASE), pm, run_dir=tmp_path / "ref", quiet=True)
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
