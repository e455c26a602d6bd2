"""Every blueprint: shape preservation, honest parameter estimates, identity at birth,
gradient flow; transformer seeds stay causal."""

from __future__ import annotations

import pytest
import torch
from esper_blueprints.cnn import BLUEPRINTS as CNN
from esper_blueprints.cnn_modules import num_groups
from esper_blueprints.mlp import BLUEPRINTS as MLP
from esper_blueprints.transformer import BLUEPRINTS as TRANSFORMER

from esper_core.components.blueprint import Blueprint

ALL = CNN + TRANSFORMER + MLP
SERIES = tuple(bp for bp in ALL if not bp.branch)
BRANCH = tuple(bp for bp in ALL if bp.branch)
CHANNELS = (2, 4, 8, 32, 128)
EXPECTED_IDENTITY = {
    "cnn/noop", "cnn/norm", "cnn/bottleneck", "cnn/conv_small",
    "transformer/noop", "transformer/norm", "transformer/lora", "transformer/lora_large",
    "transformer/attention", "transformer/mlp", "transformer/block",
    "mlp/noop", "mlp/norm", "mlp/lowrank", "mlp/residual", "mlp/residual_wide",
}  # fmt: skip


def _input(bp: Blueprint, channels: int, size: int, batch: int = 3) -> torch.Tensor:
    if bp.topology == "cnn":
        return torch.randn(batch, channels, size, size + 1)
    if bp.topology == "mlp":  # [batch, features]: no size of its own
        return torch.randn(batch, channels)
    return torch.randn(batch, size, channels)


def _build(bp: Blueprint, channels: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return bp.build(channels)


def test_the_domain_blueprints_exist() -> None:
    assert [bp.name for bp in CNN] == [
        "noop", "norm", "attention", "depthwise", "bottleneck", "conv_small", "conv_light", "conv_heavy",
        "conv_layer", "widen", "widen4x",
    ]  # fmt: skip
    # Branches of the following block, and only by name (not in a run's default action space).
    assert [bp.name for bp in BRANCH] == ["widen", "widen4x"]
    assert all(bp.opt_in and bp.topology == "cnn" for bp in BRANCH)
    # The host-kind layer changes the architecture's kind: by name only, too.
    assert [bp.key for bp in SERIES if bp.opt_in] == ["cnn/conv_layer"]
    assert [bp.name for bp in TRANSFORMER] == [
        "noop", "norm", "lora", "lora_large", "attention", "mlp_small", "mlp", "block",
    ]  # fmt: skip
    # Residual and the identity at birth, every one: an MLP grows from its
    # own function.
    assert [bp.name for bp in MLP] == ["noop", "norm", "lowrank", "residual", "residual_wide"]
    assert all(bp.description and "\n" not in bp.description for bp in ALL)


@pytest.mark.parametrize("bp", SERIES, ids=lambda bp: bp.key)
@pytest.mark.parametrize("channels", CHANNELS)
def test_output_shape_equals_input_shape(bp: Blueprint, channels: int) -> None:
    module = _build(bp, channels)
    for size in (1, 3, 8, 17):
        x = _input(bp, channels, size)
        assert module(x).shape == x.shape
    assert module(_input(bp, channels, 4, batch=1)).shape == _input(bp, channels, 4, batch=1).shape


@pytest.mark.parametrize("bp", SERIES, ids=lambda bp: bp.key)
@pytest.mark.parametrize("channels", CHANNELS)
def test_parameter_estimate_is_within_ten_percent(bp: Blueprint, channels: int) -> None:
    actual = sum(p.numel() for p in _build(bp, channels).parameters())
    estimate = bp.param_estimate(channels)
    assert abs(estimate - actual) <= 0.1 * actual, (actual, estimate)


@pytest.mark.parametrize("bp", SERIES, ids=lambda bp: bp.key)
def test_identity_at_birth_exactly_where_claimed(bp: Blueprint) -> None:
    assert bp.identity_at_birth == (bp.key in EXPECTED_IDENTITY)
    for channels in (4, 32):
        module = _build(bp, channels)
        x = _input(bp, channels, 6)
        out = module(x)
        if bp.identity_at_birth:
            assert torch.equal(out, x)
        else:
            assert not torch.allclose(out, x, atol=1e-3)


@pytest.mark.parametrize("bp", SERIES, ids=lambda bp: bp.key)
def test_gradients_flow(bp: Blueprint) -> None:
    channels = 8
    module = _build(bp, channels)
    x = _input(bp, channels, 5).requires_grad_(True)
    weights = torch.randn_like(x)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1) if bp.name != "noop" else None
    for step in range(2):  # zero-initialised layers pass gradient upstream after one step
        module.zero_grad()
        x.grad = None
        (module(x) * weights).sum().backward()
        if optimizer is not None and step == 0:
            optimizer.step()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


# The widths of a branch: D = next_channels (widen) or 3 * next_channels (widen4x).
BRANCH_WIDTH = {"widen": 1, "widen4x": 3}


@pytest.mark.parametrize("bp", BRANCH, ids=lambda bp: bp.key)
@pytest.mark.parametrize(
    ("channels", "next_channels", "stride"), [(2, 4, 2), (8, 16, 2), (32, 64, 2), (6, 5, 1)]
)
def test_a_branch_maps_to_the_following_blocks_shape_with_the_stated_parameters(
    bp: Blueprint, channels: int, next_channels: int, stride: int
) -> None:
    torch.manual_seed(0)
    module = bp.build(channels, next_channels, stride)
    for h, w in ((2, 3), (8, 8), (17, 16)):
        out = module(torch.randn(3, channels, h, w))
        assert out.shape == (3, next_channels, h // stride, w // stride)
    d = BRANCH_WIDTH[bp.name] * next_channels
    actual = sum(p.numel() for p in module.parameters())
    assert actual == bp.param_estimate(channels, next_channels, stride)
    assert actual == 9 * channels * d + 2 * d + d * next_channels + next_channels
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


@pytest.mark.parametrize("bp", BRANCH, ids=lambda bp: bp.key)
def test_a_branch_adds_exactly_zero_at_birth_and_learns(bp: Blueprint) -> None:
    assert bp.identity_at_birth
    torch.manual_seed(0)
    module = bp.build(8, 16, 2)
    x = torch.randn(3, 8, 6, 6, requires_grad=True)
    assert torch.equal(module(x), torch.zeros(3, 16, 3, 3))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    weights = torch.randn(3, 16, 3, 3)
    for step in range(2):  # the zero-initialised projection passes gradient after one step
        module.zero_grad()
        x.grad = None
        (module(x) * weights).sum().backward()
        if step == 0:
            optimizer.step()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for name, p in module.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("bp", TRANSFORMER, ids=lambda bp: bp.key)
def test_transformer_seeds_are_causal(bp: Blueprint) -> None:
    module = _build(bp, 16)
    for p in module.parameters():  # leave the zero-initialised state, so mixing would show
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, 10, 16)
    y = x.clone()
    y[:, 6:] += 1.0
    assert torch.equal(module(x)[:, :6], module(y)[:, :6])


@pytest.mark.parametrize(
    ("channels", "groups"),
    [(1, 1), (2, 1), (4, 1), (6, 1), (8, 2), (16, 4), (32, 8), (48, 8), (256, 8)],
)
def test_group_counts_divide_small_channel_counts(channels: int, groups: int) -> None:
    assert num_groups(channels) == groups


@pytest.mark.parametrize("bp", TRANSFORMER, ids=lambda b: b.name)
def test_transformer_seed_layers_start_like_the_hosts_gpt2_layers(bp: Blueprint) -> None:
    """Every linear layer of a seed is initialised as the transformer hosts' are (weights
    N(0, 0.02), zero biases), or is zero where identity at birth needs it: a seed block
    then differs from a host block only there, not by a faster-moving default init."""
    torch.manual_seed(0)
    module = bp.build(256)
    for name, layer in module.named_modules():
        if not isinstance(layer, torch.nn.Linear):
            continue
        w = layer.weight
        assert bool((w == 0).all()) or abs(float(w.std()) - 0.02) < 0.002, name
        assert layer.bias is None or bool((layer.bias == 0).all()), name
