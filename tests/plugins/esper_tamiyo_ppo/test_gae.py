"""GAE against a plain Python reference, and the std-only reward normaliser."""

from __future__ import annotations

import math

import torch
from esper_tamiyo_ppo.normalizers import RewardNormalizer
from esper_tamiyo_ppo.update import compute_gae
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_gae(rewards, values, terminals, last_values, gamma, lam):  # type: ignore[no-untyped-def]
    """Textbook GAE, one env at a time, with Python floats and loops."""
    advantages, returns = [], []
    for r, v, d, last in zip(rewards, values, terminals, last_values):
        adv = [0.0] * len(r)
        gae = 0.0
        for t in reversed(range(len(r))):
            if d[t]:
                next_value, gae = 0.0, 0.0  # the segment ends here: nothing flows back across it
            else:
                next_value = v[t + 1] if t + 1 < len(r) else last
            delta = r[t] + gamma * next_value - v[t]
            gae = delta + gamma * lam * gae
            adv[t] = gae
        advantages.append(adv)
        returns.append([a + b for a, b in zip(adv, v)])
    return advantages, returns


def _check(rewards, values, terminals, last_values, gamma, lam):  # type: ignore[no-untyped-def]
    adv, ret = compute_gae(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(values, dtype=torch.float64),
        torch.tensor(terminals, dtype=torch.bool),
        torch.tensor(last_values, dtype=torch.float64),
        gamma,
        lam,
    )
    ref_adv, ref_ret = reference_gae(rewards, values, terminals, last_values, gamma, lam)
    assert torch.allclose(adv, torch.tensor(ref_adv, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(ret, torch.tensor(ref_ret, dtype=torch.float64), atol=1e-9)
    return adv


def test_episode_ending_mid_rollout_and_bootstrap() -> None:
    rewards = [[1.0, 0.0, -10.0, 2.0, 1.0], [0.5, 0.5, 0.5, 0.5, 0.5]]
    values = [[0.3, 0.2, 0.1, 0.4, 0.6], [1.0, 1.1, 1.2, 1.3, 1.4]]
    # env 0: a rollback ends a segment at t=2 and its last step is not terminal;
    # env 1: runs through and is bootstrapped with V=2.0 after the rollout.
    terminals = [[False, False, True, False, False], [False, False, False, False, False]]
    last_values = [0.7, 2.0]
    adv = _check(rewards, values, terminals, last_values, 0.9, 0.95)
    # Hand-checked values: at the terminal step only its own reward counts.
    assert math.isclose(float(adv[0, 2]), -10.0 - 0.1, abs_tol=1e-9)
    assert math.isclose(float(adv[0, 4]), 1.0 + 0.9 * 0.7 - 0.6, abs_tol=1e-9)
    assert math.isclose(float(adv[1, 4]), 0.5 + 0.9 * 2.0 - 1.4, abs_tol=1e-9)


def test_terminal_last_step_ignores_bootstrap_value() -> None:
    adv_a = _check([[1.0, 1.0]], [[0.0, 0.0]], [[False, True]], [123.0], 0.99, 0.95)
    adv_b = _check([[1.0, 1.0]], [[0.0, 0.0]], [[False, True]], [-5.0], 0.99, 0.95)
    assert torch.equal(adv_a, adv_b)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda n: st.integers(1, 7).flatmap(
            lambda t: st.tuples(
                st.lists(
                    st.lists(st.floats(-5, 5), min_size=t, max_size=t), min_size=n, max_size=n
                ),
                st.lists(
                    st.lists(st.floats(-5, 5), min_size=t, max_size=t), min_size=n, max_size=n
                ),
                st.lists(st.lists(st.booleans(), min_size=t, max_size=t), min_size=n, max_size=n),
                st.lists(st.floats(-5, 5), min_size=n, max_size=n),
            )
        )
    ),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
def test_matches_reference(data, gamma: float, lam: float) -> None:  # type: ignore[no-untyped-def]
    rewards, values, terminals, last_values = data
    _check(rewards, values, terminals, last_values, gamma, lam)


def test_reward_normaliser_divides_by_return_std_without_shifting() -> None:
    gamma = 0.9
    norm = RewardNormalizer(n_envs=2, gamma=gamma, clip=10.0)
    rewards = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 1.0]])
    terminals = torch.tensor([[False, True, False], [False, False, False]])
    scaled = norm.normalize_rollout(rewards, terminals)
    # Discounted returns, restarting after env 0's terminal at t=1.
    returns = torch.tensor([[1.0, 2.9, 3.0], [4.0, 3.6, 4.24]], dtype=torch.float64)
    expected_std = math.sqrt(float(returns.flatten().var(unbiased=False)) + 1e-8)
    assert math.isclose(
        norm.std, expected_std, rel_tol=1e-3
    )  # the prior's epsilon count is negligible
    assert torch.allclose(scaled, rewards / norm.std)
    assert torch.equal(torch.sign(scaled), torch.sign(rewards))  # no mean subtraction
    # The open segments' returns carry over to the next rollout.
    assert torch.allclose(norm.returns, torch.tensor([3.0, 4.24], dtype=torch.float64))


def test_reward_normaliser_clips() -> None:
    norm = RewardNormalizer(n_envs=1, gamma=0.5, clip=2.0)
    scaled = norm.normalize_rollout(
        torch.tensor([[0.01, 0.01, 0.01, 100.0]]), torch.zeros(1, 4, dtype=torch.bool)
    )
    assert float(scaled.max()) == 2.0
