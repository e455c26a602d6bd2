"""``policies.ppo.init_from``: a training run starts from a slots checkpoint's network
(another host, another slot count), with a fresh optimiser; a flat checkpoint and a
network of other options are refused in one line that names the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy

from esper_core.errors import CheckpointError
from esper_core.run.checkpoint import save_checkpoint

from .helpers import SPACE, BanditEnv, make_policy, run_updates

SLOTS = PPOOptions(network="slots", hidden_size=16)
ONE_SLOT = attrs.evolve(SPACE, slot_ids=("r0c0",))
FOUR_SLOTS = attrs.evolve(SPACE, slot_ids=("r0c0", "r0c1", "r0c2", "r0c3"))


def _checkpoint(path: Path, options: PPOOptions = SLOTS) -> Path:
    """A policy trained two updates on the two-slot bandit."""
    policy = make_policy(options, n_envs=2, max_epochs=4, total_updates=2)
    run_updates(policy, [BanditEnv(i, 4) for i in range(2)], 2)
    save_checkpoint(path, {"policy": policy.state_dict()})
    return path


def _starting(path: Path | str, options: PPOOptions = SLOTS, **ctx: Any) -> PPOPolicy:
    return make_policy(
        attrs.evolve(options, init_from=str(path)), n_envs=2, max_epochs=4, total_updates=3, **ctx
    )


@pytest.mark.parametrize("space", [SPACE, ONE_SLOT, FOUR_SLOTS], ids=["2", "1", "4"])
def test_a_run_starts_from_the_checkpoints_network_and_statistics_on_any_slot_count(
    tmp_path: Path, space: object
) -> None:
    checkpoint = _checkpoint(tmp_path / "c.pt")
    saved = torch.load(checkpoint, weights_only=True)["policy"]
    policy = _starting(checkpoint, space=space, seed=7)
    for key, value in saved["network"].items():
        assert torch.equal(policy.net.state_dict()[key], value), key
    mine = policy.obs_normalizer.state_dict()
    for part, stats in saved["obs_normalizer"].items():
        for key, value in stats.items():
            same = torch.equal(mine[part][key], value) if isinstance(value, torch.Tensor) else None
            assert same if same is not None else mine[part][key] == value, (part, key)
    # A new run: no optimiser moments, no updates done, its own schedules.
    assert policy.learner.optimizer.state_dict()["state"] == {}
    assert policy.updates_done == 0 and policy.learner.total_updates == 3
    if space == SPACE:  # ... and it trains on from there (the bandit has two slots)
        run_updates(policy, [BanditEnv(i, 4) for i in range(2)], 1)
        assert policy.updates_done == 1


def test_random_weights_differ_so_the_test_above_can_see_the_load(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "c.pt")
    saved = torch.load(checkpoint, weights_only=True)["policy"]["network"]
    fresh = make_policy(SLOTS, n_envs=2, max_epochs=4, total_updates=3, seed=7)
    assert any(not torch.equal(fresh.net.state_dict()[k], v) for k, v in saved.items())


def _one_line(caught: pytest.ExceptionInfo[CheckpointError]) -> str:
    message = str(caught.value)
    assert "\n" not in message and message.startswith("policies.ppo.init_from: ")
    return message


def test_a_flat_checkpoint_is_refused(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "flat.pt", PPOOptions(hidden_size=16))
    with pytest.raises(CheckpointError) as caught:
        _starting(checkpoint)
    message = _one_line(caught)
    assert "holds a flat network" in message
    assert message.endswith("--set policies.ppo.network=slots")


def test_a_network_of_other_options_is_refused_with_the_settings_that_fit(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "c.pt")
    with pytest.raises(CheckpointError) as caught:
        _starting(checkpoint, attrs.evolve(SLOTS, hidden_size=32, trunk="lstm"))
    message = _one_line(caught)
    assert (
        "trained with trunk=mlp, hidden_size=16, this run has trunk=lstm, hidden_size=32" in message
    )
    assert message.endswith("add --set policies.ppo.trunk=mlp --set policies.ppo.hidden_size=16")


def test_a_missing_checkpoint_and_another_lifecycle_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as caught:
        _starting(tmp_path / "nowhere")
    assert "not found" in _one_line(caught)
    checkpoint = _checkpoint(tmp_path / "c.pt")
    with pytest.raises(CheckpointError) as caught:
        _starting(checkpoint, space=attrs.evolve(SPACE, tempos=(2, 4)))
    assert "tempos: checkpoint has [3, 5, 8]" in _one_line(caught)


def test_init_from_lets_an_evaluation_start_without_allow_untrained(tmp_path: Path) -> None:
    """Not a random policy: ``esper run --set policies.ppo.init_from=X`` acts with X."""
    from .helpers import context

    checkpoint = _checkpoint(tmp_path / "c.pt")
    policy = PPOPolicy(attrs.evolve(SLOTS, init_from=str(checkpoint)), context(n_envs=1))
    saved = torch.load(checkpoint, weights_only=True)["policy"]["network"]
    assert all(torch.equal(policy.net.state_dict()[k], v) for k, v in saved.items())
