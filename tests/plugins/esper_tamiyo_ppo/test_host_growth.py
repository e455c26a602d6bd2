"""PPO choosing the host's growth (``policies.ppo.host_growth``): a head of its
own, off by default with the shipped layout unchanged; "now" legal once per episode, in
its window, when the env says the growth can start (``host_growth_ready``: a fossil no
longer rules out a widening or a deepening), and only with WAIT; what it samples is what the learner
re-evaluates; and a training run that grew the host resumes to the last bit."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from esper_tamiyo_ppo.distributions import run_heads
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy, saved_model_fields

from esper_core.components.policy import WidthGrowthSpec, grows_host
from esper_core.config import load_config
from esper_core.converter import structure, unstructure
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import HEADS, LifecycleOp
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.executor import SerialExecutor
from esper_core.run.interrupts import Interrupted
from esper_core.run.run_dir import CHECKPOINT, load_run_config
from tests.plugins.esper_tasks.test_transformer_width import _charlm

from .helpers import BanditEnv, context, make_policy
from .test_checkpoint import assert_same

WIDEN = PPOOptions(host_growth="widen", hidden_size=16)


def _observation(epoch: int, max_epochs: int = 10, seeded: bool = False, ready=None):  # type: ignore[no-untyped-def]
    """``ready``: what the env says of the growth (None: as of a widening of every stage,
    which a seed blocks, and never at the last epoch)."""
    env = BanditEnv(0, max_epochs)
    obs = env.reset(0)
    slots = obs.slots
    if seeded:
        slots = (attrs.evolve(slots[0], stage=Stage.TRAINING), slots[1])
    else:
        slots = tuple(attrs.evolve(s, stage=Stage.DORMANT) for s in slots)
    can = not seeded and epoch < max_epochs - 1 if ready is None else ready
    return attrs.evolve(obs, epoch=epoch, slots=slots, host_growth_ready=(can,))


def _bias(policy, op: LifecycleOp, grow: int) -> None:  # type: ignore[no-untyped-def]
    """Make ``op`` and growth choice ``grow`` all but certain."""
    with torch.no_grad():
        policy.net.heads["op"].bias.fill_(-20.0)
        policy.net.heads["op"].bias[int(op)] = 20.0
        policy.net.growth_head.bias.fill_(-20.0)
        policy.net.growth_head.bias[grow] = 20.0


def test_off_keeps_the_shipped_layout_and_on_adds_only_the_head() -> None:
    off = make_policy(PPOOptions(hidden_size=16), n_envs=2)
    on = make_policy(WIDEN, n_envs=2)
    plain, grown = off.net.state_dict(), on.net.state_dict()
    assert off.net.growth_head is None and not any("growth" in k for k in plain)
    assert set(grown) - set(plain) == {"growth_head.weight", "growth_head.bias"}
    # Built after every other layer: the same seed draws the same weights for the rest.
    assert all(torch.equal(plain[k], grown[k]) for k in plain)
    assert off.buffer.actions.shape[-1] == len(HEADS) == on.buffer.actions.shape[-1] - 1
    assert off.online_host_growths() == [] and not grows_host(off)
    assert on.online_host_growths() == [WidthGrowthSpec(at=0.0, factor=2.0)]
    # A checkpoint written before the option existed was trained without the head.
    older = {k: v for k, v in unstructure(PPOOptions()).items() if "growth" not in k}
    assert saved_model_fields({"options": older})["host_growth"] == "off"


def test_now_is_legal_once_an_episode_in_its_window_while_no_slot_holds_a_seed() -> None:
    options = attrs.evolve(WIDEN, host_growth_min_at=0.2, host_growth_max_at=0.5)
    policy = make_policy(options, n_envs=2, max_epochs=10)
    rows = torch.tensor([0])

    def legal(obs) -> bool:  # type: ignore[no-untyped-def]
        masks = policy.growth.masks([obs], rows)
        assert masks is not None and bool(masks[0, 0])  # "not now" always
        return bool(masks[0, 1])

    assert [legal(_observation(e)) for e in range(10)] == [e in (2, 3, 4, 5) for e in range(10)]
    assert not legal(_observation(3, seeded=True))
    policy.growth.asked[0] = True
    assert not legal(_observation(3))
    policy.reset([0])
    assert legal(_observation(3))
    assert make_policy(PPOOptions(), n_envs=1).growth.masks([_observation(3)], rows) is None


def test_now_is_legal_exactly_when_the_env_says_the_growth_can_start() -> None:
    """Inside the window, the env's word decides (its cases, a live seed, a fossil, a
    ramp in flight, the last epoch: tests/plugins/esper_tasks/test_host_growth_ready.py):
    a seed it says is not in the way (a fossil a deepening keeps) does not block "now";
    a reason the policy cannot see (a growth in flight, the last epoch) does."""
    options = attrs.evolve(WIDEN, host_growth_min_at=0.0, host_growth_max_at=0.95)
    policy = make_policy(options, n_envs=1, max_epochs=10)
    rows = torch.zeros(1, dtype=torch.long)

    def legal(obs) -> bool:  # type: ignore[no-untyped-def]
        masks = policy.growth.masks([obs], rows)
        assert masks is not None and bool(masks[0, 0])
        return bool(masks[0, 1])

    assert legal(_observation(3, seeded=True, ready=True))
    assert not legal(_observation(3, ready=False))
    assert not legal(attrs.evolve(_observation(3), host_growth_ready=()))  # none declared
    # A window that reaches the run's end (0.95 x 10 rounds to 10): the env leaves out
    # the last epoch, where a growth would end the run untrained, at alpha 0.
    observations = [_observation(e) for e in range(10)]
    masks = policy.growth.masks(observations, torch.zeros(10, dtype=torch.long))
    assert masks is not None
    assert masks[:, 1].tolist() == [e < 9 for e in range(10)]


def test_it_asks_with_wait_only_and_the_learner_sees_what_it_sampled() -> None:
    policy = make_policy(WIDEN, n_envs=1, max_epochs=10)
    policy.set_training(True)
    policy.reset([0])
    obs = _observation(2)
    policy.begin_rollout([obs])
    _bias(policy, LifecycleOp.GERMINATE, grow=1)
    (action,) = policy.act([obs])
    assert action.op == LifecycleOp.GERMINATE and action.host_growth is None
    assert policy.buffer.actions[0, 0, -1] == 0 and policy.buffer.log_probs[0, 0, -1] == 0
    policy.buffer.add_outcomes(torch.tensor([0]), torch.zeros(1), torch.zeros(1, dtype=torch.bool))

    _bias(policy, LifecycleOp.WAIT, grow=1)
    (action,) = policy.act([_observation(3)])
    assert action.op == LifecycleOp.WAIT
    assert action.host_growth == WidthGrowthSpec(at=0.3, factor=2.0)
    assert "grows the host: widen x2" in action.reason
    policy.buffer.add_outcomes(torch.tensor([0]), torch.zeros(1), torch.zeros(1, dtype=torch.bool))
    # Asked once: the next epoch's head cannot say "now", however biased.
    (action,) = policy.act([_observation(4)])
    assert action.host_growth is None and policy.buffer.actions[0, 2, -1] == 0

    # What each episode has asked survives a checkpoint.
    resumed = make_policy(WIDEN, n_envs=1, max_epochs=10)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.growth.asked.tolist() == [True]
    # Re-evaluated by the learner (the network as it acted on steps 1 and 2).
    buffer, net = policy.buffer, policy.net
    with torch.no_grad():
        features = net.encode(buffer.obs[0, 1:3])
        masks = buffer.masks().map(lambda m: m[0, 1:3])
        out = run_heads(net, features, masks, actions=buffer.actions[0, 1:3])
    assert torch.equal(out.actions, buffer.actions[0, 1:3])
    assert torch.allclose(out.log_probs, buffer.log_probs[0, 1:3], atol=1e-6)
    assert out.used[:, -1].all() and buffer.actions[0, 1, -1] == 1


def _grow_probability(policy, p_now: float) -> None:  # type: ignore[no-untyped-def]
    """WAIT all but certain; "grow now" with probability ``p_now`` at every legal step."""
    _bias(policy, LifecycleOp.WAIT, grow=0)
    with torch.no_grad():
        policy.net.growth_head.weight.zero_()
        policy.net.growth_head.bias.copy_(torch.tensor([0.0, math.log(p_now / (1 - p_now))]))


def _greedy_growth_epoch(p_now: float, first: int = 0) -> int | None:
    policy = make_policy(WIDEN, n_envs=1, max_epochs=10)  # evaluation: deterministic
    policy.reset([0])
    _grow_probability(policy, p_now)
    for epoch in range(first, 10):
        (action,) = policy.act([_observation(epoch)])
        if action.host_growth is not None:
            # The reason quotes the chance of what it did: "now", not the likelier "not now".
            assert f"probability {p_now:.2f}" in action.reason, action.reason
            return epoch
    return None


def test_deterministically_it_grows_at_the_median_of_its_own_growth_moment() -> None:
    # 0.3 at each legal epoch: grown by epoch 1 with probability 1 - 0.7^2 = 0.51, the
    # first to pass one half, although "now" is never the likelier choice of a step.
    assert _greedy_growth_epoch(0.3) == 1
    assert _greedy_growth_epoch(0.6) == 0  # likelier at once
    # 0.1: 1 - 0.9^7 = 0.52 by the window's last epoch (6 of 10) ...
    assert _greedy_growth_epoch(0.1) == 6
    # ... and 0.08 never reaches one half (1 - 0.92^7 = 0.44): it does not grow.
    assert _greedy_growth_epoch(0.08) is None
    # A step where it does not wait (or the growth is not legal) counts for nothing.
    policy = make_policy(WIDEN, n_envs=1, max_epochs=10)
    policy.reset([0])
    _grow_probability(policy, 0.3)
    _bias(policy, LifecycleOp.GERMINATE, grow=1)
    (action,) = policy.act([_observation(2)])
    assert action.host_growth is None and policy.growth.not_yet.tolist() == [1.0]
    _grow_probability(policy, 0.3)
    (action,) = policy.act([_observation(3, seeded=True)])  # a seed in the way
    assert action.host_growth is None and policy.growth.not_yet.tolist() == [1.0]
    # Where it stands survives a checkpoint, and a new episode starts afresh.
    (action,) = policy.act([_observation(4)])
    assert action.host_growth is None
    resumed = make_policy(WIDEN, n_envs=1, max_epochs=10)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.growth.not_yet.tolist() == pytest.approx([0.7])
    _grow_probability(resumed, 0.3)
    (action,) = resumed.act([_observation(5)])
    assert action.host_growth is not None  # 1 - 0.7^2 reached after the resume
    resumed.reset([0])
    assert resumed.growth.not_yet.tolist() == [1.0]


def test_sampling_it_still_draws_each_step() -> None:
    policy = make_policy(WIDEN, n_envs=1, max_epochs=10)
    policy.set_training(True)
    _grow_probability(policy, 0.3)
    grown = []
    for _episode in range(200):
        policy.reset([0])
        policy.begin_rollout([])
        for epoch in range(7):
            (action,) = policy.act([_observation(epoch)])
            policy.buffer.clear()
            if action.host_growth is not None:
                grown.append(epoch)
                break
    # Sampled: grown in 1 - 0.7^7 = 92 % of the episodes, at every epoch of the window.
    assert 0.85 < len(grown) / 200 < 0.98 and set(grown) == set(range(7))


def test_its_request_is_the_decision_the_env_records(pm: PluginManager, tmp_path: Path) -> None:
    """The request rides on the action as the heuristic's does: the epoch's event names the
    growth (it read WAIT) and keeps PPO's reason."""
    from esper_core.env.gym import make_env
    from esper_core.lifecycle.actions import WAIT
    from esper_core.run.telemetry import EpochCompleted

    policy = make_policy(WIDEN, n_envs=1, max_epochs=10)
    policy.reset([0])
    _bias(policy, LifecycleOp.WAIT, grow=1)
    (action,) = policy.act([_observation(3)])
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=10")), pm)
    env.reset(0)
    for _ in range(3):
        env.step(WAIT)
    (event,) = [e for e in env.step(action).events if isinstance(e, EpochCompleted)]
    assert event.action == "WIDEN host x2"
    assert event.reason == action.reason and "grows the host: widen x2" in event.reason


@pytest.mark.parametrize("grow", ["deepen", "widen"])
def test_forced_to_grow_after_a_seed_fossilized_it_grows_and_the_run_ends(
    pm: PluginManager, tmp_path: Path, grow: str
) -> None:
    """A fossil in the slot a deepening or a widening touches: the env says the growth can
    start, so "now" is legal, and the request it makes is honoured through to the run's
    end."""
    from esper_core.env.gym import make_env
    from esper_core.env.host_growth import records
    from esper_core.env.host_growth_online import check_declared

    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=5")), pm)
    options = PPOOptions(
        host_growth=grow, host_growth_tempo=2, hidden_size=16, allow_untrained=True
    )
    ctx = attrs.evolve(context(n_envs=1, max_epochs=5, space=env.space), topology="transformer")
    policy = PPOPolicy(options, ctx)
    check_declared([env], policy.online_host_growths())
    env.install_at_birth(["transformer/block@r0c1"])  # the top slot, which it touches
    obs = env.reset(0)
    assert env.model.slot("r0c1").stage == Stage.FOSSILIZED
    policy.reset([0])
    _bias(policy, LifecycleOp.WAIT, grow=1)
    asked, small = [], env.host_params
    for _ in range(5):
        (action,) = policy.act([obs])
        asked.append(action.host_growth is not None)
        result = env.step(action)
        obs = result.observation
    assert asked == [True, False, False, False, False] and result.done
    assert [r.stage for r in records(env)] == ["FOSSILIZED"] and env.host_params > small
    assert env.model.slot("r0c1").stage == Stage.FOSSILIZED


def test_a_widening_at_its_first_decision_pays_its_compute(
    pm: PluginManager, tmp_path: Path
) -> None:
    """A "now" at the first decision grows the host before it has trained a batch; the
    observation's FLOPs ratio (which the reward's compute rent prices) still counts it
    against the host as built, as it does a widening one epoch later."""
    from esper_core.env.gym import make_env
    from esper_core.env.host_growth_online import check_declared

    def ratios(first: int) -> list[float]:
        env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=4")), pm)
        ctx = attrs.evolve(context(n_envs=1, max_epochs=4, space=env.space), topology="transformer")
        policy = PPOPolicy(attrs.evolve(WIDEN, host_growth_tempo=1, allow_untrained=True), ctx)
        check_declared([env], policy.online_host_growths())
        obs, out = env.reset(0), []
        policy.reset([0])
        for epoch in range(3):
            _bias(policy, LifecycleOp.WAIT, grow=1 if epoch == first else 0)
            (action,) = policy.act([obs])
            obs = env.step(action).observation
            out.append(obs.train_flops_ratio)
        return out

    at_once, later = ratios(0), ratios(1)
    assert at_once[0] > 1.5 and later[0] == pytest.approx(1.0)
    assert at_once[-1] == pytest.approx(later[-1])  # one widened host, one price


def test_auto_grows_when_the_head_says_and_as_the_expansion_score_says() -> None:
    """host_growth = auto: it declares both growths; "now" is legal when the growth the
    host's expansion score picks can start (not the other), and the request and its
    reason name that growth: the heuristic's auto rule, read by PPO."""
    from esper_core.components.policy import DepthGrowthSpec

    options = attrs.evolve(WIDEN, host_growth="auto", host_growth_max_at=0.95)
    policy = make_policy(options, n_envs=1, max_epochs=10)
    assert policy.online_host_growths() == [
        WidthGrowthSpec(at=0.0, factor=2.0),
        DepthGrowthSpec(at=0.0, factor=2, mode="stack"),
    ]
    rows = torch.zeros(1, dtype=torch.long)

    def obs(score: float, width: bool, depth: bool):  # type: ignore[no-untyped-def]
        return attrs.evolve(
            _observation(3),
            expansion=(score, math.nan),
            host_growth_kinds=("width", "depth"),
            host_growth_ready=(width, depth),
        )

    def legal(o) -> bool:  # type: ignore[no-untyped-def]
        masks = policy.growth.masks([o], rows)
        assert masks is not None
        return bool(masks[0, 1])

    assert legal(obs(0.5, width=False, depth=True)) and not legal(obs(0.05, False, True))
    assert legal(obs(0.05, width=True, depth=False)) and not legal(obs(0.5, True, False))
    _bias(policy, LifecycleOp.WAIT, grow=1)
    policy.reset([0])
    (deep,) = policy.act([obs(0.5, True, True)])
    assert isinstance(deep.host_growth, DepthGrowthSpec)
    assert "grows the host: deepen x2" in deep.reason and "expansion score 0.50" in deep.reason
    policy.reset([0])
    (wide,) = policy.act([obs(0.05, True, True)])
    assert isinstance(wide.host_growth, WidthGrowthSpec)
    assert (
        "grows the host: widen x2" in wide.reason and "0.05 < depth_expansion_ratio" in wide.reason
    )


@pytest.mark.parametrize(("ratio", "operator"), [(0.0, "depth"), (1e6, "width")])
def test_auto_on_a_real_host_grows_by_the_operator_its_rule_picks(
    pm: PluginManager, tmp_path: Path, ratio: float, operator: str
) -> None:
    """On a real env (charlm, whose transformer may widen or deepen), the expansion score
    the env measures decides: a ratio every score reaches deepens, one none reaches widens."""
    from esper_core.env.gym import make_env
    from esper_core.env.host_growth import records
    from esper_core.env.host_growth_online import check_declared

    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=4")), pm)
    options = PPOOptions(
        host_growth="auto",
        depth_expansion_ratio=ratio,
        host_growth_tempo=1,
        host_growth_min_at=0.25,
        hidden_size=16,
        allow_untrained=True,
    )
    ctx = attrs.evolve(context(n_envs=1, max_epochs=4, space=env.space), topology="transformer")
    policy = PPOPolicy(options, ctx)
    check_declared([env], policy.online_host_growths())
    obs = env.reset(0)
    policy.reset([0])
    _bias(policy, LifecycleOp.WAIT, grow=1)
    for _ in range(4):
        (action,) = policy.act([obs])
        result = env.step(action)
        obs = result.observation
    assert result.done
    assert [r.operator for r in records(env)] == [operator]


USER_CNN = {
    "data": "examples.benchmark_models:digit_images",
    "model": "examples.benchmark_models:cnn_tiny",
    "slots": ["features.2", "features.5"],
    "topology": "cnn",
}


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_auto_on_a_host_that_can_only_widen_declares_the_widening(
    pm: PluginManager, model: str
) -> None:
    """A user's module cannot deepen: auto is "either, as the host can", so the env is
    offered the widening alone (a plain deepen on that host is refused before the run),
    through the component a run builds (the plugin's facade over the policy)."""
    import json

    from esper_tamiyo_ppo.plugin import PPO

    from esper_core.env.gym import make_env
    from esper_core.run.env_builders import fit_envs_to_policy
    from tests.core.benchmark.helpers import USER_MLP

    dataset = USER_MLP if model == "mlp" else USER_CNN
    overrides = ["run.task=dataset", "env.max_epochs=2"]
    overrides += [f"tasks.dataset.{k}={json.dumps(v)}" for k, v in dataset.items()]
    env = make_env(load_config(overrides=overrides), pm)
    ctx = context(n_envs=1, max_epochs=2, space=env.space)

    def fit(kind: str) -> tuple[str, ...]:
        options = PPOOptions(host_growth=kind, hidden_size=16, allow_untrained=True)
        fit_envs_to_policy([env], PPO(options, ctx))
        return tuple(spec.kind for spec in env.online_growth_specs)

    assert fit("auto") == ("width",)
    with pytest.raises(ConfigError, match="cannot grow in depth"):
        fit("deepen")


def test_its_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="host_growth_max_at"):
        structure(
            {"host_growth": "widen", "host_growth_min_at": 0.5, "host_growth_max_at": 0.2},
            PPOOptions,
        )
    with pytest.raises(ConfigError, match="whole number"):
        structure({"host_growth": "deepen", "host_growth_factor": 1.5}, PPOOptions)


# ---------------------------------------------------------------- through esper train


def _config(tmp_path: Path):  # type: ignore[no-untyped-def]
    overrides = _charlm(
        tmp_path,
        'run.policy="ppo"',
        'run.reward="loss"',
        "run.n_envs=2",
        "run.seed=3",
        "env.max_epochs=4",
        "train.updates=2",
        "train.checkpoint_every=1",
        "train.eval_every=0",
        'policies.ppo.host_growth="widen"',
        "policies.ppo.host_growth_tempo=2",
        "policies.ppo.hidden_size=16",
        "policies.ppo.num_minibatches=2",
        "policies.ppo.rollout_episodes=1",
    )
    return load_config(overrides=overrides)


def _train(
    pm: PluginManager, tmp_path: Path, run_dir: Path, resume: bool = False
) -> dict[str, Any]:
    config = load_run_config(run_dir) if resume else _config(tmp_path)
    return api.train(config, pm, run_dir=run_dir, resume=resume, quiet=True, notify=lambda _m: None)


def test_a_training_run_that_grew_the_host_resumes_exactly(
    pm: PluginManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _train(pm, tmp_path, tmp_path / "straight")
    grown = [e["host_params_added"] for e in reference["episodes"]]
    assert any(added > 0 for added in grown), grown  # the untrained policy grew somewhere

    calls = {"n": 0}
    step = SerialExecutor.step

    def interrupting_step(self, envs, actions):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:  # epoch 1 of update 0: both envs have asked (at 0 and 1)
            signal.raise_signal(signal.SIGINT)
        return step(self, envs, actions)

    monkeypatch.setattr(SerialExecutor, "step", interrupting_step)
    run_dir = tmp_path / "interrupted"
    with pytest.raises(Interrupted):
        _train(pm, tmp_path, run_dir)
    mid = load_checkpoint(run_dir / CHECKPOINT)
    assert mid["epoch"] == 2 and mid["policy"]["host_grown"].tolist() == [True, True]
    resumed = _train(pm, tmp_path, run_dir, resume=True)
    final_a = load_checkpoint(tmp_path / "straight" / CHECKPOINT)["policy"]
    final_b = load_checkpoint(run_dir / CHECKPOINT)["policy"]
    assert_same(final_a, final_b, "policy")
    keys = ("final_val_loss", "host_params_added", "train_flops")
    assert [{k: e[k] for k in keys} for e in reference["episodes"]] == [
        {k: e[k] for k in keys} for e in resumed["episodes"]
    ]


def test_a_greedy_evaluation_may_grow_the_host_as_training_may(
    pm: PluginManager, tmp_path: Path
) -> None:
    """The evaluation's envs once declared no growth, so every growth was masked and the
    greedy checks of a host-growing policy never grew, whatever it had learned."""
    from esper_core.run.evaluation import play_trained
    from esper_core.run.session import open_session

    config = _config(tmp_path)
    config = attrs.evolve(config, train=attrs.evolve(config.train, eval_seeds=[41, 42]))
    session = open_session(config, pm, "train", tmp_path / "run", resume=False, quiet=True)
    try:
        seen: list[tuple[bool, ...]] = []
        act = session.policy.act_greedily

        def recording(observations):  # type: ignore[no-untyped-def]
            seen.extend(o.host_growth_ready for o in observations)
            return act(observations)

        session.policy.act_greedily = recording  # type: ignore[method-assign]
        play_trained(session)
    finally:
        session.close()
    assert [e.online_growth_specs for e in session.eval_envs] == [
        e.online_growth_specs for e in session.envs
    ]
    assert seen[:2] == [(True,), (True,)]  # epoch 0 of both episodes: widening can start
