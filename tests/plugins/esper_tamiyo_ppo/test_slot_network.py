"""The ``slots`` network: one checkpoint acts on any number of slots and any blueprint
vocabulary, its masks stay exact, its slot head is permutation-equivariant, and it trains
with both ratio clips."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from click.testing import CliRunner
from esper_example_plugin.blueprints import DILATED
from esper_tamiyo_ppo.distributions import BatchMasks, run_heads
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy
from esper_tamiyo_ppo.slot_features import SCHEMA_VERSION, SlotLayout, slot_feature_tensor
from esper_tamiyo_ppo.slot_network import SlotActorCritic
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_core.components.blueprint import Blueprint
from esper_core.config import load_config
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.observation import feature_tensor
from esper_core.errors import CheckpointError
from esper_core.lifecycle.actions import OPS, Action, ActionMasks, LifecycleOp, refusal_reason
from esper_core.lifecycle.stages import STAGES
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint
from esper_core.run.executor import SerialExecutor
from esper_core.run.interrupts import Interrupted
from esper_core.run.resolve import policy_context
from esper_core.run.run_dir import CHECKPOINT, load_run_config
from tests.fakes import BLUEPRINTS, AccuracyDeltaReward, TinyTask, TinyTaskOptions

from .helpers import HISTORY, SPACE, BanditEnv, collect_rollout, make_policy, run_updates
from .test_distributions import masks

SLOTS = PPOOptions(network="slots", hidden_size=16)
LAYOUT = SlotLayout(len(SPACE.slot_ids), len(SPACE.blueprints), HISTORY)


def _sharp(net: SlotActorCritic, seed: int, gain: float = 1.0) -> SlotActorCritic:
    """Varied, sharp logits: a masked choice or a broken permutation would show."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in net.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * gain)
    return net


def _net(layout: SlotLayout, seed: int = 0, gain: float = 1.0) -> SlotActorCritic:
    sizes = {**SPACE.head_sizes, "slot": layout.n_slots, "blueprint": layout.n_blueprints}
    return _sharp(SlotActorCritic(layout, sizes, hidden_size=16), seed, gain)


def _obs(layout: SlotLayout, n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, layout.total, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the network


def test_no_weight_depends_on_the_slot_count_or_the_blueprint_vocabulary() -> None:
    layouts = [SlotLayout(1, 0, 2), SlotLayout(2, 3, 2), SlotLayout(4, 7, 2)]
    states = []
    for layout in layouts:
        torch.manual_seed(0)
        states.append(SlotActorCritic(layout, SPACE.head_sizes, hidden_size=16).state_dict())
    for state in states[1:]:
        assert state.keys() == states[0].keys()
        assert all(torch.equal(state[k], states[0][k]) for k in state)


def test_permuting_the_slots_permutes_the_slot_logits() -> None:
    layout = SlotLayout(4, 3, 2)
    net = _net(layout, seed=1, gain=0.5)
    obs = _obs(layout, 8, seed=2)
    perm = torch.tensor([2, 0, 3, 1])
    run, slots, candidates = layout.split(obs)
    permuted = layout.join(run, slots[:, perm], candidates[:, perm])
    f, fp = net.encode(obs), net.encode(permuted)
    op = torch.randint(len(OPS), (8,), generator=torch.Generator().manual_seed(3))
    logits, logits_p = net.slot_logits(f, op), net.slot_logits(fp, op)
    assert not torch.allclose(logits, logits[:, perm])  # the test can see a permutation
    torch.testing.assert_close(logits_p, logits[:, perm])
    torch.testing.assert_close(net.op_logits(fp), net.op_logits(f))
    torch.testing.assert_close(net.value(fp), net.value(f))
    for j in range(4):  # slot j of the permuted host is slot perm[j] of the original
        chosen = torch.full((8,), j)
        for head, value in net.child_logits(fp, chosen).items():
            torch.testing.assert_close(value, net.child_logits(f, perm[chosen])[head])


def test_permuting_the_blueprints_permutes_their_logits() -> None:
    """Blueprints are scored by their features: their order in the vocabulary is nothing."""
    layout = SlotLayout(2, 5, 2)
    net = _net(layout, seed=4, gain=0.5)
    obs = _obs(layout, 6, seed=5)
    perm = torch.tensor([4, 2, 0, 1, 3])
    run, slots, candidates = layout.split(obs)
    permuted = layout.join(run, slots, candidates[:, :, perm])
    slot = torch.tensor([0, 1, 0, 1, 1, 0])
    scores = net.child_logits(net.encode(obs), slot)["blueprint"]
    torch.testing.assert_close(
        net.child_logits(net.encode(permuted), slot)["blueprint"], scores[:, perm]
    )


@settings(max_examples=30, deadline=None)
@given(masks(), st.integers(0, 2**16), st.booleans())
def test_masked_actions_are_never_sampled(
    mask: ActionMasks, seed: int, deterministic: bool
) -> None:
    net = _net(LAYOUT, seed % 7, gain=2.0)
    n = 64
    out = run_heads(
        net,
        net.encode(_obs(LAYOUT, n, seed)),
        BatchMasks.stack([mask] * n),
        generator=torch.Generator().manual_seed(seed),
        deterministic=deterministic,
    )
    for row in out.actions.tolist():
        action = Action.from_indices(row)
        assert refusal_reason(action, mask, SPACE) is None, (action, mask)
        if action.op == LifecycleOp.GERMINATE:
            assert mask.style[action.style] and mask.tempo[action.tempo]
    assert torch.isfinite(out.log_probs).all() and torch.isfinite(out.entropies).all()


# ---------------------------------------------------------------- learning


@pytest.mark.parametrize("ratio_clip", ["per_head", "joint"])
def test_the_slots_network_learns_a_contextual_bandit(ratio_clip: str) -> None:
    """The bandit of test_learner (each context pays one op) with both ratio clips."""
    n_envs, epochs, updates = 8, 8, 20
    options = attrs.evolve(SLOTS, hidden_size=64, ratio_clip=ratio_clip)
    policy = make_policy(options, n_envs=n_envs, max_epochs=epochs, total_updates=updates)
    _, optimal = run_updates(policy, [BanditEnv(i, epochs) for i in range(n_envs)], updates)
    assert optimal[0] < 0.6
    assert sum(optimal[-3:]) / 3 >= 0.9, optimal


@pytest.mark.parametrize("trunk", ["mlp", "lstm"])
def test_the_update_reevaluates_the_acting_log_probs_exactly(trunk: str) -> None:
    """As for the flat network (test_policy): with the parameters held still, every
    minibatch of the update sees ratio 1, so what was stored is what was acted on."""
    policy = make_policy(attrs.evolve(SLOTS, trunk=trunk, target_kl=0.0), n_envs=3, max_epochs=7)
    envs = [BanditEnv(i, 7, rollback_at=[3] if i != 2 else []) for i in range(3)]
    last = collect_rollout(policy, envs)

    def zero(grads: list[torch.Tensor]) -> None:
        for g in grads:
            g.zero_()

    policy.learner.gradient_sync = zero
    d = policy.update(last)
    assert d["epochs_run"] == 4
    assert d["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert d["ratio_deviation/epoch4"] == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------- one checkpoint, many hosts


def _trained_checkpoint(path: Path) -> Path:
    """A slots policy trained two updates on the bandit (two slots, three blueprints)."""
    policy = make_policy(SLOTS, n_envs=2, max_epochs=4, total_updates=2)
    run_updates(policy, [BanditEnv(i, 4) for i in range(2)], 2)
    save_checkpoint(path, {"policy": policy.state_dict()})
    return path


def _env(blocks: int, blueprints: Sequence[Blueprint], history: int = HISTORY) -> MorphogeneticEnv:
    """A tiny host of ``blocks`` slots, with the bandit's lifecycle vocabularies."""
    config = load_config(
        extra={
            "run": {"telemetry": []},
            "env": {"max_epochs": 3, "history_length": history},
            "lifecycle": {
                "styles": list(SPACE.styles),
                "tempos": list(SPACE.tempos),
                "alpha_targets": list(SPACE.alpha_targets),
            },
        }
    )
    task = TinyTask(TinyTaskOptions(blocks=blocks))
    return MorphogeneticEnv(task, AccuracyDeltaReward(), blueprints, config, 0, "cpu")


def _evaluator(env: MorphogeneticEnv, checkpoint: Path, task: str = "tiny") -> PPOPolicy:
    # The default options (flat, hidden 128): the checkpoint's network options win.
    context = policy_context(env.config, [env], task, str(checkpoint))
    return PPOPolicy(PPOOptions(deterministic=True), context)


@pytest.mark.parametrize(
    ("blocks", "package"), [(1, False), (3, False), (4, False), (1, True), (3, True), (4, True)]
)
def test_one_checkpoint_acts_on_hosts_with_1_3_and_4_slots_and_new_blueprints(
    tmp_path: Path, blocks: int, package: bool
) -> None:
    """Trained on a two-slot, three-blueprint bandit; evaluated on tiny hosts of 1, 3 and
    4 slots, with and without the third-party package's cnn/dilated: it loads, every
    action is legal under the env's masks, and greedy acting is deterministic."""
    checkpoint = _trained_checkpoint(tmp_path / "checkpoint.pt")
    blueprints = (*BLUEPRINTS, DILATED) if package else BLUEPRINTS
    env = _env(blocks, blueprints)
    observation = env.reset(0)
    assert len(env.space.slot_ids) == blocks
    assert ("cnn/dilated" in env.space.blueprints) == package
    policy, twin = _evaluator(env, checkpoint), _evaluator(env, checkpoint)
    assert policy.options.network == "slots" and policy.options.hidden_size == 16
    for _ in range(env.max_epochs):
        (action,) = policy.act([observation])
        assert twin.act([observation]) == [action]  # greedy: the same checkpoint, the same act
        assert refusal_reason(action, observation.masks, env.space) is None
        result = env.step(action)
        assert result.refused is None
        observation = result.observation
    # Every blueprint that fits, the new one included, is a choice of the blueprint head.
    features = policy.obs_normalizer.normalize(policy._features([observation]))
    encoded, _ = policy.net.step(features, policy.net.initial_state(1))
    for slot in range(blocks):
        logits = policy.net.child_logits(encoded, torch.tensor([slot]))["blueprint"]
        assert logits.shape == (1, len(env.space.blueprints))
        assert torch.isfinite(logits).all()


def test_a_blueprint_is_described_by_what_it_is_in_each_slot() -> None:
    """The candidate rows come from the env's observation: the parameters a new seed of
    the blueprint would have in that slot over the host's, identity at birth, branch and
    the epochs before it blends; the run-level and slot rows repeat the flat features."""
    env = _env(3, (*BLUEPRINTS, DILATED))
    obs = env.reset(0)
    layout = SlotLayout(3, len(env.space.blueprints), HISTORY)
    row = slot_feature_tensor([obs], env.space, HISTORY, "cnn")
    run, slots, candidates = layout.split(row[0])
    flat = feature_tensor([obs], env.space, HISTORY)[0]
    run_end = 8 + 2 * HISTORY
    torch.testing.assert_close(run[:run_end], flat[:run_end])
    per_slot = len(STAGES) + 9 + len(env.space.blueprints) + 1
    for i in range(3):
        start = run_end + i * per_slot
        torch.testing.assert_close(
            slots[i, : len(STAGES) + 9], flat[start : start + len(STAGES) + 9]
        )
    j = env.space.blueprints.index("cnn/dilated")
    for i, sid in enumerate(env.space.slot_ids):
        channels = env.model.slot(sid).spec.channels
        expected = [
            math.log1p((9 * channels * channels + channels) / obs.host_params),
            1.0,  # identity at birth
            0.0,  # not a branch
            env.settings.epochs_before_blending(True) / 10.0,
            1.0,  # present: the host's own blueprint in its own slot
        ]
        torch.testing.assert_close(candidates[i, j], torch.tensor(expected))
    assert obs.blueprint_identity[j] and not obs.blueprint_branch[j]


def test_a_flat_checkpoint_is_still_refused_on_another_host(tmp_path: Path) -> None:
    """The contrast: the same host change refuses the flat network (and so does the task)."""
    policy = make_policy(PPOOptions(hidden_size=16), n_envs=1, max_epochs=4)
    checkpoint = tmp_path / "flat.pt"
    save_checkpoint(checkpoint, {"policy": policy.state_dict()})
    with pytest.raises(CheckpointError, match=r"slot ids: checkpoint has \[r0c0, r0c1\], this"):
        _evaluator(_env(3, BLUEPRINTS), checkpoint, task="bandit")
    with pytest.raises(CheckpointError, match="trained on task 'bandit'"):
        _evaluator(_env(2, BLUEPRINTS), checkpoint)


def _slots_state(**changes: object) -> dict[str, object]:
    state = make_policy(SLOTS, n_envs=1, max_epochs=4).state_dict()
    state.update(changes)
    return state


def test_a_slots_checkpoint_of_another_history_length_names_the_fix(tmp_path: Path) -> None:
    env = _env(2, BLUEPRINTS, history=HISTORY + 3)
    checkpoint = tmp_path / "c.pt"
    save_checkpoint(checkpoint, {"policy": _slots_state()})
    with pytest.raises(CheckpointError) as caught:
        _evaluator(env, checkpoint)
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith(
        f"does not match this run: env.history_length: checkpoint was trained with {HISTORY}, "
        f"this run has {HISTORY + 3}; add --set env.history_length={HISTORY}"
    )


def test_a_slots_checkpoint_of_another_feature_schema_is_refused(tmp_path: Path) -> None:
    state = _slots_state()
    schema = {**state["feature_schema"], "version": SCHEMA_VERSION + 1}  # type: ignore[dict-item]
    checkpoint = tmp_path / "c.pt"
    save_checkpoint(checkpoint, {"policy": {**state, "feature_schema": schema}})
    with pytest.raises(
        CheckpointError, match=r"slot-feature schema .* train the policy again"
    ) as e:
        make_policy(SLOTS, n_envs=1, max_epochs=4, argument=str(checkpoint))
    assert "\n" not in str(e.value) and "reads schema versions 1, 2" in str(e.value)


def test_a_slots_checkpoint_of_other_lifecycle_vocabularies_is_refused(tmp_path: Path) -> None:
    """Styles, tempos and alpha targets size the heads: those must match."""
    state = _slots_state()
    space = {**state["space"], "tempos": [2, 4]}  # type: ignore[dict-item]
    checkpoint = tmp_path / "c.pt"
    save_checkpoint(checkpoint, {"policy": {**state, "space": space}})
    with pytest.raises(CheckpointError, match=r"tempos: checkpoint has \[2, 4\]"):
        make_policy(SLOTS, n_envs=1, max_epochs=4, argument=str(checkpoint))


# ---------------------------------------------------------------- through esper train


def _pm(*extra: str) -> PluginManager:
    return PluginManager(extra=["tests.fake_plugin", "policies.ppo", *extra], autoload=False)


def _train(run_dir: Path, resume: bool = False) -> dict[str, Any]:
    config = (
        load_run_config(run_dir)
        if resume
        else load_config(
            extra={
                "run": {
                    "task": "tiny",
                    "policy": "ppo",
                    "reward": "acc_delta",
                    "telemetry": [],
                    "n_envs": 2,
                    "seed": 3,
                    "quiet": True,
                },
                "env": {"max_epochs": 3},
                "train": {"updates": 2, "checkpoint_every": 1},
                "policies": {"ppo": {"network": "slots", "hidden_size": 16, "rollout_episodes": 1}},
            }
        )
    )
    return api.train(
        config, _pm(), run_dir=run_dir, resume=resume, quiet=True, notify=lambda _m: None
    )


def test_training_the_slots_network_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    straight = _train(tmp_path / "straight")
    calls = {"n": 0}
    step = SerialExecutor.step

    def interrupting_step(self, envs, actions):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 5:  # epoch 2 of update 1: mid-rollout, after one update
            signal.raise_signal(signal.SIGINT)
        return step(self, envs, actions)

    monkeypatch.setattr(SerialExecutor, "step", interrupting_step)
    run_dir = tmp_path / "interrupted"
    with pytest.raises(Interrupted):
        _train(run_dir)
    mid = load_checkpoint(run_dir / CHECKPOINT)["policy"]
    assert (mid["updates_done"], mid["buffer"]["step"]) == (1, 2)
    resumed = _train(run_dir, resume=True)
    final = [load_checkpoint(d / CHECKPOINT)["policy"] for d in (tmp_path / "straight", run_dir)]
    assert final[0]["updates_done"] == 2 and final[0]["options"]["network"] == "slots"
    assert all(torch.equal(v, final[1]["network"][k]) for k, v in final[0]["network"].items())
    assert [e["final_test_acc"] for e in straight["episodes"]] == [
        e["final_test_acc"] for e in resumed["episodes"]
    ]


def test_esper_train_slots_then_run_on_other_hosts_and_a_blueprint_package(
    tmp_path: Path,
) -> None:
    from esper_cli.main import build_cli

    group, _ = build_cli()
    cli = CliRunner()
    common = ["--task", "tiny", "--reward", "acc_delta", "--set", "run.telemetry=[]"]
    common += ["--envs", "2", "--max-epochs", "3"]
    out = tmp_path / "trained"
    train = ["train", *common, "--policy", "ppo", "--set", "policies.ppo.network=slots"]
    train += ["--set", "policies.ppo.hidden_size=16", "--updates", "2", "--out", str(out)]
    result = cli.invoke(group, [*train, "--json"], obj={"pm": _pm()})
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["updates"]) == 2
    for name, sets, extra in (
        ("four", ["--set", "tasks.tiny.blocks=4"], ("blueprints.example",)),
        ("one", ["--set", 'env.slots=["r0c1"]'], ()),
    ):
        evaluation = ["run", *common, "--policy", f"ppo:{out}", *sets]
        result = cli.invoke(
            group, [*evaluation, "--out", str(tmp_path / name), "--json"], obj={"pm": _pm(*extra)}
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["episodes_completed"] == 2
