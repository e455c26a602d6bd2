"""``esper train``'s greedy evaluation on fixed seeds, and rollouts of several episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.telemetry import EpisodeFinished, PolicyEvaluation, read_events

EVAL_SEEDS = [900, 901, 902]


def _train(run_dir: Path, **train: Any) -> dict[str, Any]:
    pm = PluginManager(
        extra=["tests.fake_plugin", "policies.ppo", "policies.wait", "telemetry.jsonl"],
        autoload=False,
    )
    config = load_config(
        extra={
            "run": {
                "task": "tiny",
                "policy": "ppo",
                "reward": "acc_delta",
                "telemetry": ["jsonl"],
                "n_envs": 2,
                "seed": 5,
                "quiet": True,
            },
            "env": {"max_epochs": 3},
            "train": {
                "updates": 3,
                "eval_every": 2,
                "eval_seeds": EVAL_SEEDS,
                "eval_references": ["wait", "not_installed"],
                **train,
            },
            "policies": {"ppo": {"hidden_size": 8, "rollout_episodes": 2}},
        }
    )
    return api.train(config, pm, run_dir=run_dir, quiet=True, notify=lambda _m: None)


def test_greedy_evaluations_before_the_first_update_every_k_and_after_the_last(
    tmp_path: Path,
) -> None:
    summary = _train(tmp_path / "run")
    events = read_events(tmp_path / "run" / "events.jsonl")
    evaluations = [e for e in events if isinstance(e, PolicyEvaluation)]
    # the reference once (an uninstalled one is skipped), then the policy after 0, 2 and 3
    # updates: every eval_every updates, and the last
    assert [(e.policy, e.update) for e in evaluations] == [
        ("wait", None),
        ("trained", 0),
        ("trained", 2),
        ("trained", 3),
    ]
    for e in evaluations:
        assert e.seeds == EVAL_SEEDS and len(e.final_test_acc) == len(EVAL_SEEDS)
    wait, untrained = evaluations[0], evaluations[1]
    assert wait.seeds_fossilized == [0, 0, 0] and wait.params_added == [0, 0, 0]
    assert untrained.final_val_acc != []
    # the evaluation episodes are not training episodes: neither in telemetry nor in the
    # summary; training has 3 updates x 2 rollout episodes x 2 envs, on their own seeds
    finished = [e for e in events if isinstance(e, EpisodeFinished)]
    assert len(finished) == len(summary["episodes"]) == 3 * 2 * 2
    seeds = [e.seed for e in finished]
    assert seeds == [5 + k for k in range(12)]  # seed + episode x n_envs + env
    assert not set(seeds) & set(EVAL_SEEDS)
    assert [e.episode for e in finished] == [k // 2 for k in range(12)]
    assert [e.update for e in finished] == [k // 4 for k in range(12)]


def test_no_evaluation_when_eval_every_is_zero(tmp_path: Path) -> None:
    _train(tmp_path / "run", eval_every=0)
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert not [e for e in events if isinstance(e, PolicyEvaluation)]
