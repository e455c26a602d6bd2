"""Where a width growth meets the rest of the user's setup: close() in the
middle of a ramp, layers the user left out of the optimizer, an optimizer that keeps
its own parameter list, a state loaded by a grower of other growth options, and a
pretrained PPO asked to grow a host it has no head for."""

from __future__ import annotations

import pytest
import torch

from esper_core.errors import ConfigError, GrowerError
from esper_core.grow.grower import Grower
from esper_core.lifecycle.stages import Stage
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    grower_kwargs,
    mlp,
    tabular_batches,
    train_one_epoch,
)
from tests.plugin_set import REPO

TRAIN, VAL = tabular_batches(2, 1, size=16), tabular_batches(1, 2, size=16)


def _grower(
    model: torch.nn.Module, opt: torch.optim.Optimizer | None, *extra: str, max_epochs: int = 8
) -> Grower:
    overrides = ["policies.static.widen_at=0.25", "policies.static.widen_tempo=3", *extra]
    return Grower(
        model, MLP_SLOTS, example_input=TRAIN[0][0], policy="static", optimizer=opt,
        **grower_kwargs(overrides=overrides, max_epochs=max_epochs),
    )  # fmt: skip


def _epochs(grower: Grower, opt: torch.optim.Optimizer, n: int) -> None:
    for _ in range(n):
        train_one_epoch(grower.module, opt, TRAIN)
        grower.end_epoch(VAL)


def test_close_during_a_ramp_prunes_it_and_gives_back_the_users_module() -> None:
    model = mlp()
    keys = list(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grower = _grower(model, opt)
    _epochs(grower, opt, 3)
    growth = grower.env.model.host_growth
    assert growth is not None and growth.stage == Stage.BLENDING  # mask between 0 and 1
    assert grower.close() == "pruned"
    assert list(model.state_dict()) == keys
    mlp().load_state_dict(model.state_dict())  # loads into the user's class
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert held == {id(p) for p in model.parameters()}  # the growth's parameters left
    train_one_epoch(model, opt, TRAIN)  # and the user's loop runs on


def test_close_after_the_fold_keeps_the_widened_layers() -> None:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grower = _grower(model, opt)
    _epochs(grower, opt, 5)
    assert grower.close() == ""  # folded at the end of its ramp, nothing in flight
    assert model.body[0].out_features == 64 and "esper" not in str(list(model.state_dict()))


def test_layers_left_out_of_the_optimizer_stay_out_through_the_growth() -> None:
    """Fine-tuning the head alone: body.2 -> head widens, the head takes its new inputs'
    columns into training; body.0 and body.2 stay out, new rows and folded weights too."""
    model = mlp()
    for p in model.body.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.head.parameters(), lr=1e-2)
    grower = _grower(model, opt)
    _epochs(grower, opt, 2)
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in model.body.parameters()}.isdisjoint(held)
    assert all(not p.requires_grad for p in model.body.parameters())
    assert {id(p) for p in model.head.parameters()} <= held  # its new columns with it
    _epochs(grower, opt, 3)
    assert grower.env.model.host_growths[0].stage == Stage.FOSSILIZED
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in model.body.parameters()}.isdisjoint(held)
    assert model.head.weight.shape == (3, 64) and id(model.head.weight) in held
    frozen = [p.detach().clone() for p in model.body.parameters()]
    train_one_epoch(model, opt, TRAIN)
    assert all(torch.equal(a, b) for a, b in zip(frozen, model.body.parameters()))


def test_an_optimizer_that_keeps_its_own_parameter_list_is_refused_by_name() -> None:
    model = mlp()
    with pytest.raises(GrowerError, match=r"optimizer: torch.optim.LBFGS keeps its own list"):
        _grower(model, torch.optim.LBFGS(model.parameters()))
    grower = _grower(model, None)
    with pytest.raises(GrowerError, match=r"attach_optimizer: torch.optim.LBFGS"):
        grower.attach_optimizer(torch.optim.LBFGS(model.parameters()))


def test_a_state_saved_with_another_widen_factor_is_refused_in_one_line() -> None:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grower = _grower(model, opt, "policies.static.widen_factor=2")
    _epochs(grower, opt, 3)
    saved = grower.state_dict()
    other = mlp()
    three = _grower(other, torch.optim.AdamW(other.parameters()), "policies.static.widen_factor=3")
    with pytest.raises(GrowerError) as caught:
        three.load_state_dict(saved)
    assert "\n" not in str(caught.value)
    assert "policies.static.widen_factor=2.0, this grower 3.0" in str(caught.value)
    same = mlp()
    two = _grower(
        same, torch.optim.AdamW(same.parameters()), "policies.static.widen_factor=2",
        max_epochs=10,  # only the length may change
    )  # fmt: skip
    two.load_state_dict(saved)


def test_a_ppo_checkpoint_without_a_growth_head_asked_to_widen_is_refused_in_one_line() -> None:
    model = mlp()
    # The first pretrained study's run 1 (ppo:pretrained until the PPO suite's): no head.
    first = REPO / "docs" / "results" / "checkpoints" / "ppo-pretrained-run-1.pt"
    with pytest.raises(ConfigError) as caught:
        Grower(
            model, MLP_SLOTS, example_input=TRAIN[0][0], policy=f"ppo:{first}",
            **grower_kwargs(overrides=['policies.ppo.host_growth="widen"'], max_epochs=8),
        )  # fmt: skip
    line = str(caught.value)
    assert "\n" not in line
    assert "policies.ppo.host_growth='widen'" in line and "no host-growth head" in line
    assert not hasattr(model, "esper_slots")  # left as given
