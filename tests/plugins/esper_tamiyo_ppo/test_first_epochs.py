"""PPO's ``min_epoch``: no germination before the host's first epochs are read, recorded
in the rollout as the mask it acted under, and brought by its checkpoints."""

from __future__ import annotations

import attrs
import torch
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import saved_model_fields

from esper_core.converter import unstructure
from esper_core.lifecycle.actions import LifecycleOp

from .helpers import BanditEnv, make_policy


def _prefer(policy, op: LifecycleOp) -> None:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        policy.net.heads["op"].bias.fill_(-20.0)
        policy.net.heads["op"].bias[int(LifecycleOp.WAIT)] = 0.0  # the next best
        policy.net.heads["op"].bias[int(op)] = 20.0


def _at(epoch: int):  # type: ignore[no-untyped-def]
    obs = BanditEnv(0, 8).reset(0)
    assert bool(obs.masks.op[LifecycleOp.GERMINATE])  # the env itself allows it
    return attrs.evolve(obs, epoch=epoch)


def test_it_germinates_nothing_before_min_epoch_however_much_it_wants_to() -> None:
    policy = make_policy(PPOOptions(hidden_size=16, min_epoch=2), n_envs=1)
    policy.set_training(True)
    policy.reset([0])
    policy.begin_rollout([_at(0)])
    _prefer(policy, LifecycleOp.GERMINATE)
    ops = []
    for epoch in range(3):
        (action,) = policy.act([_at(epoch)])
        ops.append(action.op)
        policy.buffer.add_outcomes(
            torch.tensor([0]), torch.zeros(1), torch.zeros(1, dtype=torch.bool)
        )
    assert ops == [LifecycleOp.WAIT, LifecycleOp.WAIT, LifecycleOp.GERMINATE]
    # The learner re-evaluates each step under the mask it was taken with.
    germinate = policy.buffer.mask_op[0, :3, LifecycleOp.GERMINATE].tolist()
    assert germinate == [False, False, True]


def test_without_it_the_first_decision_may_germinate() -> None:
    policy = make_policy(PPOOptions(hidden_size=16), n_envs=1)
    policy.reset([0])
    _prefer(policy, LifecycleOp.GERMINATE)
    (action,) = policy.act([_at(0)], greedy=True)
    assert action.op == LifecycleOp.GERMINATE


def test_a_checkpoint_brings_the_min_epoch_it_was_trained_with() -> None:
    trained = unstructure(PPOOptions(min_epoch=1))
    assert saved_model_fields({"options": trained})["min_epoch"] == 1
    older = {k: v for k, v in trained.items() if k != "min_epoch"}
    assert saved_model_fields({"options": older})["min_epoch"] == 0
