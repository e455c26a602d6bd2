"""``esper train`` over several host/task pairs (train.pairs): every env draws a pair per
episode, PPO's slots network acts on all of them in one rollout, and a run interrupted
mid-episode resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from esper_core.config import load_config
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.interrupts import Interrupted
from esper_core.run.telemetry import EpisodeFinished, PolicyEvaluation, read_events

PAIRS = [
    {"label": "all-slots", "config": {}},
    {"label": "one-slot", "config": {"env": {"slots": ["r0c0"]}, "training": {"lr": 0.05}}},
]


def _config(**train: Any) -> Any:
    return load_config(
        extra={
            "run": {
                "task": "tiny",
                "policy": "ppo",
                "reward": "acc_delta",
                "telemetry": ["jsonl"],
                "n_envs": 2,
                "seed": 11,
                "quiet": True,
            },
            "env": {"max_epochs": 3},
            "train": {
                "updates": 2,
                "eval_every": 1,
                "eval_seeds": [900, 901],
                "pairs": PAIRS,
                **train,
            },
            # Per-pair advantages: the rollout's groups survive the interruption below.
            "policies": {
                "ppo": {
                    "network": "slots",
                    "hidden_size": 8,
                    "rollout_episodes": 1,
                    "advantage_groups": "pair",
                }
            },
        }
    )


def _pm() -> PluginManager:
    return PluginManager(
        extra=["tests.fake_plugin", "policies.ppo", "policies.wait", "telemetry.jsonl"],
        autoload=False,
    )


def test_every_pair_is_drawn_and_each_episode_says_which(tmp_path: Path) -> None:
    api.train(_config(), _pm(), run_dir=tmp_path / "run", quiet=True, notify=lambda _m: None)
    events = read_events(tmp_path / "run" / "events.jsonl")
    episodes = [e for e in events if isinstance(e, EpisodeFinished)]
    assert len(episodes) == 2 * 1 * 2  # updates x rollout episodes x envs
    assert {e.pair for e in episodes} == {"all-slots", "one-slot"}
    evaluations = [e for e in events if isinstance(e, PolicyEvaluation)]
    # no reference lines in a mixed run: they would act on the pairs' union space
    assert [e.policy for e in evaluations] == ["trained"] * 3
    assert all(e.pairs == ["all-slots", "one-slot"] for e in evaluations)


def test_an_interrupted_mixed_run_resumes_exactly(tmp_path: Path) -> None:
    whole = api.train(
        _config(eval_every=0), _pm(), run_dir=tmp_path / "whole", quiet=True, notify=lambda _m: None
    )
    cut = _config(eval_every=0)
    cut = attrs.evolve(
        cut,
        run=attrs.evolve(cut.run, telemetry=["jsonl", "interrupter"]),
        telemetry={"interrupter": {"at_epoch": 2, "at_outer": 1}},
    )
    with pytest.raises(Interrupted):
        api.train(cut, _pm(), run_dir=tmp_path / "cut", quiet=True, notify=lambda _m: None)
    state = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert (state["outer"], state["epoch"]) == (1, 2)
    config = load_config(tmp_path / "cut" / "config.toml", ['run.telemetry=["jsonl"]'])
    resumed = api.train(
        config, _pm(), run_dir=tmp_path / "cut", resume=True, quiet=True, notify=lambda _m: None
    )
    pick = ("final_val_acc", "pair", "total_reward", "seed")

    def rows(run: str) -> list[tuple[Any, ...]]:
        events = read_events(tmp_path / run / "events.jsonl")
        return [
            tuple(getattr(e, k) for k in pick) for e in events if isinstance(e, EpisodeFinished)
        ]

    assert rows("cut") == rows("whole")
    assert resumed["final_val_acc_mean"] == whole["final_val_acc_mean"]


def test_a_pair_that_sets_the_runs_policy_is_one_clear_line(tmp_path: Path) -> None:
    bad = [{"label": "x", "config": {"run": {"policy": "wait"}}}]
    with pytest.raises(ConfigError, match=r"pair 'x' sets run\.policy"):
        api.train(_config(pairs=bad), _pm(), run_dir=tmp_path / "r", quiet=True)


def test_a_greedy_check_after_training_repeats_the_last_one(tmp_path: Path) -> None:
    import importlib.util

    from tests.plugin_set import REPO

    spec = importlib.util.spec_from_file_location(
        "ppo_greedy_check", REPO / "benchmarks" / "ppo_greedy_check.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    run = tmp_path / "run"
    api.train(_config(), _pm(), run_dir=run, quiet=True, notify=lambda _m: None)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    checked = script.check(run, _pm())
    last = [e for e in read_events(run / "events.jsonl") if isinstance(e, PolicyEvaluation)][-1]
    assert checked["update"] == last.update == 2
    assert checked["return"] == pytest.approx(sum(last.total_reward) / len(last.total_reward))
    assert set(checked["pairs"]) == {"all-slots", "one-slot"}
    # the run directory is read, never written
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
