"""Width growth keeps the user's own layer objects: the fold widens them in
place (class, attributes, forward hooks and pre-hooks kept, the function at mask 1
kept), a subclass with a forward of its own is refused up front naming it, and a pair
that only a training-mode forward breaks is refused too (checked in both modes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from esper_core.errors import GrowerError
from esper_core.grow.grower import Grower
from esper_core.grow.layer_growth import widenable_layers
from esper_core.grow.layer_widening import LayerWidening
from esper_core.lifecycle.stages import Stage
from tests.integration.own_model_helpers import grower_kwargs, tabular_batches, train_one_epoch


class Tagged(nn.Linear):
    """A subclass that keeps Linear's forward: it can widen, and must stay itself."""

    note = "the class's own"


class ScaledLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * 0.5, self.bias)


class StandardisedConv(nn.Conv2d):
    """A weight-standardised conv: its forward normalises each kernel first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.std((1, 2, 3), keepdim=True) + 1e-5)
        return F.conv2d(x, w, self.bias)


def _hooked() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Tagged(16, 16), nn.ReLU(), nn.Linear(16, 3))
    model[2].tag = "set by the user"
    model[2].register_forward_hook(lambda m, args, out: out * 0.7)
    model[2].register_forward_pre_hook(lambda m, args: (args[0] * 1.1,))
    return model


def test_the_fold_widens_the_users_layers_in_place_keeping_hooks_and_function() -> None:
    model = _hooked()
    x = torch.randn(4, 8)
    reference = copy.deepcopy(model)
    pairs = list(widenable_layers(model, x).pairs)
    assert [p.describe() for p in pairs] == ["0 -> 2 (16 wide)", "2 -> 4 (16 wide)"]
    layers = list(model)
    widening = LayerWidening(
        model, pairs, [16, 16], [19, 19], torch.Generator().manual_seed(1), "random"
    )
    widening.install()
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))  # bit for bit at mask 0, hooks included
        widening.set_mask(1.0)
        masked = model(x)
        widening.fold()
        folded = model(x)
    assert list(model) == layers and all(a is b for a, b in zip(model, layers))
    assert type(model[2]) is Tagged and model[2].tag == "set by the user"
    assert (model[2].in_features, model[2].out_features, model[4].in_features) == (19, 19, 19)
    assert [n for n, _ in model.named_parameters()] == [
        "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
    ]  # fmt: skip
    # The hooks act on the whole widened layer, as on the masked one at mask 1.
    assert torch.allclose(folded, masked, atol=1e-6, rtol=1e-5)


def _grower(
    model: nn.Module, slot: str = "1", **extra: Any
) -> tuple[Grower, torch.optim.Optimizer]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    overrides = ["policies.static.widen_at=0.25", "policies.static.widen_tempo=2"]
    grower = Grower(
        model, [slot], example_input=torch.randn(4, 8), policy="static", optimizer=opt,
        **grower_kwargs(overrides=overrides, max_epochs=8, **extra),
    )  # fmt: skip
    return grower, opt


def test_a_grower_folds_into_the_users_hooked_layer_and_its_optimizer_follows() -> None:
    model = _hooked()
    calls: list[int] = []
    model[2].register_forward_hook(lambda m, args, out: calls.append(out.shape[-1]))
    layer = model[2]
    grower, opt = _grower(model)
    train, val = tabular_batches(2, 1, size=16), tabular_batches(1, 2, size=16)
    for _ in range(5):
        train_one_epoch(model, opt, train)
        grower.end_epoch(val)
    (growth,) = grower.env.model.host_growths
    assert growth.stage == Stage.FOSSILIZED
    assert model[2] is layer and type(layer) is Tagged and layer.out_features == 32
    assert calls[-1] == 32  # the user's hook still runs, on the whole widened output
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in model.parameters()} <= held
    before = layer.weight.detach().clone()
    train_one_epoch(model, opt, train)
    assert not torch.equal(layer.weight, before)  # the widened parameter trains


class OwnForwardMLP(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = layer, nn.ReLU(), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


class OwnForwardCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.act, self.conv2 = StandardisedConv(3, 6, 3), nn.ReLU(), nn.Conv2d(6, 4, 3)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(self.act(self.conv1(x))).mean((2, 3))
        out: torch.Tensor = self.head(h)
        return out


def test_a_subclass_with_a_forward_of_its_own_is_refused_up_front_naming_it() -> None:
    model = OwnForwardMLP(ScaledLinear(8, 16))
    with pytest.raises(GrowerError) as caught:
        _grower(model, "act")
    line = str(caught.value)
    assert "\n" not in line
    assert "fc1 (ScaledLinear) has a forward of its own" in line and "nn.Linear" in line
    assert not any("esper" in n for n, _ in model.named_modules())  # left as given
    report = widenable_layers(OwnForwardCNN(), torch.randn(2, 3, 10, 10))
    assert any("conv1 (StandardisedConv) has a forward of its own" in r for r in report.refused)
    assert [p.describe() for p in report.pairs] == ["conv2 -> head (4 wide)"]


class AuxInTraining(nn.Module):
    """In training mode an auxiliary head also reads the hidden layer: a pair in eval
    mode, a crash in the first training forward after a widening."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.act, self.b, self.aux = (
            nn.Linear(8, 16),
            nn.ReLU(),
            nn.Linear(16, 3),
            nn.Linear(16, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.a(x))
        out: torch.Tensor = self.b(h)
        if self.training:
            out = out + self.aux(h).mean()
        return out


def test_a_pair_that_only_a_training_forward_breaks_is_refused() -> None:
    report = widenable_layers(AuxInTraining(), torch.randn(4, 8))
    assert report.pairs == ()
    assert any(
        r.startswith("a -> b (16 wide): the model's forward fails on the widened layers")
        and r.endswith("in training mode")
        for r in report.refused
    ), report.refused
    with pytest.raises(GrowerError, match="in training mode"):
        _grower(AuxInTraining(), "act")
