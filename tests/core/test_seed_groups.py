"""``train.seed_group``: envs of a training run that share each episode's random seed run
the same episode (host, data order, pair) and differ only by what the policy does, so a
learner can compare its actions on one episode (PPO's ``advantage_groups = "seed"``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from esper_core.config import load_config
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.run import api
from esper_core.run.telemetry import EpisodeFinished, read_events
from tests.core.test_mixed_training import PAIRS, _pm
from tests.fakes import make_env


def _config(n_envs: int, seed_group: int, groups: str = "seed") -> Any:
    return load_config(
        extra={
            "run": {
                "task": "tiny",
                "policy": "ppo",
                "reward": "acc_delta",
                "telemetry": ["jsonl"],
                "n_envs": n_envs,
                "seed": 11,
                "quiet": True,
            },
            "env": {"max_epochs": 2},
            "train": {"updates": 1, "eval_every": 0, "pairs": PAIRS, "seed_group": seed_group},
            "policies": {
                "ppo": {
                    "network": "slots",
                    "hidden_size": 8,
                    "rollout_episodes": 2,
                    "advantage_groups": groups,
                }
            },
        }
    )


def test_envs_of_a_group_run_one_seed_and_pair_and_groups_run_consecutive_seeds(
    tmp_path: Path,
) -> None:
    api.train(_config(4, 2), _pm(), run_dir=tmp_path / "run", quiet=True, notify=lambda _m: None)
    episodes = [
        e for e in read_events(tmp_path / "run" / "events.jsonl") if isinstance(e, EpisodeFinished)
    ]
    seen = sorted((e.episode, e.env, e.seed, e.pair) for e in episodes)
    # two rollout episodes x four envs; env i of episode k: 11 + k x 2 + i // 2
    assert [(k, i, s) for k, i, s, _ in seen] == [
        (k, i, 11 + 2 * k + i // 2) for k in range(2) for i in range(4)
    ]
    pairs = {(k, i): p for k, i, _, p in seen}
    for k in range(2):
        assert pairs[k, 0] == pairs[k, 1] != pairs[k, 2] == pairs[k, 3]  # seeds cycle the pairs


def test_two_envs_on_one_seed_acting_alike_see_the_same_episode() -> None:
    a, b = make_env(env_index=0, seed=7), make_env(env_index=3, seed=7)
    for _ in range(3):
        one, two = a.step(WAIT), b.step(WAIT)
        assert (one.observation.val_loss, one.observation.train_loss, one.reward) == (
            two.observation.val_loss,
            two.observation.train_loss,
            two.reward,
        )
    assert a.observation.seed == b.observation.seed == 7


@pytest.mark.parametrize(
    ("n_envs", "seed_group", "groups", "message"),
    [
        (4, 3, "pair", "train.seed_group = 3 does not divide run.n_envs = 4"),
        (4, 1, "seed", 'advantage_groups = "seed" compares envs that share'),
    ],
)
def test_a_seed_group_that_cannot_be_formed_is_one_clear_line(
    tmp_path: Path, n_envs: int, seed_group: int, groups: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        api.train(
            _config(n_envs, seed_group, groups),
            _pm(),
            run_dir=tmp_path / "run",
            quiet=True,
            notify=lambda _m: None,
        )
    assert not (tmp_path / "run").exists()


def test_the_eighth_ppo_studys_config_loads_with_whole_seed_groups() -> None:
    from tests.plugin_set import REPO

    config = load_config(REPO / "docs" / "results" / "ppo-suite-8" / "config.toml")
    assert config.train.seed_group == 3 and config.run.n_envs % 3 == 0
    assert config.policies["ppo"]["advantage_groups"] == "seed"
    assert len(config.train.pairs) == 9


def test_an_interrupted_run_on_seed_groups_resumes_exactly(tmp_path: Path) -> None:
    """Stopped mid-rollout (in update 1) and resumed, a run on seed groups draws the same
    shared seeds, pairs and returns as one that ran through (the eighth PPO study resumes
    across sessions)."""
    import attrs

    from esper_core.run.checkpoint import load_checkpoint
    from esper_core.run.interrupts import Interrupted

    def config() -> Any:
        c = _config(4, 2)
        return attrs.evolve(c, train=attrs.evolve(c.train, updates=2))

    pm = _pm()
    whole = api.train(config(), pm, run_dir=tmp_path / "whole", quiet=True, notify=lambda _m: None)
    cut = config()
    cut = attrs.evolve(
        cut,
        run=attrs.evolve(cut.run, telemetry=["jsonl", "interrupter"]),
        telemetry={"interrupter": {"at_epoch": 1, "at_outer": 1}},
    )
    with pytest.raises(Interrupted):
        api.train(cut, pm, run_dir=tmp_path / "cut", quiet=True, notify=lambda _m: None)
    assert load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["outer"] == 1
    resumed_config = load_config(tmp_path / "cut" / "config.toml", ['run.telemetry=["jsonl"]'])
    resumed = api.train(
        resumed_config,
        pm,
        run_dir=tmp_path / "cut",
        resume=True,
        quiet=True,
        notify=lambda _m: None,
    )

    def rows(run: str) -> list[tuple[Any, ...]]:
        events = read_events(tmp_path / run / "events.jsonl")
        return [
            (e.episode, e.env, e.seed, e.pair, e.total_reward)
            for e in events
            if isinstance(e, EpisodeFinished)
        ]

    assert rows("cut") == rows("whole") and len(rows("whole")) == 2 * 2 * 4
    assert resumed["final_val_acc_mean"] == whole["final_val_acc_mean"]
