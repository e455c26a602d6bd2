"""The environment: step order, fused counterfactuals, governor, determinism, gym."""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import torch

from esper_core.converter import converter
from esper_core.env.episode import EpisodeStats
from esper_core.env.evaluation import EvalResult, validate_pending
from esper_core.env.pending import fetch
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.actions import WAIT, LifecycleOp
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import EpochCompleted, GovernorRollback, SeedGerminated
from tests.fakes import RES, AccuracyDeltaReward, TinyTask, drive_to, make_env


def test_step_runs_in_domain_order(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env()
    log: list[str] = []
    import esper_core.env.env as env_module

    slot = env.model.slot("r0c0")
    original = {
        "train": env.trainer.train_batch,
        "validate": env_module.validate_pending,
        "governor": env.governor.check,
        "tick": slot.end_epoch,
        "reward": env.reward.compute,
        "observe": env_module.observe,
    }

    def wrap(name: str, fn):  # type: ignore[no-untyped-def]
        def inner(*args, **kwargs):  # type: ignore[no-untyped-def]
            if not log or log[-1] != name:
                log.append(name)
            return fn(*args, **kwargs)

        return inner

    def train_batch(*args, **kwargs):  # type: ignore[no-untyped-def]
        # The action has been applied before the first batch trains.
        assert env.model.slot("r0c0").stage == Stage.GERMINATED
        return wrap("train", original["train"])(*args, **kwargs)

    monkeypatch.setattr(env.trainer, "train_batch", train_batch)
    monkeypatch.setattr(env_module, "validate_pending", wrap("validate", original["validate"]))
    monkeypatch.setattr(env.governor, "check", wrap("governor", original["governor"]))
    monkeypatch.setattr(slot, "end_epoch", wrap("tick", original["tick"]))
    monkeypatch.setattr(env.reward, "compute", wrap("reward", original["reward"]))
    monkeypatch.setattr(env_module, "observe", wrap("observe", original["observe"]))
    env.step(env.space.germinate("r0c0", "res"))
    assert log == ["train", "validate", "governor", "tick", "reward", "observe"]


def validate(*args: Any, **kwargs: Any) -> EvalResult:
    result: EvalResult = fetch(validate_pending(*args, **kwargs))[0]
    return result


def _bn_stats(model: torch.nn.Module) -> list[torch.Tensor]:
    return [b.clone() for name, b in model.named_buffers() if "running" in name]


def test_fused_counterfactuals_equal_sequential_passes() -> None:
    env = make_env("env.max_epochs=20")
    drive_to(env, "r0c0", "HOLDING", blueprint="res_random")
    drive_to(env, "r0c1", "BLENDING", blueprint="res_random", style="gated")
    env.step(WAIT)
    model, task = env.model, env.task
    before = _bn_stats(model)
    fused = validate(model, task, env._eval_batches(env.data.val))
    assert set(fused.contributions) == {"r0c0", "r0c1"} and fused.all_off_accuracy is not None
    plain = validate(model, task, env._eval_batches(env.data.val), counterfactual=False)
    assert fused.accuracy == pytest.approx(plain.accuracy, abs=1e-9)
    assert fused.loss == pytest.approx(plain.loss, rel=1e-5)
    for slot_id, contribution in fused.contributions.items():
        with model.slot(slot_id).alpha_override(0.0):
            off = validate(model, task, env._eval_batches(env.data.val), counterfactual=False)
        assert contribution == pytest.approx(plain.accuracy - off.accuracy, abs=1e-6)
    with model.slot("r0c0").alpha_override(0.0), model.slot("r0c1").alpha_override(0.0):
        all_off = validate(model, task, env._eval_batches(env.data.val), counterfactual=False)
    assert fused.all_off_accuracy == pytest.approx(all_off.accuracy, abs=1e-6)
    for a, b in zip(before, _bn_stats(model)):
        assert torch.equal(a, b), "validation changed BatchNorm statistics"


def test_same_seed_same_episode() -> None:
    def episode() -> list[tuple[float, float, float]]:
        env = make_env(seed=3)
        out = []
        for _ in range(env.max_epochs):
            first = (
                next(i for i, r in enumerate(env.observation.slots) if r.stage == Stage.DORMANT)
                if bool(env.observation.masks.op[LifecycleOp.GERMINATE])
                else None
            )
            action = (
                env.space.germinate(env.space.slot_ids[first], "res_random")
                if first is not None
                else WAIT
            )
            r = env.step(action)
            out.append((r.metrics.train_loss, r.metrics.val_acc, r.reward))
        return out

    assert episode() == episode()


def test_illegal_action_is_refused_and_counted() -> None:
    env = make_env()
    result = env.step(env.space.on_slot(LifecycleOp.FOSSILIZE, "r0c0"))
    assert result.refused is not None and "FOSSILIZE" in result.refused
    assert result.info["illegal"] and result.info["refused_actions"] == 1
    result = env.step(
        env.space.germinate("r0c0", "res").__class__(op=LifecycleOp.GERMINATE, slot=99)
    )
    assert "out of range" in (result.refused or "")


def test_nan_loss_rolls_back_and_the_run_continues() -> None:
    env = make_env("env.max_epochs=12")
    drive_to(env, "r0c0", "TRAINING")
    for _ in range(2):
        env.step(WAIT)
    snapshot_host = {k: v.clone() for k, v in env.governor.snapshot_state["host"].items()}  # type: ignore[index]
    task_loss = env.task.loss
    env.task.loss = lambda out, y: task_loss(out, y) * float("nan")  # type: ignore[method-assign]
    try:
        result = env.step(WAIT)
    finally:
        env.task.loss = task_loss  # type: ignore[method-assign]
    assert result.rolled_back and result.terminal and not result.done
    assert result.reward_components["governor_penalty"] == -10.0
    assert any(isinstance(e, GovernorRollback) for e in result.events)
    assert env.model.slot("r0c0").stage in (Stage.PRUNED, Stage.EMBARGOED)
    for k, v in env.model.host.state_dict().items():
        assert torch.equal(v, snapshot_host[k]), k
    following = env.step(WAIT)
    assert math.isfinite(following.metrics.val_loss) and not following.rolled_back


def test_upstream_host_layers_learn_through_a_fossil() -> None:
    env = make_env("env.max_epochs=20")
    drive_to(env, "r0c0", "FOSSILIZED", blueprint="res")
    block0 = env.model.host.blocks[0][0].weight
    before = block0.detach().clone()
    env.step(WAIT)
    assert not torch.equal(before, block0.detach()), "layers upstream of a fossil stopped learning"
    # With alpha = 1 the direct path carries no gradient: what reaches block 0 went through the seed.
    x, y = next(iter(env._eval_batches(env.data.train)))
    env.model.zero_grad(set_to_none=True)
    env.task.loss(env.model(x), y).backward()
    assert block0.grad is not None and block0.grad.abs().sum() > 0


def test_seed_optimizer_follows_the_slot_including_the_gate() -> None:
    env = make_env()
    env.step(env.space.germinate("r0c0", "res", "gated"))
    opt = env.trainer.seed_optimizers["r0c0"].optimizer
    in_opt = {id(p) for group in opt.param_groups for p in group["params"]}
    slot = env.model.slot("r0c0")
    assert slot.gate is not None
    assert {id(p) for p in slot.seed_parameters()} == in_opt
    assert {id(p) for p in slot.gate.parameters()} <= in_opt


def test_germination_events_are_emitted_after_the_epoch() -> None:
    env = make_env()
    result = env.step(env.space.germinate("r0c1", "res"))
    kinds = [type(e).__name__ for e in result.events]
    assert kinds[0] == "SeedGerminated" and kinds[-1] == "EpochCompleted"
    germinated = result.events[0]
    assert isinstance(germinated, SeedGerminated) and germinated.slot_id == "r0c1"


def test_the_actions_reason_reaches_the_step_result_and_the_epoch_event() -> None:
    env = make_env()
    why = "r0c1: res: capacity limit"
    result = env.step(env.space.germinate("r0c1", "res").because(why))
    epoch = result.events[-1]
    assert isinstance(epoch, EpochCompleted)
    assert result.reason == epoch.reason == why
    # A policy that gives no reason still works: the reason is empty.
    result = env.step(WAIT)
    assert result.reason == "" and isinstance(result.events[-1], EpochCompleted)
    assert result.events[-1].reason == ""


def test_state_dict_round_trip_mid_episode() -> None:
    env = make_env(seed=5)
    drive_to(env, "r0c0", "BLENDING", style="gated")
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)  # as a checkpoint does: no tensor is shared
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    twin = make_env(seed=5)
    twin.load_state_dict(state)
    # The expansion scores are those measured before the epoch's end ticked the slots,
    # not a new probe of the model as it is after (which reads other numbers).
    assert env.observation.expansion and twin.observation.expansion == env.observation.expansion
    for _ in range(3):
        a, b = env.step(WAIT), twin.step(WAIT)
        assert a.observation.expansion == b.observation.expansion
        assert (a.metrics.val_acc, a.metrics.train_loss, a.metrics.val_loss) == (
            b.metrics.val_acc,
            b.metrics.train_loss,
            b.metrics.val_loss,
        )
        assert a.reward == b.reward and a.observation.slots == b.observation.slots


def _checkpointed(env: Any) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    buffer.seek(0)
    state: dict[str, Any] = torch.load(buffer, weights_only=True)
    return state


def test_env_state_is_plain_data_through_the_converter() -> None:
    env = make_env(seed=5)
    drive_to(env, "r0c0", "TRAINING")
    state = _checkpointed(env)
    assert converter.structure(state["counters"], EpisodeStats) == env.stats
    assert converter.structure(state["last_eval"], EvalResult) == env.last_eval
    assert state["counters"]["n_germinated"] == 1 and state["epoch"] == env.epoch


def test_a_corrupt_env_state_is_a_checkpoint_error() -> None:
    env = make_env(seed=5)
    state = _checkpointed(env)
    state["counters"]["n_pruned"] = "three"
    with pytest.raises(CheckpointError, match=r"counters\.n_pruned: expected an integer"):
        make_env(seed=5).load_state_dict(state)


def test_an_unknown_blueprint_is_a_config_error_naming_the_choices() -> None:
    from esper_core.config import load_config
    from esper_core.env.env import MorphogeneticEnv

    env = make_env(seed=5)
    drive_to(env, "r0c0", "TRAINING", blueprint="res_random")
    state = _checkpointed(env)
    config = load_config(overrides=["lifecycle.min_training_epochs=2", "env.max_epochs=12"])
    only_res = MorphogeneticEnv(TinyTask(), AccuracyDeltaReward(), (RES,), config)
    with pytest.raises(ConfigError) as info:
        only_res.load_state_dict(state)
    assert str(info.value) == (
        "blueprint 'cnn/res_random' is not registered for cnn hosts; available: cnn/res"
    )


def test_gymnasium_env_checker_passes() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    from esper_core.env.gym import EsperGymEnv

    env = EsperGymEnv(make_env("env.max_epochs=4"))
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info["action_mask"][0][0]
    obs, reward, _terminated, truncated, info = env.step(env.action_space.sample())
    assert isinstance(reward, float) and not truncated
    assert gymnasium.spaces.MultiDiscrete is type(env.action_space)


def test_auto_advance_completes_a_lifecycle_with_its_events() -> None:
    from esper_core.run.ledger import SeedLedger

    env = make_env("lifecycle.auto_advance=true", "env.max_epochs=14")
    events = []
    events.extend(env.step(env.space.germinate("r0c0", "res_random")).events)
    for _ in range(13):
        events.extend(env.step(WAIT).events)
    assert env.model.slot("r0c0").stage == Stage.FOSSILIZED
    ledger = SeedLedger()
    ledger.consume(events)
    (record,) = ledger.rows()
    assert record.fate == "fossilized" and record.ended_epoch is not None


def test_parameters_added_count_only_seeds_that_reached_the_output() -> None:
    """A seed still incubating at the episode's end changes nothing the host computes: its
    parameters are reported apart, not as added."""
    from esper_core.run.telemetry import EpisodeFinished

    env = make_env("env.max_epochs=3")
    events = list(env.step(env.space.germinate("r0c0", "res")).events)
    for _ in range(2):
        events += env.step(WAIT).events
    (finished,) = [e for e in events if isinstance(e, EpisodeFinished)]
    assert env.model.slot("r0c0").stage in (Stage.GERMINATED, Stage.TRAINING)
    assert finished.params_added == 0
    assert finished.params_unblended == env.model.seed_param_count() > 0


def test_gain_is_measured_from_the_accuracy_before_the_seed_touched_the_output() -> None:
    env = make_env()
    drive_to(env, "r0c0", "TRAINING")
    training = env.model.slot("r0c0").report()
    assert training.acc_before_blend is None and training.gain is None  # not in the output
    while not env.observation.gates[0].passed:
        env.step(WAIT)
    before = env.last_eval.accuracy  # what validation said just before the blend starts
    env.step(env.space.on_slot(LifecycleOp.ADVANCE, "r0c0"))
    blending = env.model.slot("r0c0").report()
    assert blending.stage == Stage.BLENDING
    assert blending.acc_before_blend == before
    assert blending.gain == pytest.approx(env.last_eval.accuracy - before)
    drive_to(env, "r0c0", "FOSSILIZED")
    fossil = env.model.slot("r0c0").report()
    assert fossil.acc_before_blend == before  # kept: measured once, at the first blend
    assert fossil.gain == pytest.approx(env.last_eval.accuracy - before)
    # ... and handed to the reward families through the snapshots
    from esper_core.env.apply import slot_snapshots

    snapshot = next(s for s in slot_snapshots(env.model) if s.slot_id == "r0c0")
    assert snapshot.gain == fossil.gain
