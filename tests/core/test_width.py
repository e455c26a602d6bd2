"""Masked width growth of a conv stage (esper_operators.width_conv): bit-identity at
mask 0, folding at mask 1, unwrapping, and what it refuses."""

from __future__ import annotations

import copy

import pytest
import torch
from esper_operators.width_conv import MaskedConvStage, MaskedLinearInput, stage_out_channels
from torch import nn

from esper_core.lifecycle.host_growth import WidthError


def _stage(c_in: int, c_out: int, convs: int = 2, bias: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(convs):
        layers += [
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
        ]
        c_in = c_out
    layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


def _trained_norms(module: nn.Module, x: torch.Tensor) -> None:
    """Non-trivial BatchNorm statistics and affine values, so folding them is tested."""
    module.train()
    with torch.no_grad():
        for _ in range(3):
            module(x)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


def _pair(convs: int = 2, bias: bool = False) -> tuple[nn.Sequential, nn.Sequential, nn.Linear]:
    torch.manual_seed(0)
    first, second = _stage(3, 4, convs, bias), _stage(4, 8, convs, bias)
    return first, second, nn.Linear(8, 5)


def _forward(first: nn.Module, second: nn.Module, head: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return head(second(first(x)).mean(dim=(2, 3)))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("convs", [1, 2])
def test_bit_identical_at_mask_zero(train: bool, convs: int) -> None:
    first, second, head = _pair(convs)
    x = torch.randn(6, 3, 16, 16)
    _trained_norms(nn.Sequential(first, second), x)
    for m in (first, second, head):
        m.train(train)
    # In training mode BatchNorm normalises by the batch's statistics, which the running
    # statistics this pass updates do not change: the second pass sees the same.
    before = _forward(first, second, head, x)
    gen = torch.Generator().manual_seed(1)
    wide_first = MaskedConvStage(first, 0, 3, gen)
    wide_second = MaskedConvStage(second, 3, 5, gen)
    wide_head = MaskedLinearInput(head, 5, gen)
    for m in (wide_first, wide_second, wide_head):
        m.train(train)
    assert torch.equal(before, _forward(wide_first, wide_second, wide_head, x))
    assert wide_second(wide_first(x)).shape[1] == 13


def test_bit_identical_outputs_and_gradients_in_training() -> None:
    """At mask 0 the widened stages give the host the very outputs, batch statistics and
    gradients it had, and the new parameters receive zero gradient."""
    first, second, head = _pair()
    x = torch.randn(6, 3, 16, 16)
    _trained_norms(nn.Sequential(first, second), x)
    plain = [first, second, head]
    twin = copy.deepcopy(plain)
    gen = torch.Generator().manual_seed(1)
    wide = [MaskedConvStage(twin[0], 0, 3, gen), MaskedConvStage(twin[1], 3, 5, gen)]
    wide.append(MaskedLinearInput(twin[2], 5, gen))
    out_plain = _forward(*plain, x)
    out_wide = _forward(*wide, x)
    assert torch.equal(out_plain, out_wide)
    out_plain.square().sum().backward()
    out_wide.square().sum().backward()
    for p, q in zip(nn.ModuleList(plain).parameters(), nn.ModuleList(twin).parameters()):
        assert p.grad is not None and q.grad is not None
        assert torch.equal(p.grad, q.grad)
    for p, q in zip(nn.ModuleList(plain).buffers(), nn.ModuleList(twin).buffers()):
        assert torch.equal(p, q)  # running statistics updated identically
    for m in wide:
        for p in m.new_parameters():
            assert p.grad is None or not p.grad.any()


def test_new_channels_follow_the_mask() -> None:
    first, _second, _head = _pair()
    x = torch.randn(4, 3, 16, 16)
    wide = MaskedConvStage(first, 0, 3, torch.Generator().manual_seed(1)).eval()
    assert not wide(x)[:, 4:].any()
    wide.mask.fill_(0.5)
    half = wide(x)[:, 4:]
    wide.mask.fill_(1.0)
    full = wide(x)[:, 4:]
    assert full.abs().sum() > 0
    # Two layers, each masked: the second layer's new channels see masked inputs too.
    assert not torch.allclose(half * 2, full)
    # A second layer's old channels read the first's new ones (mask 1): they changed.
    assert not torch.equal(wide(x)[:, :4], first(x))
    single = _stage(3, 4, convs=1).eval()
    one_layer = MaskedConvStage(single, 0, 3).eval()
    one_layer.mask.fill_(1.0)
    assert torch.equal(one_layer(x)[:, :4], single(x))  # no new inputs: old channels untouched


@pytest.mark.parametrize("bias", [False, True])
def test_fold_at_mask_one_preserves_the_function(bias: bool) -> None:
    first, second, head = _pair(bias=bias)
    x = torch.randn(6, 3, 16, 16)
    gen = torch.Generator().manual_seed(1)
    wide = [MaskedConvStage(first, 0, 3, gen), MaskedConvStage(second, 3, 5, gen)]
    wide.append(MaskedLinearInput(head, 5, gen))
    _trained_norms(nn.Sequential(*wide[:2]), x)
    for m in wide[:2]:
        m.mask.fill_(1.0)
    for m in wide:
        m.eval()
    expected = _forward(*wide, x)
    folded = [m.fold() for m in wide]
    plain = [f[0] for f in folded]
    assert not any(m.training for p in plain for m in p.modules())  # the stage's mode kept
    assert isinstance(plain[0][0], nn.Conv2d) and plain[0][0].out_channels == 7
    assert plain[1][0].in_channels == 7 and plain[1][0].out_channels == 13
    assert plain[2].in_features == 13
    assert torch.allclose(_forward(*plain, x), expected, atol=1e-6, rtol=1e-5)
    # Every new parameter is recorded with the pieces it was assembled from.
    for _, parts in folded:
        for part in parts:
            assert torch.equal(part.assemble([p.detach() for p in part.pieces]), part.merged)
    assert plain[2].bias is head.bias  # an unchanged parameter is kept, not copied


def test_fold_needs_the_mask_at_one() -> None:
    first, _, _ = _pair()
    wide = MaskedConvStage(first, 0, 2)
    wide.mask.fill_(0.4)
    with pytest.raises(WidthError, match="mask at 1"):
        wide.fold()


def test_unwrap_returns_the_original_stage() -> None:
    first, _, _ = _pair()
    wide = MaskedConvStage(first, 0, 2)
    assert wide.unwrap() is first
    assert stage_out_channels(wide) == 6 and stage_out_channels(first) == 4


def test_zero_cross_init() -> None:
    first, second, head = _pair()
    wide = MaskedConvStage(second, 3, 2, cross_init="zero")
    assert all(not p.any() for p in wide.cross_weight)
    assert not MaskedLinearInput(head, 2, cross_init="zero").cross_weight.any()
    with pytest.raises(WidthError, match="cross_init"):
        MaskedConvStage(first, 0, 2, cross_init="copy")


@pytest.mark.parametrize(
    ("stage", "match"),
    [
        (nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)), "groups=2"),
        (nn.Sequential(nn.Conv2d(4, 4, 3), nn.Linear(4, 4)), "Linear"),
        (nn.Sequential(nn.ReLU(), nn.Conv2d(4, 4, 3)), "precedes its first conv"),
        (nn.Sequential(nn.MaxPool2d(2)), "precedes its first conv"),
        (nn.Sequential(nn.Conv2d(4, 4, 3), nn.ReLU(), nn.BatchNorm2d(4)), "does not follow"),
    ],
)
def test_refuses_what_it_cannot_widen(stage: nn.Sequential, match: str) -> None:
    with pytest.raises(WidthError, match=match):
        MaskedConvStage(stage, 0, 2)


def test_refuses_no_new_channels() -> None:
    with pytest.raises(WidthError, match="needs new channels"):
        MaskedConvStage(_stage(3, 4), 0, 0)
