"""The optimizer's state through a growth's fold: for every growth kind, one
step on the folded model equals one step on the masked model it was folded from, under
AdamW whose pieces stepped different numbers of times (esper_core.env.adam_ages), under
amsgrad, and under SGD with momentum.

Each test trains the old parameters first, grows, trains the new pieces fewer steps (or
none), then copies everything: the copy takes its step masked (mask 1) and is folded
after it, the original is folded and then takes its step; both must hold the same
parameters. Before the fix the new slices took the old parameter's step count, which
moved them up to three times too far."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
from esper_operators.host_depth import HostDepthGrowth
from esper_operators.host_width import HostWidthGrowth, plan_by_factor
from esper_tasks.hosts.cnn import CNNHost
from esper_tasks.hosts.transformer import TransformerHost
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.env.adam_ages import LAG_KEY, correct_young_slices
from esper_core.env.optimizers import carry_state, make_optimizer
from esper_core.grow.grower import Grower
from esper_core.lifecycle.host_growth import HostGrowth
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.width_fold import FoldedParam, cat0
from esper_core.recipe import Recipe
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    grower_kwargs,
    mlp,
    tabular_batches,
    train_one_epoch,
)

Make = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
VOCAB, BLOCK = 11, 8
# In float64: a gradient that is zero but for rounding (an attention key's bias) stays
# far below Adam's eps, which float32's rounding would not, and Adam would step it by
# lr in whichever direction the masked or the folded model's rounding picked.
IMAGES = torch.randn(8, 1, 16, 16, generator=torch.Generator().manual_seed(3)).double()
TOKENS = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(3))
TARGETS = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(4))


def _no_blueprint(key: str) -> Blueprint:
    raise AssertionError(f"no seed grows in these tests ({key})")


def _adamw(amsgrad: bool = False) -> Make:
    def make(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(list(params), lr=1e-2, weight_decay=0.1, amsgrad=amsgrad)
        correct_young_slices(opt)  # as the env's optimizers and the Grower hook theirs
        return opt

    return make


def _env_adamw(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The env's host optimizer under an AdamW recipe (it hooks itself)."""
    groups = [{"params": list(params), "weight_decay": 0.1}]
    return make_optimizer(groups, Recipe(optimizer="adamw", lr=1e-2))


def _sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(list(params), lr=1e-2, momentum=0.9, weight_decay=0.1)


def _cnn() -> MorphogeneticModel:
    torch.manual_seed(0)
    return MorphogeneticModel(CNNHost(1, 10, 4, 3, 2), _no_blueprint).double()


def _transformer() -> MorphogeneticModel:
    torch.manual_seed(0)
    host = TransformerHost(VOCAB, BLOCK, 16, n_layer=2, n_head=2, n_segments=2)
    return MorphogeneticModel(host, _no_blueprint).double()


def _cnn_loss(model: nn.Module) -> torch.Tensor:
    return model(IMAGES).logsumexp(dim=1).mean()


def _transformer_loss(model: nn.Module) -> torch.Tensor:
    logits = model(TOKENS)
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), TARGETS.reshape(-1))


def _widen(model: MorphogeneticModel) -> HostGrowth:
    gen = torch.Generator().manual_seed(7)
    plan = plan_by_factor(model.host, 2.0)  # type: ignore[arg-type]
    return HostWidthGrowth(model, plan, tempo=1, generator=gen)


def _deepen(model: MorphogeneticModel) -> HostGrowth:
    return HostDepthGrowth(model, "stack", 2, tempo=1, generator=torch.Generator().manual_seed(7))


def _step(model: nn.Module, opt: torch.optim.Optimizer, loss: Callable[[nn.Module], Any]) -> None:
    opt.zero_grad()
    loss(model).backward()
    opt.step()


def _twin(*objects: Any) -> Any:
    """A deep copy of ``objects``; a copied optimizer loses its hooks: hooked again."""
    twins = copy.deepcopy(objects)
    for twin in twins:
        if isinstance(twin, torch.optim.Optimizer):
            correct_young_slices(twin)
    return twins


def _assert_same(folded: nn.Module, reference: nn.Module) -> None:
    got, want = folded.state_dict(), reference.state_dict()
    assert got.keys() == want.keys()
    tensors = [k for k, v in want.items() if torch.is_tensor(v)]
    assert tensors
    for key in tensors:
        torch.testing.assert_close(
            got[key], want[key], atol=1e-6, rtol=0, msg=lambda m, key=key: f"{key}: {m}"
        )


def _grown(
    model: MorphogeneticModel,
    loss: Callable[[nn.Module], Any],
    grow: Callable[[MorphogeneticModel], HostGrowth],
    make: Make,
    young_steps: int,
) -> tuple[HostGrowth, torch.optim.Optimizer]:
    """Three steps of the old parameters, a growth at mask 1 whose new pieces join a new
    optimizer as the env's does at birth, then ``young_steps`` steps of everything."""
    opt = make(model.host_parameters())
    for _ in range(3):
        _step(model, opt, loss)
    growth = grow(model)
    model.host_growths.append(growth)
    born = make(model.host_parameters())
    carry_state(opt, born)
    growth.tick()  # mask 1, HOLDING: the new pieces learn at once
    for _ in range(young_steps):
        _step(model, born, loss)
    return growth, born


def _assert_fold_steps_as_the_masked_model(
    model: MorphogeneticModel,
    loss: Callable[[nn.Module], Any],
    growth: HostGrowth,
    opt: torch.optim.Optimizer,
    make: Make,
) -> None:
    twin, twin_opt, twin_growth = _twin(model, opt, growth)
    _step(twin, twin_opt, loss)  # the masked model's step
    twin_growth.fossilize()  # only to lay its parameters out as the folded model's
    folded = growth.fossilize()
    after = make(model.host_parameters())
    carry_state(opt, after, folded)
    _step(model, after, loss)
    _assert_same(model, twin)


@pytest.mark.parametrize("young_steps", [0, 2], ids=["new-pieces-never-stepped", "grow-step-fold"])
@pytest.mark.parametrize(
    "make", [_adamw(), _adamw(amsgrad=True), _sgd], ids=["adamw", "amsgrad", "sgd"]
)
def test_a_cnn_stage_widening_folds_its_optimizer_state_exactly(
    make: Make, young_steps: int
) -> None:
    model = _cnn()
    growth, opt = _grown(model, _cnn_loss, _widen, make, young_steps)
    _assert_fold_steps_as_the_masked_model(model, _cnn_loss, growth, opt, make)


@pytest.mark.parametrize("young_steps", [0, 2], ids=["new-pieces-never-stepped", "grow-step-fold"])
def test_a_transformer_width_growth_folds_its_optimizer_state_exactly(young_steps: int) -> None:
    model = _transformer()
    growth, opt = _grown(model, _transformer_loss, _widen, _env_adamw, young_steps)
    _assert_fold_steps_as_the_masked_model(model, _transformer_loss, growth, opt, _env_adamw)


@pytest.mark.parametrize("build, loss", [(_transformer, _transformer_loss), (_cnn, _cnn_loss)])
def test_a_depth_growth_carries_its_optimizer_state_exactly(
    build: Callable[[], MorphogeneticModel], loss: Callable[[nn.Module], Any]
) -> None:
    """The new blocks keep their very tensors through the fold: nothing to assemble, each
    keeps its own step count."""
    model = build()
    growth, opt = _grown(model, loss, _deepen, _adamw(), 2)
    _assert_fold_steps_as_the_masked_model(model, loss, growth, opt, _adamw())


def test_a_second_growth_mid_ramp_keeps_the_first_folds_young_slices() -> None:
    """Mask 0.5 of a second widening, whose old parameters are the first's folded ones
    (with young slices): the regroup at its birth and a checkpoint resumed into a fresh
    optimizer (as the env does) step as the optimizer that was never rebuilt."""
    model = _cnn()
    first, opt = _grown(model, _cnn_loss, _widen, _adamw(), 2)
    folded = first.fossilize()
    after = _adamw()(model.host_parameters())
    carry_state(opt, after, folded)
    assert any(LAG_KEY in s for s in after.state.values())
    _step(model, after, _cnn_loss)
    gen = torch.Generator().manual_seed(8)
    second = HostWidthGrowth(model, plan_by_factor(model.host, 1.5), tempo=2, generator=gen)  # type: ignore[arg-type]
    model.host_growths.append(second)
    second.tick()  # mask 0.5
    reference = _adamw()(model.host_parameters())
    carry_state(after, reference)
    _step(model, reference, _cnn_loss)
    twin, twin_opt = _twin(model, reference)
    _step(twin, twin_opt, _cnn_loss)  # the optimizer as it is
    resumed = _env_adamw(model.host_parameters())
    resumed.load_state_dict(copy.deepcopy(reference.state_dict()))
    _step(model, resumed, _cnn_loss)
    _assert_same(model, twin)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.5, 0.6), weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.5, 0.6), weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.5, 0.6), amsgrad=True, maximize=True),
    ],
    ids=["adamw", "adam-l2", "adam-amsgrad-maximize"],
)
def test_a_folded_parameter_steps_as_its_pieces_until_their_ages_no_longer_matter(
    make: Make,
) -> None:
    """Pieces 53, 3 and 0 steps old folded into one parameter step as they did apart,
    every step; with betas this small, the young slices' lag stops mattering (and is
    dropped) within the 60 steps."""
    torch.manual_seed(0)
    old, new, fresh = (nn.Parameter(torch.randn(n, 4, dtype=torch.float64)) for n in (3, 2, 2))
    x = torch.randn(5, 4, dtype=torch.float64)

    def loss(weight: torch.Tensor) -> torch.Tensor:
        return (x @ weight.T).sin().pow(2).sum()

    apart = make([old])
    for _ in range(50):
        _step(old, apart, loss)
    apart.add_param_group({"params": [new]})
    for _ in range(3):
        _step(old, apart, lambda _: loss(torch.cat([old, new])))
    apart.add_param_group({"params": [fresh]})
    merged = nn.Parameter(torch.cat([old, new, fresh]).detach().clone())
    together = make([merged])
    correct_young_slices(together)
    carry_state(apart, together, [FoldedParam(merged, (old, new, fresh), cat0)])
    assert together.state[merged][LAG_KEY]["lags"] == [50, 53]
    for _ in range(60):
        _step(old, apart, lambda _: loss(torch.cat([old, new, fresh])))
        _step(merged, together, loss)
        torch.testing.assert_close(merged, torch.cat([old, new, fresh]), atol=1e-7, rtol=0)
    assert LAG_KEY not in together.state[merged]


def _mlp_grower() -> tuple[Grower, torch.optim.Optimizer, Any, Any]:
    model = mlp().double()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)  # the user's own
    train = [(x.double(), y) for x, y in tabular_batches(3, 1, size=16)]
    val = [(x.double(), y) for x, y in tabular_batches(2, 2, size=16)]
    overrides = ["policies.static.widen_at=0.25", "policies.static.widen_tempo=3"]
    kwargs = grower_kwargs(overrides=overrides, max_epochs=8)
    grower = Grower(
        model, MLP_SLOTS, example_input=train[0][0], policy="static", optimizer=opt, **kwargs
    )
    return grower, opt, train, val


def test_a_users_layer_pair_folds_the_users_adamw_state_exactly() -> None:
    """Through the Grower, with the user's own AdamW: the layers widen before epoch 2
    (the old parameters stepped 6 times) and fold at the end of epoch 4."""
    grower, opt, train, val = _mlp_grower()
    for _ in range(3):
        train_one_epoch(grower.module, opt, train)
        grower.end_epoch(val)
    train_one_epoch(grower.module, opt, train)
    twin, twin_opt = _twin(grower, opt)
    growth = twin.env.model.host_growth
    assert growth is not None and growth.alpha < 1
    growth.set_alpha(1.0)
    batch = train[0]

    def loss(module: nn.Module) -> torch.Tensor:
        return nn.functional.cross_entropy(module(batch[0]), batch[1])

    _step(twin.module, twin_opt, loss)  # the masked model's step
    growth.operation.fold()
    grower.end_epoch(val)  # alpha 1: folded, the user's optimizer regrouped
    assert grower.env.model.host_growth is None or not grower.env.model.host_growth.in_flight
    _step(grower.module, opt, loss)
    _assert_same(grower.module, twin.module)
