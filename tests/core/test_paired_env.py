"""PairedEnv (train.pairs): a pair drawn per episode from the env seed, the union space a
policy is built for, exact checkpoints, and one clear line for a pair that breaks the run."""

from __future__ import annotations

import io

import pytest
import torch

from esper_core.config import load_config
from esper_core.env.paired import PairedEnv, draw_pair, union_space
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT, ActionSpace
from esper_core.run.env_builders import each_pair, pair_config
from tests.fakes import make_env


def _paired(*overrides: str) -> PairedEnv:
    # Two "hosts": the tiny task with its slots, and the same task with one slot only.
    a = make_env(*overrides)
    b = make_env(*overrides, f'env.slots=["{a.space.slot_ids[0]}"]')
    return PairedEnv(["all-slots", "one-slot"], [a, b])


def test_consecutive_seeds_share_the_pairs_equally() -> None:
    # 10 evaluation seeds over 5 pairs: each pair twice, none left out.
    draws = [draw_pair(seed, 5) for seed in range(100_000, 100_010)]
    assert sorted(draws) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    # A rollout of 8 envs: every pair drawn, none more than twice.
    rollout = [draw_pair(300 + 8 * 3 + i, 5) for i in range(8)]
    assert set(rollout) == set(range(5)) and max(map(rollout.count, range(5))) == 2


def test_reset_runs_the_drawn_pair_and_delegates() -> None:
    env = _paired()
    seen = set()
    for seed in range(12):
        obs = env.reset(seed, 0)
        assert env.pair == draw_pair(seed, 2)
        assert env.current is env.pair_envs[env.pair]
        assert len(obs.slots) == len(env.current.space.slot_ids)
        assert env.epoch == 0 and env.model is env.current.model  # delegated
        seen.add(env.pair)
    assert seen == {0, 1}


def test_observations_name_the_drawn_pair() -> None:
    env = _paired()
    for seed in range(4):
        obs = env.reset(seed, 0)
        assert obs.pair == env.pair_label == env.labels[draw_pair(seed, 2)]
        assert env.step(WAIT).observation.pair == env.pair_label
    assert make_env().reset(0, 0).pair == ""  # a plain run has no pair


def test_union_space_pads_to_the_widest_host() -> None:
    env = _paired()
    wide, narrow = (e.space for e in env.pair_envs)
    assert len(narrow.slot_ids) == 1 < len(wide.slot_ids)
    assert len(env.space.slot_ids) == len(wide.slot_ids)
    assert env.space.slot_ids[0] == "slot0"
    assert env.space.blueprints == tuple(f"blueprint{j}" for j in range(len(wide.blueprints)))
    same = ActionSpace(("a",), ("x",), ("linear_add",), (3,), (1.0,))
    assert union_space(["p", "q"], [same, same]) is same


def test_pairs_with_different_lifecycles_are_refused() -> None:
    a = ActionSpace(("a",), ("x",), ("linear_add",), (3,), (1.0,))
    b = ActionSpace(("a",), ("x",), ("linear_add",), (5,), (1.0,))
    with pytest.raises(ConfigError, match="pair 'q' sets its own lifecycle"):
        union_space(["p", "q"], [a, b])


def test_pairs_of_different_lengths_are_refused() -> None:
    a, b = make_env("env.max_epochs=4"), make_env("env.max_epochs=6")
    with pytest.raises(ConfigError, match=r"same length .*p: 4, q: 6"):
        PairedEnv(["p", "q"], [a, b])


def test_checkpoint_restores_the_pair_and_its_episode_exactly() -> None:
    env = _paired()
    seed = next(s for s in range(20) if draw_pair(s, 2) == 1)
    env.reset(seed, 0)
    env.step(WAIT)
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)  # as a checkpoint does: no tensor is shared
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    after = env.step(WAIT).observation
    other = _paired()
    other.reset(next(s for s in range(20) if draw_pair(s, 2) == 0), 0)
    other.load_state_dict(state)
    assert other.pair == 1
    again = other.step(WAIT).observation
    assert again.val_loss == after.val_loss and again.val_acc == after.val_acc
    assert torch.equal(
        torch.tensor(again.loss_history, dtype=torch.float64),
        torch.tensor(after.loss_history, dtype=torch.float64),
    )


def test_a_checkpoint_of_other_pairs_is_refused() -> None:
    env = _paired()
    env.reset(0, 0)
    state = dict(env.state_dict(), pair_label="elsewhere")
    with pytest.raises(ValueError, match="pair 'elsewhere'"):
        _paired().load_state_dict(state)


def test_each_pair_groups_envs_by_host() -> None:
    envs = [_paired(), _paired()]
    groups = each_pair(envs)
    assert [len(g) for g in groups] == [2, 2]
    assert groups[1][0] is envs[0].pair_envs[1]
    plain = [make_env()]
    assert each_pair(plain) == [plain]


def test_a_pair_config_is_merged_over_the_run_and_may_not_set_shared_keys() -> None:
    config = load_config(overrides=["training.lr=0.3", "env.max_epochs=5"])
    mine = pair_config(
        config, "p", {"training": {"lr": 0.05}, "tasks": {"digits": {"preset": "small"}}}
    )
    assert mine.training.lr == 0.05 and mine.env.max_epochs == 5
    assert mine.tasks["digits"]["preset"] == "small" and mine.train.pairs == []
    with pytest.raises(ConfigError, match=r"pair .p. sets run\.policy"):
        pair_config(config, "p", {"run": {"policy": "wait"}})
    with pytest.raises(ConfigError, match=r"train\.pairs .p.: "):
        pair_config(config, "p", {"training": {"lr": -1.0}})


def test_a_pair_of_another_task_takes_its_own_blueprints_and_recipe() -> None:
    # The run's config is resolved for run.task: its blueprints and training recipe are
    # that task's, and must not reach a pair of another topology.
    config = load_config(
        overrides=[
            'env.blueprints=["cnn/conv_small"]',
            'training.optimizer="sgd"',
            "training.lr=0.2",
        ]
    )
    mine = pair_config(config, "lm", {"run": {"task": "charlm"}, "training": {"lr": 0.006}})
    assert mine.env.blueprints is None
    assert mine.training.optimizer is None and mine.training.lr == 0.006
    own = pair_config(config, "cnn", {"env": {"blueprints": ["cnn/norm"]}})
    assert own.env.blueprints == ["cnn/norm"]
