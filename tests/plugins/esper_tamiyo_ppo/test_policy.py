"""What the policy stores while acting, and how segments and recurrent state behave."""

from __future__ import annotations

import math

import pytest
import torch
from esper_tamiyo_ppo.distributions import run_heads
from esper_tamiyo_ppo.options import PPOOptions

from esper_core.env.observation import feature_tensor
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.run.executor import SerialExecutor

from .helpers import HISTORY, SPACE, BanditEnv, collect_rollout, make_policy


def _skewed_normalizer(policy) -> None:  # type: ignore[no-untyped-def]
    """Statistics far from (0, 1), so normalised and raw features clearly differ."""
    dim = policy.context.feature_dim
    g = torch.Generator().manual_seed(5)
    policy.obs_normalizer.update(3.0 + 2.0 * torch.randn(256, dim, generator=g))


@pytest.mark.parametrize("trunk", ["mlp", "lstm"])
def test_buffer_holds_the_normalised_observations_the_policy_acted_on(trunk: str) -> None:
    policy = make_policy(PPOOptions(trunk=trunk, hidden_size=16), n_envs=3, max_epochs=5)
    _skewed_normalizer(policy)
    frozen = policy.obs_normalizer.state_dict()
    envs = [BanditEnv(i, 5, rollback_at=[2] if i == 1 else []) for i in range(3)]
    collect_rollout(policy, envs)
    buffer = policy.buffer
    assert buffer.full
    # The normaliser did not move during the rollout.
    assert torch.equal(policy.obs_normalizer.state_dict()["mean"], frozen["mean"])
    raw = buffer.raw_obs.flatten(0, 1)
    assert torch.equal(buffer.obs.flatten(0, 1), policy.obs_normalizer.normalize(raw))
    assert not torch.allclose(buffer.obs, buffer.raw_obs)
    # Re-evaluating the stored actions on the stored observations gives the stored
    # log-probabilities: what is learned from is what was acted on.
    net = policy.net
    with torch.no_grad():
        for env in range(3):
            state = (buffer.state_h[env, :1], buffer.state_c[env, :1])
            features = net.unroll(
                buffer.obs[env].unsqueeze(1), buffer.starts[env].unsqueeze(1), state
            ).squeeze(1)
            masks = buffer.masks().map(lambda m, env=env: m[env])
            out = run_heads(net, features, masks, actions=buffer.actions[env])
            assert torch.allclose(out.log_probs, buffer.log_probs[env], atol=1e-6)
            assert torch.allclose(net.value(features), buffer.values[env], atol=1e-6)


def test_raw_features_match_the_core_feature_vector() -> None:
    policy = make_policy(n_envs=2, max_epochs=3)
    envs = [BanditEnv(i, 3) for i in range(2)]
    observations = [env.reset(i) for i, env in enumerate(envs)]
    policy.set_training(True)
    policy.reset([0, 1])
    policy.begin_rollout(observations)
    policy.act(observations)
    assert torch.equal(policy.buffer.raw_obs[:, 0], feature_tensor(observations, SPACE, HISTORY))


def test_normaliser_is_updated_between_rollouts_with_the_raw_observations() -> None:
    policy = make_policy(n_envs=2, max_epochs=4)
    envs = [BanditEnv(i, 4) for i in range(2)]
    last = collect_rollout(policy, envs)
    raw = policy.buffer.raw_obs.flatten(0, 1).clone()
    count_before = policy.obs_normalizer.rms.count
    policy.update(last)
    rms = policy.obs_normalizer.rms
    assert rms.count == pytest.approx(count_before + raw.shape[0])
    assert torch.allclose(rms.mean.float(), raw.mean(0), atol=1e-4)  # the prior weighs 1e-4 sample


@pytest.mark.parametrize(("trunk", "chunk"), [("mlp", 0), ("lstm", 0), ("lstm", 3)])
def test_the_update_reevaluates_the_acting_log_probs_exactly(trunk: str, chunk: int) -> None:
    """The learner's re-evaluation reproduces the acting log-probs exactly (stored
    observations, masks, LSTM states and segment starts). With every gradient zeroed
    before the step the parameters never move, so every minibatch of every epoch (padded
    LSTM chunks included) must see ratio 1 and approximate KL 0."""
    policy = make_policy(
        PPOOptions(trunk=trunk, hidden_size=16, lstm_chunk_length=chunk, target_kl=0.0),
        n_envs=3,
        max_epochs=7,
    )
    _skewed_normalizer(policy)
    envs = [BanditEnv(i, 7, rollback_at=[3] if i != 2 else []) for i in range(3)]
    last = collect_rollout(policy, envs)
    before = {k: v.clone() for k, v in policy.net.state_dict().items()}

    def zero(grads: list[torch.Tensor]) -> None:
        for g in grads:
            g.zero_()

    policy.learner.gradient_sync = zero
    d = policy.update(last)
    assert all(torch.equal(before[k], v) for k, v in policy.net.state_dict().items())
    assert d["epochs_run"] == 4 and d["minibatches_run"] > 4
    assert d["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    for k in range(1, 5):
        assert d[f"ratio_deviation/epoch{k}"] == pytest.approx(0.0, abs=1e-6)
        assert d[f"clip_fraction/epoch{k}"] == 0.0


def test_rollback_ends_only_that_envs_segment_and_resets_its_lstm_state() -> None:
    policy = make_policy(PPOOptions(trunk="lstm", hidden_size=8), n_envs=2, max_epochs=6)
    envs = [BanditEnv(0, 6, rollback_at=[2]), BanditEnv(1, 6)]
    executor = SerialExecutor()
    observations = [env.reset(i) for i, env in enumerate(envs)]
    policy.set_training(True)
    policy.reset([0, 1])
    policy.begin_rollout(observations)
    for epoch in range(1, 4):
        results = executor.step(envs, policy.act(observations))  # type: ignore[arg-type]
        policy.observe(results)
        observations = [r.observation for r in results]
        if epoch == 2:  # env 0 rolled back: its memory is gone, env 1's is not
            assert bool((policy.recurrent_state[0][0] == 0).all()) and bool(
                (policy.recurrent_state[1][0] == 0).all()
            )
            assert bool((policy.recurrent_state[0][1] != 0).any())
    b = policy.buffer
    assert b.terminals[0, :3].tolist() == [False, True, False]
    assert b.starts[0, :3].tolist() == [True, False, True]
    assert b.starts[1, :3].tolist() == [True, False, False]
    assert bool((b.state_h[0, 2] == 0).all()) and bool((b.state_h[1, 2] != 0).any())
    # Env 1's steps are all still there.
    assert b.step == 3 and bool((b.obs[1, :3].abs().sum(-1) > 0).all())


def test_rollback_penalty_reaches_the_buffer_and_is_not_bootstrapped_across() -> None:
    policy = make_policy(PPOOptions(rollout_episodes=1), n_envs=1, max_epochs=4, gamma=0.9)
    env = BanditEnv(0, 4, rollback_at=[2])
    last = collect_rollout(policy, [env])
    b = policy.buffer
    assert b.terminals[0].tolist() == [False, True, False, True]
    rewards = b.rewards.clone()
    # GAE at the rollback step uses only its own reward and value.
    from esper_tamiyo_ppo.update import compute_gae

    adv, _ = compute_gae(rewards, b.values, b.terminals, torch.tensor([99.0]), 0.9, 0.95)
    assert float(adv[0, 1]) == pytest.approx(float(rewards[0, 1] - b.values[0, 1]))
    policy.update(last)


def test_update_before_the_rollout_is_complete_fails() -> None:
    policy = make_policy(PPOOptions(rollout_episodes=1), n_envs=1, max_epochs=4)
    envs = [BanditEnv(0, 4)]
    obs = [envs[0].reset(0)]
    policy.set_training(True)
    policy.reset([0])
    policy.begin_rollout(obs)
    policy.act(obs)
    with pytest.raises(RuntimeError, match="act\\(\\) was called twice"):
        policy.act(obs)
    with pytest.raises(RuntimeError, match="update\\(\\) after 0 of 4"):
        policy.update(obs)


def test_evaluation_does_not_record_and_deterministic_takes_the_mode() -> None:
    policy = make_policy(PPOOptions(deterministic=True), n_envs=2, max_epochs=4)
    with torch.no_grad():  # make GERMINATE the clear favourite
        policy.net.heads["op"].bias.zero_()
        policy.net.heads["op"].bias[LifecycleOp.GERMINATE] = 5.0
    envs = [BanditEnv(i, 4) for i in range(2)]
    observations = [env.reset(i) for i, env in enumerate(envs)]
    policy.reset([0, 1])
    actions = [policy.act(observations) for _ in range(5)]
    assert all(a.op == LifecycleOp.GERMINATE for step in actions for a in step)
    assert policy.buffer.step == 0 and not policy.buffer.acted


def test_init_op_bias_is_a_prior_over_the_ops_at_the_start() -> None:
    from esper_tamiyo_ppo.network import ActorCritic

    from esper_core.converter import structure
    from esper_core.errors import ConfigError

    sizes = SPACE.head_sizes
    plain = ActorCritic(16, sizes)
    biased = ActorCritic(16, sizes, op_bias={"SET_ALPHA_TARGET": -2.0, "PRUNE": -1.0})
    bias = biased.heads["op"].bias.detach()
    assert float(bias[LifecycleOp.SET_ALPHA_TARGET]) == -2.0
    assert float(bias[LifecycleOp.PRUNE]) == -1.0
    assert (
        float(bias[LifecycleOp.WAIT]) == 0.0 == float(plain.heads["op"].bias.detach().abs().max())
    )
    # the default options carry the prior; the op head's probabilities follow it
    policy = make_policy(n_envs=1, max_epochs=4)
    assert policy.options.init_op_bias == {"SET_ALPHA_TARGET": -2.0, "PRUNE": -1.0}
    with torch.no_grad():
        logits = policy.net.heads["op"](torch.zeros(1, policy.net.hidden_size))[0]
    p = logits.softmax(-1)
    assert float(p[LifecycleOp.SET_ALPHA_TARGET] / p[LifecycleOp.WAIT]) == pytest.approx(
        math.exp(-2.0), rel=1e-5
    )
    for bad in ({"JUMP": 1.0}, {"WAIT": 50.0}, {"WAIT": True}):
        with pytest.raises(ConfigError, match=r"policies\.ppo\.init_op_bias"):
            structure({"init_op_bias": bad}, PPOOptions, path="policies.ppo")
