"""Checkpoints of slot-feature schema 1 (the first pretrained study's three runs, run 1
shipped as ``ppo:pretrained`` until the PPO suite's replaced it) read the features they were trained on, whatever the default
schema: their logits, values and greedy actions on a fixed observation are pinned here
as the code before schema 2 computed them."""

from __future__ import annotations

import pytest
import torch
from esper_tamiyo_ppo.options import PPOOptions

from . import mixed_hosts as mh

RUNS = "docs/results/checkpoints"
FIRST = f"{RUNS}/ppo-pretrained-run-1.pt"
# Per checkpoint: op logits, slot logits (op GERMINATE), blueprint logits (slot 0), values
# and greedy actions of the two observations below, recorded before schema 2 existed.
PINNED = {
    FIRST: (
        [
            [-0.80512, 1.54768, 3.55684, -1.69077, -2.61627, -0.40341],
            [-0.6879, 1.21331, 2.17022, -1.68745, -1.97253, -0.12021],
        ],
        [[-0.09399, -0.13806, 0.21269], [-0.09026, -0.13777, 0.24901]],
        [
            [
                -0.43567,
                -0.06163,
                -0.28015,
                -0.26911,
                -0.27971,
                -0.20167,
                -0.43423,
                -0.2012,
                -0.27883,
                -0.26755,
                -0.27839,
            ],
            [
                -0.39456,
                -0.05677,
                -0.22714,
                -0.23907,
                -0.22669,
                -0.1703,
                -0.39301,
                -0.16982,
                -0.22581,
                -0.23733,
                -0.22537,
            ],
        ],
        [-1.04125, -0.97673],
        [(2, 2, 0, 0, 0, 0), (2, 2, 0, 0, 0, 0)],
    ),
    f"{RUNS}/ppo-pretrained-run-2.pt": (
        [
            [-0.40669, 0.31477, 0.92425, -1.7817, -1.62914, 0.56367],
            [-0.61605, 0.35344, 1.06606, -1.56979, -1.66587, 0.60536],
        ],
        [[-0.24067, 0.08099, 0.24059], [-0.24594, 0.0638, 0.22509]],
        [
            [
                1.34028,
                0.03232,
                1.77798,
                -0.41004,
                1.77649,
                0.07835,
                1.33524,
                0.07671,
                1.77353,
                -0.41508,
                1.77206,
            ],
            [
                1.18771,
                -0.13282,
                1.61412,
                -0.61984,
                1.61261,
                -0.06935,
                1.18253,
                -0.07099,
                1.6096,
                -0.62495,
                1.60811,
            ],
        ],
        [-0.67742, -0.82442],
        [(2, 2, 0, 0, 0, 0), (2, 2, 0, 0, 0, 0)],
    ),
    f"{RUNS}/ppo-pretrained-run-3.pt": (
        [
            [0.24021, 0.19599, 0.44463, -2.81306, -2.15574, 0.42686],
            [0.186, 0.04659, 0.65195, -2.66818, -2.22494, 0.27715],
        ],
        [[0.2393, 0.033, -0.20772], [0.19521, 0.02572, -0.21418]],
        [
            [
                0.32424,
                -0.80888,
                -0.15129,
                -0.18079,
                -0.1507,
                -0.65913,
                0.32674,
                -0.65865,
                -0.14953,
                -0.17843,
                -0.14895,
            ],
            [
                0.38936,
                -0.72135,
                0.0029,
                -0.21932,
                0.00352,
                -0.58593,
                0.39187,
                -0.58542,
                0.00474,
                -0.21715,
                0.00534,
            ],
        ],
        [-0.87486, -0.89717],
        [(2, 1, 0, 0, 0, 0), (2, 1, 0, 0, 0, 0)],
    ),
}


@pytest.mark.parametrize("checkpoint", list(PINNED))
def test_a_schema_1_checkpoint_acts_exactly_as_before(checkpoint: str) -> None:
    op, slot, blueprint, value, actions = PINNED[checkpoint]
    space = mh.space(3, 11)
    observations = [mh.observation(0, 3, 11, epoch=4), mh.observation(1, 3, 11, epoch=7)]
    policy = mh.policy(PPOOptions(), mh.context(space, n_envs=2, argument=checkpoint))
    assert policy.layout.version == 1
    raw = policy._features(observations)
    with torch.no_grad():
        f, _ = policy.net.step(policy.obs_normalizer.normalize(raw), policy.net.initial_state(2))
        got = (
            policy.net.op_logits(f),
            policy.net.slot_logits(f, torch.tensor([1, 1])),
            policy.net.child_logits(f, torch.tensor([0, 0]))["blueprint"],
            policy.net.value(f),
        )
    for tensor, pinned in zip(got, (op, slot, blueprint, value), strict=True):
        torch.testing.assert_close(tensor, torch.tensor(pinned), atol=1e-5, rtol=0)
    assert [a.as_indices() for a in policy.act(observations, greedy=True)] == actions
