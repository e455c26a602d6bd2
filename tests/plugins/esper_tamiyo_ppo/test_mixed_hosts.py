"""One ``slots`` policy acting on a batch of envs of different hosts and tasks (a mixed
run, ``train.pairs``): schema 2's padded, unit-free features, pooling over present
slots only, masks padded with illegal choices, and the refusals of what cannot read it."""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import pytest
import torch
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads
from esper_tamiyo_ppo.normalizers import SlotObservationNormalizer
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy
from esper_tamiyo_ppo.slot_features import slot_feature_tensor
from esper_tamiyo_ppo.slot_layout import SlotLayout, schema

from esper_core.env.observation import Observation
from esper_core.env.step import EpochMetrics, StepResult
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.actions import Action, refusal_reason
from esper_core.lifecycle.stages import STAGES
from esper_core.run.checkpoint import save_checkpoint

from . import mixed_hosts as mh

SLOTS = PPOOptions(network="slots", hidden_size=16, rollout_episodes=1)
# (slots, blueprints, topology) of the three envs: the union is 4 slots, 11 blueprints.
HOSTS = ((1, 1, "mlp"), (3, 11, "cnn"), (4, 2, "transformer"))
UNION = mh.union(4, 11)


def _batch(epoch: int = 1) -> list[Observation]:
    return [mh.observation(i, s, k, t, epoch=epoch) for i, (s, k, t) in enumerate(HOSTS)]


def _result(obs: Observation, reward: float, done: bool) -> StepResult:
    return StepResult(
        env_index=obs.env_index,
        observation=obs,
        reward=reward,
        reward_components={"r": reward},
        done=done,
        terminal=done,
        metrics=EpochMetrics(1.0, 50.0, 1.0, 50.0, None, None, 0.0, 0),
    )


def _legal(actions: list[Action], observations: list[Observation]) -> None:
    for action, obs, (s, k, t) in zip(actions, observations, HOSTS, strict=True):
        assert refusal_reason(action, obs.masks, mh.space(s, k, t)) is None, (action, s, k)


@pytest.mark.parametrize("trunk", ["mlp", "lstm"])
def test_a_batch_of_three_hosts_acts_observes_and_updates(trunk: str) -> None:
    """Hosts of 1, 3 and 4 slots and 1, 11 and 2 blueprints, three topologies, in one
    batch: sampled and greedy actions are legal in each env's own masks, and the rollout
    trains (the update runs and changes the network)."""
    options = attrs.evolve(SLOTS, trunk=trunk)
    policy = mh.policy(options, mh.context(UNION, max_epochs=2, topology="cnn"))
    assert policy.layout.version == 2 and policy.layout.has_presence
    before = {k: v.clone() for k, v in policy.net.state_dict().items()}
    policy.set_training(True)
    policy.reset([0, 1, 2])
    observations = _batch(epoch=0)
    policy.begin_rollout(observations)
    for epoch in range(2):
        _legal(policy.act(observations, greedy=True), observations)
        actions = policy.act(observations)
        _legal(actions, observations)
        observations = _batch(epoch=epoch + 1)
        policy.observe([_result(o, float(o.env_index), epoch == 1) for o in observations])
    diagnostics = policy.update(observations)
    assert math.isfinite(diagnostics["approx_kl"])
    after = policy.net.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # Sampling many times reaches every head's choices, never an illegal one.
    policy.set_training(False)
    for _ in range(20):
        _legal(policy.act(observations), observations)


def _pair(
    n_slots: int, n_blueprints: int, padded_slots: int, padded_blueprints: int
) -> tuple[PPOPolicy, PPOPolicy]:
    """The same weights on a host's own space and on a padded one."""
    own = mh.policy(SLOTS, mh.context(mh.space(n_slots, n_blueprints), n_envs=1))
    padded = mh.policy(SLOTS, mh.context(mh.union(padded_slots, padded_blueprints), n_envs=1))
    with torch.no_grad():  # sharp logits: a padded row that leaked in would show
        generator = torch.Generator().manual_seed(0)
        for param in own.net.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.7)
    padded.net.load_state_dict(own.net.state_dict())
    return own, padded


# A padded space has wider matrices, so a CPU's kernels may sum in another order:
# float32 rounding differs by about 1e-6 on logits near 1 (seen on one machine), far
# below what a padded row reaching the pooling or the masks would change.
_ATOL = 1e-5


def _heads(policy: PPOPolicy, obs: Observation) -> tuple[torch.Tensor, BatchMasks]:
    raw = policy._features([obs])
    features, _ = policy.net.step(policy.obs_normalizer.normalize(raw), policy.net.initial_state(1))
    masks = BatchMasks.stack([obs.masks], sizes=policy.net.head_sizes)
    return features, masks


def test_a_padded_slot_and_padded_blueprints_change_nothing() -> None:
    """A 2-slot, 3-blueprint host read under a 3-slot, 5-blueprint space: the real slots'
    logits, the values and the log-probabilities of every action are those of its own
    space (the padded rows are absent from the pooling and illegal in the masks)."""
    obs = mh.observation(0, 2, 3)
    own, padded = _pair(2, 3, 3, 5)
    with torch.no_grad():
        (f, m), (fp, mp) = _heads(own, obs), _heads(padded, obs)
        torch.testing.assert_close(padded.net.value(fp), own.net.value(f), atol=_ATOL, rtol=0)
        torch.testing.assert_close(
            padded.net.op_logits(fp), own.net.op_logits(f), atol=_ATOL, rtol=0
        )
        for op in range(6):
            chosen = torch.tensor([op])
            torch.testing.assert_close(
                padded.net.slot_logits(fp, chosen)[:, :2],
                own.net.slot_logits(f, chosen),
                atol=_ATOL,
                rtol=0,
            )
        for slot in range(2):
            mine, theirs = (
                net.child_logits(x, torch.tensor([slot]))
                for net, x in ((own.net, f), (padded.net, fp))
            )
            for head in mine:
                width = mine[head].shape[1]
                torch.testing.assert_close(theirs[head][:, :width], mine[head], atol=_ATOL, rtol=0)
        sampled = run_heads(own.net, f, m, generator=torch.Generator().manual_seed(1))
        again = run_heads(padded.net, fp, mp, actions=sampled.actions)
        torch.testing.assert_close(again.log_probs, sampled.log_probs, atol=_ATOL, rtol=0)
        torch.testing.assert_close(again.entropies, sampled.entropies, atol=_ATOL, rtol=0)
    assert padded.act([obs], greedy=True) == own.act([obs], greedy=True)


def test_padded_masks_keep_each_envs_indices_and_a_legal_choice() -> None:
    hosts = (*HOSTS, (2, 0, "cnn"))  # and a host with no blueprint at all
    observations = [mh.observation(i, s, k, t) for i, (s, k, t) in enumerate(hosts)]
    sizes = {**UNION.head_sizes}
    stacked = BatchMasks.stack([o.masks for o in observations], sizes=sizes)
    assert stacked.slot.shape == (4, 6, 4) and stacked.blueprint.shape == (4, 4, 11)
    assert stacked.alpha_target.shape == (4, 4, 3)
    for b, obs in enumerate(observations):
        s, k = len(obs.slots), obs.masks.blueprint.shape[1]
        assert torch.equal(stacked.slot[b, :, :s], obs.masks.slot)
        assert not stacked.slot[b, :, s:].any()  # no padded slot is ever legal
        assert not stacked.alpha_target[b, s:].any() and not stacked.blueprint[b, s:].any()
        if k:
            assert torch.equal(stacked.blueprint[b, :s, :k], obs.masks.blueprint)
            assert not stacked.blueprint[b, :, k:].any()
        else:  # no blueprint at all: the network's one dummy choice, as a flat head of size 0
            assert stacked.blueprint[b, :s, 0].all() and not stacked.blueprint[b, :, 1:].any()
        for op in range(6):
            assert not stacked.op[b, op] or stacked.slot[b, op].any()
    with pytest.raises(ValueError, match="exceeds"):
        BatchMasks.stack([observations[2].masks], sizes={**sizes, "slot": 3})


def test_schema_2_features_are_unit_free_and_padded() -> None:
    obs = mh.observation(0, 2, 3, topology="mlp", epoch=4)
    layout = SlotLayout(3, 5, mh.HISTORY)
    run, slots, candidates = layout.split(
        slot_feature_tensor([obs], mh.union(3, 5), mh.HISTORY, "cnn")[0]
    )
    assert run.shape[0] == schema(mh.HISTORY)["global"] == layout.global_dim
    topology, (slope, gap, budget) = run[-6:-3].tolist(), run[-3:].tolist()
    assert topology == [0.0, 0.0, 1.0]  # the observation's own (mlp), not the run's cnn
    assert slope == pytest.approx((0.9 / 1.2 - 1) / 3)  # last 3 epochs: 1.2 -> 0.9
    assert gap == pytest.approx((0.9 - 0.7) / 0.9)
    assert budget == pytest.approx(0.6)
    width = len(STAGES) + 9 + 4
    # Slot 1's seed is of the host's own b1 (a branch, not the identity), named by the
    # env's keys, not the run's positional ones; slot 0 is empty.
    assert slots[1, width - 4 : width - 1].tolist() == [1.0, 0.0, 1.0]
    assert slots[0, width - 4 : width - 1].tolist() == [0.0, 0.0, 0.0]
    # Slot 0 measured 0.5, slot 1 had no gradient (NaN): unknown, 0.
    assert slots[0, width:].tolist() == pytest.approx([math.log(0.5), 1.0, 1.0])
    assert slots[1, width:].tolist() == [0.0, 0.0, 1.0]
    assert not slots[2].any() and not candidates[2].any() and not candidates[:, 3:].any()
    assert candidates[1, 2].tolist() == pytest.approx(
        [math.log1p(200 * 4 / 50_000), 1.0, 0.0, 0.2, 1.0]
    )
    # The run's topology stands in for an observation that names none.
    bare = attrs.evolve(obs, topology="")
    run = slot_feature_tensor([bare], mh.union(3, 5), mh.HISTORY, "cnn")[0]
    assert run[layout.global_dim - 6 : layout.global_dim - 3].tolist() == [1.0, 0.0, 0.0]


def test_padding_is_neither_a_sample_nor_a_reading_of_the_normaliser() -> None:
    batch = [mh.observation(0, 2, 3, epoch=2), mh.observation(1, 2, 3, epoch=6)]
    own, padded = SlotLayout(2, 3, mh.HISTORY), SlotLayout(4, 6, mh.HISTORY)
    norms = [SlotObservationNormalizer(layout, clip=10.0) for layout in (own, padded)]
    raws = [
        slot_feature_tensor(batch, space, mh.HISTORY, "cnn")
        for space in (mh.space(2, 3), mh.union(4, 6))
    ]
    for norm, raw in zip(norms, raws, strict=True):
        norm.update(raw)
    for a, b in zip(norms[0].parts, norms[1].parts, strict=True):
        torch.testing.assert_close(b.mean, a.mean)
        torch.testing.assert_close(b.var, a.var)
    out = norms[1].normalize(raws[1])
    _, slots, candidates = padded.split(out)
    assert not slots[:, 2:].any() and not candidates[:, :, 3:].any()
    assert slots[:, :2, -1].eq(1.0).all() and candidates[:, :2, :3, -1].eq(1.0).all()


def test_the_flat_network_refuses_a_mixed_batch_in_one_line() -> None:
    policy = mh.policy(PPOOptions(hidden_size=16), mh.context(UNION))
    with pytest.raises(ConfigError, match=r'mixing pairs needs policies\.ppo\.network = "slots"'):
        policy.act(_batch())
    same = mh.policy(PPOOptions(hidden_size=16), mh.context(mh.space(3, 11), n_envs=1))
    other_task = mh.observation(0, 3, 11, topology="mlp")  # the same sizes, another topology
    with pytest.raises(ConfigError, match="mlp host of 3 slots and 11 blueprints"):
        same.act([other_task])
    assert len(same.act([mh.observation(0, 3, 11)])) == 1


def test_a_schema_1_checkpoint_refuses_a_mixed_batch_and_a_schema_2_one_acts(
    tmp_path: Path,
) -> None:
    v1 = mh.policy(
        PPOOptions(), mh.context(UNION, argument="docs/results/checkpoints/ppo-pretrained-run-1.pt")
    )
    assert v1.layout.version == 1
    with pytest.raises(CheckpointError, match="mixing pairs needs a policy trained with schema 2"):
        v1.act(_batch())
    trained = mh.policy(SLOTS, mh.context(mh.space(2, 3), n_envs=1))
    checkpoint = tmp_path / "checkpoint.pt"
    save_checkpoint(checkpoint, {"policy": trained.state_dict()})
    assert trained.state_dict()["feature_schema"]["version"] == 2
    loaded = mh.policy(PPOOptions(), mh.context(UNION, argument=str(checkpoint)))
    assert loaded.layout.version == 2
    observations = _batch()
    _legal(loaded.act(observations, greedy=True), observations)


def test_resuming_a_run_of_another_schema_is_refused() -> None:
    state = mh.policy(SLOTS, mh.context(mh.space(2, 3), n_envs=1)).state_dict()
    state["feature_schema"] = schema(mh.HISTORY, 1)
    fresh = mh.policy(SLOTS, mh.context(mh.space(2, 3), n_envs=1))
    with pytest.raises(CheckpointError, match="slot-feature schema 1, this run reads 2"):
        fresh.load_state_dict(state)
