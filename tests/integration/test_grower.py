"""The Grower in the user's own loop: policies act, seeds join the user's
optimizer, ``wait`` changes nothing, and ``state_dict`` resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from esper_core.errors import GrowerError
from esper_core.grow.grower import FIRST_EPOCH, Grower, GrowthDecision
from esper_core.grow.loop_trainer import GROUP_KEY
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.run.checkpoint import save_checkpoint
from esper_core.run.telemetry import EpisodeFinished
from tests.integration.own_model_helpers import (
    RESNET_SLOTS,
    TRANSFORMER_SLOTS,
    grower_kwargs,
    image_batches,
    resnet,
    token_batches,
    train_one_epoch,
    transformer,
)

# Seeds that blend from germination, so a counterfactual is measured the epoch after.
EAGER = [
    # The capacity trigger and gain judgement (the expansion trigger has no scores
    # before the first end_epoch): a seed at the first epoch end, as these tests need.
    'policies.heuristic.trigger="capacity"',
    'policies.heuristic.judge="gain"',
    "policies.heuristic.min_epoch=0",
    "policies.heuristic.flat_window=1",
    "policies.heuristic.underfit_loss_ratio=0",
    "policies.heuristic.flat_max_drop=100",
    # Seeds alone (no host widening, no fit gate): these tests exercise seed mechanics.
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
]
CASES: dict[str, Any] = {
    "resnet18": (resnet, RESNET_SLOTS, image_batches),
    "transformer": (transformer, TRANSFORMER_SLOTS, token_batches),
}


def _grower(case: str, policy: str, **extra: Any) -> tuple[Grower, Any, Any, Any]:
    build, slots, batches = CASES[case]
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train, val = batches(2, 1), batches(2, 2)
    kwargs = grower_kwargs(**{"overrides": EAGER, "max_epochs": 30, **extra})
    grower = Grower(model, slots, example_input=train[0][0], policy=policy, optimizer=opt, **kwargs)
    return grower, opt, train, val


def _run(grower: Grower, opt: Any, train: Any, val: Any, epochs: int) -> list[Any]:
    results = []
    for _ in range(epochs):
        train_one_epoch(grower.module, opt, train)
        results.append(grower.end_epoch(val))
    return results


def _check_counterfactuals(grower: Grower) -> None:
    """Every blended seed at the last measurement had its contribution measured."""
    for report in grower.reports():
        if report.stage in BLENDED_STAGES and report.epochs_in_stage > 0:
            assert report.contribution is not None, report


def _ppo_checkpoint(case: str, tmp_path: Path) -> str:
    """A PPO policy for this model's action space, saved as a run checkpoint holds it."""
    grower, *_ = _grower(case, "ppo", overrides=[*EAGER, "policies.ppo.allow_untrained=true"])
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"policy": grower.policy.state_dict()})
    return f"ppo:{path}"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("policy", ["heuristic", "random", "ppo"])
def test_each_policy_acts_for_three_epochs_with_counterfactuals(
    case: str, policy: str, tmp_path: Path
) -> None:
    name = _ppo_checkpoint(case, tmp_path) if policy == "ppo" else policy
    grower, opt, train, val = _grower(case, name)
    results = _run(grower, opt, train, val, 3)
    assert [r.observation.epoch for r in results] == [1, 2, 3]
    _check_counterfactuals(grower)
    if policy == "heuristic":  # it germinates at once with these options
        assert grower.env.stats.n_germinated >= 1
        assert any(r.stage in BLENDED_STAGES for r in grower.reports())
        assert any(r.contribution is not None for r in grower.reports())


def test_wait_changes_nothing_in_the_users_loop() -> None:
    """The same loop with and without a Grower(wait): bit-identical weights after 2 epochs."""
    weights = []
    for grow in (False, True):
        model = resnet()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        train, val = image_batches(2, 1), image_batches(2, 2)
        grower = None
        if grow:
            kwargs = grower_kwargs(policy="wait", optimizer=opt)
            grower = Grower(model, RESNET_SLOTS, example_input=train[0][0], **kwargs)
        for _ in range(2):
            train_one_epoch(model, opt, train)
            if grower is not None:
                grower.end_epoch(val)
        # The grown model's state also holds each slot's lifecycle (a dict, no tensor).
        state = model.state_dict().values()
        weights.append([t.clone() for t in state if torch.is_tensor(t)])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)


def _in_optimizer(opt: Any, params: list[torch.Tensor]) -> list[int]:
    """The index of the group holding each of ``params``."""
    where = {id(p): i for i, g in enumerate(opt.param_groups) for p in g["params"]}
    return [where[id(p)] for p in params]


def test_a_seed_joins_its_hosts_group_and_leaves_it_on_prune() -> None:
    grower, opt, train, _val = _grower("resnet18", "wait")
    n_params = len(opt.param_groups[0]["params"])
    slot = grower.model.slot("layer2")
    bp = grower.env.blueprints["cnn/conv_small"]
    slot.germinate("s1", bp, "gated")
    grower.env.trainer.sync_optimizers()
    assert len(opt.param_groups) == 1  # the user's one group, the seed's parameters in it
    params = slot.seed_parameters()
    assert slot.gate is not None and len(list(slot.gate.parameters())) > 0  # gate included
    assert _in_optimizer(opt, params) == [0] * len(params)
    assert len(opt.param_groups[0]["params"]) == n_params + len(params)
    train_one_epoch(grower.module, opt, train)  # momentum state for the seed's parameters
    assert all(p in opt.state for p in slot.seed_parameters())
    slot.prune()
    grower.env.trainer.sync_optimizers()
    assert len(opt.param_groups[0]["params"]) == n_params
    assert not any(p in opt.state for p in params)
    train_one_epoch(grower.module, opt, train)  # the optimizer still steps


def test_seed_group_options_override_the_optimizer_defaults() -> None:
    grower, opt, *_ = _grower("resnet18", "wait", seed_group={"lr": 0.05})
    slot = grower.model.slot("layer1")
    slot.germinate("s1", grower.env.blueprints["cnn/norm"], "linear_add")
    grower.env.trainer.sync_optimizers()
    assert opt.param_groups[-1]["lr"] == 0.05 and opt.param_groups[0]["lr"] == 0.01
    assert opt.param_groups[-1][GROUP_KEY] == "layer1"  # own options: the seed's own group
    assert opt.param_groups[-1]["momentum"] == 0.9  # the rest copied from the host's group


def _snapshot(grower: Grower, opt: Any) -> list[torch.Tensor]:
    tensors = [t.clone() for t in grower.model.state_dict().values() if torch.is_tensor(t)]
    for state in opt.state.values():
        tensors += [v.clone() for v in state.values() if torch.is_tensor(v)]
    return tensors


def test_state_dict_resumes_exactly(tmp_path: Path) -> None:
    grower, opt, train, val = _grower("resnet18", "heuristic")
    _run(grower, opt, train, val, 2)
    assert grower.env.stats.n_germinated >= 1  # a seed and its group to restore
    torch.save(grower.state_dict(), tmp_path / "grower.pt")
    groups = [[id(p) for p in g["params"]] for g in opt.param_groups]
    params = {id(p): name for name, p in grower.model.named_parameters()}
    layout = [[params[i] for i in g] for g in groups]
    _run(grower, opt, train, val, 2)
    uninterrupted = _snapshot(grower, opt)
    reports = grower.reports()

    resumed, opt2, *_ = _grower("resnet18", "heuristic")
    resumed.load_state_dict(torch.load(tmp_path / "grower.pt", weights_only=True))
    params2 = {id(p): name for name, p in resumed.model.named_parameters()}
    assert [[params2[id(p)] for p in g["params"]] for g in opt2.param_groups] == layout
    _run(resumed, opt2, train, val, 2)
    assert resumed.reports() == reports
    for a, b in zip(_snapshot(resumed, opt2), uninterrupted, strict=True):
        assert torch.equal(a, b)


def _host_group_layout(grower: Grower, opt: Any) -> list[str]:
    names = {id(p): name for name, p in grower.model.named_parameters()}
    return [names[id(p)] for p in opt.param_groups[0]["params"]]


def test_a_resume_rejoins_the_seeds_in_the_order_they_joined() -> None:
    """Seeds' parameters sit in the host's group in the order they joined, and the saved
    optimizer state maps to positions in it: a resume rejoins them in that order (here
    against the slots' order), or each seed would be given another's momentum."""
    grower, opt, train, _val = _grower("resnet18", "wait")
    blueprint = grower.env.blueprints["cnn/conv_small"]
    for slot_id in ("layer3", "layer1"):
        grower.model.slot(slot_id).germinate(f"{slot_id}-s1", blueprint, "linear_add")
        grower.env.trainer.sync_optimizers()
    train_one_epoch(grower.module, opt, train)  # momentum for every parameter
    layout = _host_group_layout(grower, opt)
    held = [id(p) for p in opt.param_groups[0]["params"]]
    first, second = (
        [held.index(id(p)) for p in grower.model.slot(s).seed_parameters()]
        for s in ("layer3", "layer1")
    )
    assert max(first) < min(second)  # joined in germination order
    resumed, opt2, *_ = _grower("resnet18", "wait")
    resumed.load_state_dict(grower.state_dict())
    assert _host_group_layout(resumed, opt2) == layout


def test_a_rollback_drops_the_momentum_of_the_weights_it_undid() -> None:
    """The governor puts back the weights of its snapshot; the optimizer state gathered
    since belongs to weights that are gone, so it is dropped, as in the env."""
    grower, opt, train, val = _grower("resnet18", "wait")
    _run(grower, opt, train, val, 2)  # healthy epochs: a snapshot, and momentum
    assert opt.state
    with torch.no_grad():
        grower.module.fc.bias.fill_(float("nan"))  # validation loss NaN: roll back
    result = grower.end_epoch(val)
    assert result.rolled_back
    assert torch.isfinite(grower.module.fc.bias).all()
    assert not opt.state


def test_every_decision_says_why_and_the_reason_survives_a_resume(tmp_path: Path) -> None:
    grower, opt, train, val = _grower("transformer", "heuristic")
    first = grower.decision
    assert first == GrowthDecision(0, "WAIT", FIRST_EPOCH)
    (result,) = _run(grower, opt, train, val, 1)
    assert result.reason == FIRST_EPOCH == result.events[-1].reason  # the epoch it ended
    # The next epoch's: a WAIT that says what the trigger still needs, then the
    # germination once it fires (flat_window=1 needs two epochs of losses).
    assert grower.decision == GrowthDecision(1, "WAIT", "loss seen for 1 of 2 epochs")
    (result,) = _run(grower, opt, train, val, 1)
    assert result.reason == "loss seen for 1 of 2 epochs"
    decision = grower.decision
    assert decision is not None and decision.epoch == 2
    assert decision.action.startswith("GERMINATE") and decision.action == grower.action
    assert "capacity limit" in decision.reason, decision.reason
    assert str(decision) == f"epoch 2: {decision.action}: {decision.reason}"
    torch.save(grower.state_dict(), tmp_path / "grower.pt")
    resumed, *_ = _grower("transformer", "heuristic")
    resumed.load_state_dict(torch.load(tmp_path / "grower.pt", weights_only=True))
    assert resumed.decision == decision
    (result,) = _run(grower, opt, train, val, 1)
    assert result.reason == decision.reason


def test_end_epoch_without_an_optimizer_says_how_to_give_one() -> None:
    model = resnet()
    x = image_batches(1, 0)[0][0]
    grower = Grower(model, RESNET_SLOTS, example_input=x, **grower_kwargs())
    with pytest.raises(GrowerError, match="attach_optimizer"):
        grower.end_epoch(image_batches(1, 2))


def test_a_training_seed_advances_on_gradients_measured_in_the_users_loop() -> None:
    overrides = [*EAGER, "lifecycle.isolation_non_identity=full", "lifecycle.min_training_epochs=1"]
    grower, opt, train, val = _grower("resnet18", "wait", overrides=overrides)
    slot = grower.model.slot("layer3")
    slot.germinate("s1", grower.env.blueprints["cnn/conv_heavy"], "linear_add")
    slot.advance()
    grower.env.trainer.sync_optimizers()
    grower.env.begin_epoch()
    assert slot.stage == Stage.TRAINING
    _run(grower, opt, train, val, 1)
    assert slot.state.gradient_health is not None
    assert slot.state.seed_grad_norm is not None and slot.state.seed_grad_norm > 0
    assert slot.state.grad_ratio is not None and slot.state.grad_ratio > 0


def test_a_static_policys_seeds_are_installed_before_the_first_epoch() -> None:
    extra = {"overrides": ['policies.static.seeds=["conv_small@layer2"]']}
    grower, opt, train, val = _grower("resnet18", "static", **extra)
    slot = grower.model.slot("layer2")
    assert slot.stage == Stage.FOSSILIZED
    params = slot.seed_parameters()
    assert _in_optimizer(opt, params) == [0] * len(params)
    results = _run(grower, opt, train, val, 1)
    assert any(type(e).__name__ == "SeedFossilized" for e in results[0].events)


def test_the_last_epoch_finishes_the_episode_with_the_users_host_counted() -> None:
    """The episode's end counts params_added from the host as built: the
    grower's env records it as the run's env does."""
    grower, opt, train, val = _grower("resnet18", "wait", max_epochs=2)
    *_, last = _run(grower, opt, train, val, 2)
    (finished,) = [e for e in last.events if isinstance(e, EpisodeFinished)]
    assert last.done and (finished.params_added, finished.host_params_added) == (0, 0)


def test_a_heuristic_that_may_deepen_the_host_is_refused_in_one_line() -> None:
    """policies.heuristic with host_growth="deepen" may ask for a depth growth mid-run,
    which the Grower cannot do to a user's module: refused at construction, naming the
    user's layers, as a schedule is, not when the request comes. (Width growth of a
    user's layer pairs: tests/integration/test_grower_width.py.)"""
    build, slots, batches = CASES["resnet18"]
    model = build()
    before = [name for name, _ in model.named_modules()]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kwargs = grower_kwargs(overrides=['policies.heuristic.host_growth="deepen"'], max_epochs=4)
    with pytest.raises(GrowerError, match=r"cannot deepen ResNet.*widen instead") as caught:
        Grower(
            model,
            slots,
            example_input=batches(1, 1)[0][0],
            policy="heuristic",
            optimizer=opt,
            **kwargs,
        )
    assert "\n" not in str(caught.value)
    # It names the user's layers it would have to rewrite (ResNet-18: 20 convs and its fc).
    assert "(conv1 (Conv2d), layer1.0.conv1 (Conv2d), layer1.0.conv2 (Conv2d), " in str(
        caught.value
    )
    assert "layer1.1.conv1 (Conv2d) and 17 more)" in str(caught.value)
    assert [name for name, _ in model.named_modules()] == before
