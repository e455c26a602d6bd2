"""Width growth of a user's own layers through the Grower: which layer pairs
can widen, function preservation at birth, the fold, pruning, the user's optimizer
following the growth, exact resume mid-ramp, and one-line refusals."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from esper_core.env import host_growth
from esper_core.errors import CheckpointError, GrowerError
from esper_core.grow.grower import Grower
from esper_core.grow.layer_growth import widenable_layers
from esper_core.grow.layer_pairs import find_pairs
from esper_core.grow.layer_widening import LayerWidening
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import HostGrowthStarted
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    RESNET_SLOTS,
    grower_kwargs,
    image_batches,
    mlp,
    resnet,
    tabular_batches,
    token_batches,
    train_one_epoch,
    transformer,
)


class SmallCNN(nn.Module):
    """Conv, BatchNorm, ReLU, pool, conv, then a flatten into the head: the flatten makes
    each of the second conv's channels 9 of the head's inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.bn1 = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 5, 3)
        self.head = nn.Linear(5 * 3 * 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        out: torch.Tensor = self.head(F.gelu(self.conv2(x)).flatten(1))
        return out


class Residual(nn.Module):
    """A pre-norm residual MLP block: ``a -> b`` is a pair; ``b`` writes the residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.a, self.b, self.head = nn.Linear(8, 16), nn.Linear(16, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.b(F.gelu(self.a(self.norm(x))))
        out: torch.Tensor = self.head(x)
        return out


class NormedMLP(nn.Module):
    """A LayerNorm between two layers mixes their channels (its statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm, self.head = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.norm(self.a(x)))
        return out


def _pairs(model: nn.Module, x: torch.Tensor) -> list[tuple[str, str, int, int]]:
    return [(p.producer, p.consumer, p.width, p.spread) for p in find_pairs(model, x).pairs]


def test_the_pairs_of_an_mlp_a_cnn_a_residual_block_and_resnet18() -> None:
    assert _pairs(mlp(), torch.randn(4, 8)) == [
        ("body.0", "body.2", 32, 1),
        ("body.2", "head", 32, 1),
    ]
    cnn = SmallCNN()
    report = find_pairs(cnn, torch.randn(2, 3, 12, 12))
    assert _pairs(cnn, torch.randn(2, 3, 12, 12)) == [
        ("conv1", "conv2", 4, 1),
        ("conv2", "head", 5, 9),
    ]
    assert report.pairs[0].norms == ("bn1",)
    assert report.refused == ("head: its outputs are the model's output",)
    residual = find_pairs(Residual(), torch.randn(4, 8))
    assert [(p.producer, p.consumer) for p in residual.pairs] == [("a", "b")]
    assert "b: AddBackward0 after it joins its channels to another tensor" in residual.refused
    # ResNet-18: each block's conv1 -> conv2 (inside the residual), nothing that writes it.
    net = find_pairs(resnet(), torch.randn(2, 3, 32, 32))
    assert [p.producer for p in net.pairs] == [
        f"layer{i}.{j}.conv1" for i in range(1, 5) for j in range(2)
    ]
    assert all(p.norms == (p.producer.replace("conv1", "bn1"),) for p in net.pairs)
    assert any(line.startswith("layer1.0.conv2: AddBackward0") for line in net.refused)
    normed = widenable_layers(NormedMLP(), torch.randn(4, 8))
    assert normed.pairs == ()
    assert normed.refused[0] == "a: norm (LayerNorm) after it mixes its channels"


@pytest.mark.parametrize(
    "build, shape",
    [(mlp, (4, 8)), (SmallCNN, (2, 3, 12, 12)), (resnet, (2, 3, 32, 32))],
    ids=["mlp", "cnn", "resnet18"],
)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_widening_keeps_the_function_at_birth_folds_at_one_and_prunes_back(
    build: Any, shape: tuple[int, ...], mode: str
) -> None:
    torch.manual_seed(0)
    model = build().train(mode == "train")
    x = torch.randn(*shape)
    pairs = find_pairs(model, x).pairs
    reference = copy.deepcopy(model)
    originals = {n: m for n, m in model.named_modules()}
    widening = LayerWidening(
        model, pairs, [p.width for p in pairs], [p.width + 3 for p in pairs],
        torch.Generator().manual_seed(1), "random",
    )  # fmt: skip
    widening.install()
    torch.manual_seed(2)
    born = model(x)
    torch.manual_seed(2)
    assert torch.equal(born, reference(x))  # bit for bit at mask 0
    widening.set_mask(1.0)
    model.eval()
    masked = model(x)
    widening.fold()
    folded = model(x)
    assert not any(type(m).__name__ in ("MaskedLayer", "WidenedNorm") for m in model.modules())
    assert torch.allclose(folded, masked, atol=1e-5, rtol=1e-5)
    widened = dict(model.named_modules())[pairs[0].producer]
    assert widened.weight.shape[0] == pairs[0].width + 3
    # Pruning instead puts the very modules back.
    model2 = build().train(mode == "train")
    before = {n: m for n, m in model2.named_modules()}
    pruned = LayerWidening(
        model2, pairs, [p.width for p in pairs], [p.width + 3 for p in pairs], None, "zero"
    )
    pruned.install()
    pruned.set_mask(0.5)
    pruned.restore()
    assert {n: m for n, m in model2.named_modules()} == before
    # The user's very modules, widened in place.
    assert {n: m for n, m in model.named_modules()} == originals


def _mlp_grower(max_epochs: int = 8, **extra: Any) -> tuple[Grower, Any, Any, Any]:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train, val = tabular_batches(3, 1, size=16), tabular_batches(2, 2, size=16)
    overrides = [
        "policies.static.widen_at=0.25",  # epoch 2 of 8
        "policies.static.widen_tempo=3",
        *extra.pop("overrides", []),
    ]
    kwargs = grower_kwargs(overrides=overrides, max_epochs=max_epochs, **extra)
    grower = Grower(
        model, MLP_SLOTS, example_input=train[0][0], policy="static", optimizer=opt, **kwargs
    )
    return grower, opt, train, val


def _epochs(grower: Grower, opt: Any, train: Any, val: Any, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        train_one_epoch(grower.module, opt, train)
        out.append(grower.end_epoch(val))
    return out


def _optimizer_holds_the_model(grower: Grower, opt: Any) -> None:
    held = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(held) == sorted(id(p) for p in grower.module.parameters())


def test_a_scheduled_widening_of_a_user_mlp_and_the_optimizer_following_it() -> None:
    grower, opt, train, val = _mlp_grower()
    first = grower.module.body[0]
    assert [p.describe() for p in grower.env.model.host.pairs] == [
        "body.0 -> body.2 (32 wide)",
        "body.2 -> head (32 wide)",
    ]
    results = _epochs(grower, opt, train, val, 2)
    (started,) = [e for e in results[1].events if isinstance(e, HostGrowthStarted)]
    assert started.plan == "body.0 -> body.2: 32 -> 64, body.2 -> head: 32 -> 64"
    growth = grower.env.model.host_growth  # born before epoch 2, one tick taken
    assert growth is not None and growth.stage == Stage.BLENDING
    _optimizer_holds_the_model(grower, opt)
    # The seeds' slots carry the widened channels: none may germinate until it is done.
    assert not grower.env.fits.any()
    _epochs(grower, opt, train, val, 1)
    old = grower.module.body[0].weight
    moment = opt.state[old]["exp_avg"].clone()
    _epochs(grower, opt, train, val, 1)  # the third tick: alpha 1, folded
    assert growth.stage == Stage.FOSSILIZED
    wide = grower.module.body[0]
    assert wide is first and wide.out_features == 64  # the user's layer, widened in place
    assert grower.module.head.in_features == 64
    _optimizer_holds_the_model(grower, opt)
    assert old not in opt.state and torch.equal(
        opt.state[wide.weight]["exp_avg"][:32].ne(0), moment.ne(0)
    )
    specs = {s.slot_id: s.channels for s in grower.env.model.host.injection_specs()}
    assert specs == {"body/1": 64, "body/3": 64}
    _epochs(grower, opt, train, val, 4)  # seeds may grow at the new width
    assert grower.env.fits.any()


def test_a_resume_mid_ramp_is_exact(tmp_path: Path) -> None:
    grower, opt, train, val = _mlp_grower()
    _epochs(grower, opt, train, val, 3)
    assert grower.env.model.host_growth is not None
    torch.save(grower.state_dict(), tmp_path / "grower.pt")
    _epochs(grower, opt, train, val, 3)
    resumed, opt2, *_ = _mlp_grower()
    resumed.load_state_dict(torch.load(tmp_path / "grower.pt", weights_only=True))
    _optimizer_holds_the_model(resumed, opt2)
    _epochs(resumed, opt2, train, val, 3)
    a = resumed.module.state_dict()
    for key, value in grower.module.state_dict().items():
        if torch.is_tensor(value):
            assert torch.equal(value, a[key]), key
    moments = [s["exp_avg_sq"] for s in opt.state.values()]
    assert all(
        torch.equal(x, y)
        for x, y in zip([s["exp_avg_sq"] for s in opt2.state.values()], moments, strict=True)
    )
    # A grower whose model widened since cannot take another history.
    fresh, *_ = _mlp_grower()
    with pytest.raises(CheckpointError, match=r"other layer growths"):
        resumed.load_state_dict(fresh.state_dict())


def test_pruning_a_growth_in_flight_restores_the_users_layers() -> None:
    grower, opt, train, val = _mlp_grower()
    first = grower.module.body[0]
    weights = [p.detach().clone() for p in first.parameters()]
    _epochs(grower, opt, train, val, 2)
    assert grower.env.model.host_growth is not None and len(list(first.parameters())) > 2
    assert host_growth.prune(grower.env)
    assert grower.module.body[0] is first and first.weight.shape == weights[0].shape
    assert [n for n, _ in first.named_parameters()] == ["weight", "bias"]
    _optimizer_holds_the_model(grower, opt)
    _epochs(grower, opt, train, val, 1)  # trains on, unwidened


def test_deepening_and_unwidenable_models_are_refused_in_one_line() -> None:
    x = image_batches(1, 1)[0][0]
    model = resnet()
    names = [n for n, _ in model.named_modules()]
    with pytest.raises(GrowerError, match="cannot deepen ResNet") as caught:
        Grower(
            model, RESNET_SLOTS, example_input=x, policy="static",
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            **grower_kwargs(overrides=["policies.static.deepen_at=0.5"], max_epochs=4),
        )  # fmt: skip
    assert "\n" not in str(caught.value)
    assert [n for n, _ in model.named_modules()] == names  # left as given
    normed = NormedMLP()
    with pytest.raises(GrowerError, match=r"cannot widen NormedMLP: .*norm \(LayerNorm\)"):
        Grower(
            normed, ["a"], example_input=torch.randn(4, 8), policy="static",
            optimizer=torch.optim.SGD(normed.parameters(), lr=0.1),
            **grower_kwargs(overrides=["policies.static.widen_at=0.5"], max_epochs=4),
        )  # fmt: skip
    with pytest.raises(GrowerError, match=r"out of range.*stage 1: body.2 -> head"):
        _mlp_grower(overrides=["policies.static.widen_stages=[5]"])


def test_resnet18_widens_inside_its_blocks_in_the_users_loop() -> None:
    model = resnet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train, val = image_batches(1, 1), image_batches(1, 2)
    overrides = ["policies.static.widen_at=0.5", "policies.static.widen_tempo=1",
                 "policies.static.widen_stages=[0, 7]", "policies.static.widen_factor=1.5"]  # fmt: skip
    grower = Grower(
        model, RESNET_SLOTS, example_input=train[0][0], policy="static", optimizer=opt,
        **grower_kwargs(overrides=overrides, max_epochs=2),
    )  # fmt: skip
    _epochs(grower, opt, train, val, 2)
    assert model.layer1[0].conv1.out_channels == 96 and model.layer4[1].conv2.in_channels == 768
    assert model.layer1[1].conv1.out_channels == 64
    _optimizer_holds_the_model(grower, opt)


def test_a_heuristic_that_may_widen_takes_a_user_mlp() -> None:
    """policies.heuristic with host_growth="widen" may ask mid-run: the Grower checks the
    request against the user's pairs at construction and accepts it."""
    model = mlp()
    grower = Grower(
        model, MLP_SLOTS, example_input=torch.randn(4, 8), policy="heuristic",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        **grower_kwargs(overrides=['policies.heuristic.host_growth="widen"'], max_epochs=20),
    )  # fmt: skip
    assert len(grower.env.model.host.pairs) == 2


def test_a_widening_scheduled_at_epoch_0_starts_before_the_first_epoch() -> None:
    """widen_at=0 starts the growth before the user's first epoch, as an env's reset does
    (it used to wait for an end of epoch that never named epoch 0, and never grew)."""
    grower, opt, train, val = _mlp_grower(overrides=["policies.static.widen_at=0"])
    growth = grower.env.model.host_growth
    assert growth is not None and growth.stage == Stage.BLENDING and growth.born_epoch == 0
    _optimizer_holds_the_model(grower, opt)
    _epochs(grower, opt, train, val, 3)
    assert growth.stage == Stage.FOSSILIZED


def test_a_widening_at_epoch_0_is_priced_against_the_users_model_as_given() -> None:
    """The FLOPs baseline is counted before the growth at epoch 0 widens the model (on
    the example input: no validation data was given), so the widening pays its compute
    from the first epoch as one started later does, and the user's samples stay theirs."""
    at_once, opt, train, val = _mlp_grower(overrides=["policies.static.widen_at=0"])
    wait, wait_opt, *_ = _mlp_grower(overrides=["policies.static.widen_at=0.5"])
    _epochs(at_once, opt, train, val, 1)
    _epochs(wait, wait_opt, train, val, 1)
    assert wait.env.cost.epoch_flops_ratio() == pytest.approx(1.0)
    assert at_once.env.cost.epoch_flops_ratio() > 1.5
    assert at_once.env.stats.host_flops_per_sample == pytest.approx(
        wait.env.stats.host_flops_per_sample
    )
    assert at_once.env.stats.train_samples == wait.env.stats.train_samples


def test_a_layer_that_shares_its_weight_is_not_widened() -> None:
    """A fold builds new parameters, which would untie a tied weight: refused, named."""
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    model[2].weight = model[0].weight
    report = find_pairs(model, torch.randn(4, 8))
    assert [p.producer for p in report.pairs] == []
    assert "0 -> 2: 0 shares its parameters with 2" in report.refused


def test_modules_that_return_their_input_pass_the_walk() -> None:
    """Identity and eval-mode Dropout return their input tensor, making no autograd node:
    the walk passes them (it used to loop forever on torchvision's MobileNetV2)."""
    model = nn.Sequential(
        nn.Linear(8, 16), nn.Dropout(0.1), nn.ReLU(), nn.Identity(), nn.Linear(16, 2)
    )
    assert _pairs(model, torch.randn(4, 8)) == [("0", "4", 16, 1)]


def test_a_pair_inside_a_fused_transformer_layer_widens_through_its_slow_path() -> None:
    """nn.TransformerEncoderLayer's eval-mode fast path reads linear1.weight itself, but
    torch leaves it for the slow path while a module holds hooks: the growth rides on
    the layers as hooks, so the pair widens, and the folded layer (fast path again)
    computes what the masked one did, in both modes (checked on a copy)."""
    from esper_core.grow.layer_growth import verified, widening_problem

    model = transformer()
    x = token_batches(1, 1)[0][0]
    report = verified(model, find_pairs(model, x), x)
    assert [p.describe() for p in report.pairs] == [
        "encoder.layers.0.linear1 -> encoder.layers.0.linear2 (64 wide)",
        "encoder.layers.1.linear1 -> encoder.layers.1.linear2 (64 wide)",
    ]
    assert widening_problem(model, list(report.pairs), x) is None


def test_ppo_that_may_widen_grows_a_user_mlp_in_the_users_loop() -> None:
    """policies.ppo with host_growth="widen": its "grow now" head widens the user's layer
    pairs through the same request as the heuristic's, and the user's optimizer follows."""
    model = mlp()
    before = model.body[0].out_features
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train, val = tabular_batches(3, 1, size=16), tabular_batches(2, 2, size=16)
    overrides = [
        'policies.ppo.host_growth="widen"',
        "policies.ppo.host_growth_tempo=2",
        "policies.ppo.allow_untrained=true",
        "policies.ppo.deterministic=false",  # sampled: the untrained head is near 50/50
        "env.max_seeds=0",  # the growth head alone decides
    ]
    grower = Grower(
        model, MLP_SLOTS, example_input=train[0][0], policy="ppo", optimizer=opt,
        **grower_kwargs(overrides=overrides, max_epochs=8),
    )  # fmt: skip
    for _ in range(8):
        train_one_epoch(grower.module, opt, train)
        grower.end_epoch(val)
    # It asked once (then the head is masked): 32 -> 64.
    assert (before, grower.module.body[0].out_features) == (32, 64)
    (growth,) = grower.env.model.host_growths
    assert growth.stage == Stage.FOSSILIZED
    _optimizer_holds_the_model(grower, opt)
