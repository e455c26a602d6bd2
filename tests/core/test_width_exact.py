"""Masked width growth checked against hand-computed references: the new
channels between mask 0 and 1, convs with biases and a stride, the later layer's new
inputs, and the fresh BatchNorm on the new channels, in training mode as well. Checks at
mask 0 and 1 alone let a mask squared or snapped to 0/1 through, and a BatchNorm's
statistics hide within a loose tolerance in eval mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from esper_operators.width_conv import MaskedConvStage
from torch import nn

from esper_core.grow.layer_pairs import find_pairs
from esper_core.grow.layer_widening import ON_LAYER, LayerWidening, MaskedLayer, WidenedNorm
from esper_core.lifecycle.host_growth import WidthError

X = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(3))
# Float sums in another order (a widened kernel against its pieces): no looser than this.
TOL = {"atol": 1e-6, "rtol": 1e-5}


def _norms_moved(module: nn.Module, seed: int = 5) -> None:
    """Every BatchNorm (the new ones too) away from its init: statistics and affine."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.3)


def _norm(channels: int) -> nn.BatchNorm2d:
    # Not torch's defaults: a fresh norm that ignores the user's would show.
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.3)


# ---------------------------------------------------------------- a CNN's conv stage


def _stage() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), _norm(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    )  # fmt: skip


def _stage_reference(wide: MaskedConvStage, x: torch.Tensor, m: float) -> torch.Tensor:
    """The masked stage by hand: each layer's new channels times ``m`` after the layer."""
    conv1, bn, relu, conv2, _, pool = wide.base
    old = relu(bn(conv1(x)))
    new = relu(wide.norms[0](F.conv2d(x, wide.out_weight[0], wide.out_bias[0], padding=1))) * m
    cross = F.conv2d(new, wide.cross_weight[0], stride=2, padding=1)
    old2 = pool(relu(conv2(old) + cross))
    both = torch.cat([old, new], dim=1)
    new2 = F.conv2d(both, wide.out_weight[1], wide.out_bias[1], stride=2, padding=1)
    return torch.cat([old2, pool(relu(new2)) * m], dim=1)


@pytest.mark.parametrize("m", [0.3, 0.7])
def test_a_stage_between_mask_0_and_1_is_the_hand_computed_one(m: float) -> None:
    wide = MaskedConvStage(_stage(), 0, 3, torch.Generator().manual_seed(1))
    _norms_moved(wide)
    wide.eval().mask.fill_(m)
    with torch.no_grad():
        out = wide(X)
        assert out.shape == (4, 7, 2, 2)
        assert torch.allclose(out, _stage_reference(wide, X, m), **TOL)


def test_a_stage_folds_exactly_with_biases_a_stride_and_a_consumer_stage() -> None:
    """The second stage only reads the first's new channels (no new outputs of its own):
    its folded conv keeps its bias and takes the new inputs' kernels as columns."""
    torch.manual_seed(0)
    reader = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), _norm(6), nn.ReLU(), nn.Conv2d(6, 5, 1))
    gen = torch.Generator().manual_seed(1)
    first = MaskedConvStage(_stage(), 0, 3, gen)
    second = MaskedConvStage(reader, 3, 0, gen)
    bn = first.base[1]
    assert isinstance(bn, nn.BatchNorm2d)
    new_norm = first.norms[0]
    assert (new_norm.eps, new_norm.momentum) == (bn.eps, bn.momentum)  # the user's norm's
    net = nn.Sequential(first, second)
    _norms_moved(net)
    first.mask.fill_(1.0)
    second.mask.fill_(1.0)
    with torch.no_grad():
        trained = net.train()(X)  # batch statistics (the new channels' own too)
        evaluated = net.eval()(X)
        plain = nn.Sequential(first.fold()[0], second.fold()[0])
        assert plain[1][0].in_channels == 7 and plain[1][0].bias is reader[0].bias
        assert torch.allclose(plain.eval()(X), evaluated, **TOL)
        assert torch.allclose(plain.train()(X), trained, **TOL)


# ---------------------------------------------------------------- a user's layer pairs


class Net(nn.Module):
    """conv1 -> bn1 -> conv2 (stride 2) -> flatten -> head: two pairs, every layer biased;
    the flatten spreads each of conv2's channels over 4 of the head's inputs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.bn1 = nn.Conv2d(3, 4, 3), _norm(4)
        self.conv2, self.head = nn.Conv2d(4, 5, 3, stride=2), nn.Linear(5 * 2 * 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        out: torch.Tensor = self.head(F.relu(self.conv2(h)).flatten(1))
        return out


def _widened() -> tuple[Net, LayerWidening]:
    net = Net()
    pairs = find_pairs(net, X).pairs
    assert [(p.producer, p.consumer, p.spread) for p in pairs] == [
        ("conv1", "conv2", 1),
        ("conv2", "head", 4),
    ]
    widening = LayerWidening(net, pairs, [4, 5], [6, 7], torch.Generator().manual_seed(1), "random")
    widening.install()
    _norms_moved(net)
    return net, widening


def _on(layer: nn.Module) -> nn.Module:
    """The growth's part riding on one of the user's layers."""
    return getattr(layer, ON_LAYER)


def _layers_reference(net: Net, x: torch.Tensor, m: float) -> torch.Tensor:
    """The widened net by hand: the consumers add their new inputs' part times ``m``
    (the user's layers' own parameters computed with torch's functions: calling the
    layers would run the growth's hooks)."""
    c1, n1, c2, head = _on(net.conv1), _on(net.bn1), _on(net.conv2), _on(net.head)
    assert isinstance(c1, MaskedLayer) and isinstance(c2, MaskedLayer)
    assert isinstance(head, MaskedLayer) and isinstance(n1, WidenedNorm)
    assert c1.out_weight is not None and c2.out_weight is not None
    assert c2.cross_weight is not None and head.cross_weight is not None
    bn = net.bn1
    assert bn.running_mean is not None and bn.running_var is not None
    old1 = F.conv2d(x, net.conv1.weight, net.conv1.bias)
    a = torch.cat([old1, F.conv2d(x, c1.out_weight, c1.out_bias)], dim=1)
    normed = F.batch_norm(
        a[:, :4], bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps
    )
    h = F.relu(torch.cat([normed, n1.extra(a[:, 4:])], dim=1))
    cross = F.conv2d(h[:, 4:], c2.cross_weight, stride=2) * m
    old = F.conv2d(h[:, :4], net.conv2.weight, net.conv2.bias, stride=2) + cross
    new = F.conv2d(h, c2.out_weight, c2.out_bias, stride=2)
    g = F.relu(torch.cat([old, new], dim=1)).flatten(1)  # channel-major: old 20, new 8
    return (
        F.linear(g[:, :20], net.head.weight, net.head.bias)
        + F.linear(g[:, 20:], head.cross_weight) * m
    )


@pytest.mark.parametrize("m", [0.3, 0.7])
def test_a_users_layers_between_mask_0_and_1_are_the_hand_computed_ones(m: float) -> None:
    net, widening = _widened()
    widening.set_mask(m)
    with torch.no_grad():
        assert torch.allclose(net.eval()(X), _layers_reference(net, X, m), **TOL)


def test_a_users_layers_fold_exactly_in_training_and_eval_mode() -> None:
    """Biased producers gain bias rows, the consumers the new inputs' columns (the head
    keeps its own bias), and the fresh BatchNorm on the new channels is the user's kind
    (eps, momentum): the plain net equals the masked one at mask 1, batch statistics too."""
    net, widening = _widened()
    bn1 = _on(net.bn1)
    assert isinstance(bn1, WidenedNorm)
    assert (bn1.extra.eps, bn1.extra.momentum) == (net.bn1.eps, net.bn1.momentum)
    head, head_bias = net.head, net.head.bias
    widening.set_mask(1.0)
    with torch.no_grad():
        trained = net.train()(X)
        evaluated = net.eval()(X)
        widening.fold()
        assert net.head is head and net.head.bias is head_bias  # the user's, in place
        assert net.conv2.weight.shape == (7, 6, 3, 3) and net.head.in_features == 28
        assert torch.allclose(net.eval()(X), evaluated, **TOL)
        assert torch.allclose(net.train()(X), trained, **TOL)


def test_a_consumer_folds_only_at_mask_1() -> None:
    """Below 1 a consumer's new inputs are still scaled by the mask: a plain layer (the
    mask taken as 1) would compute something else."""
    net, widening = _widened()
    widening.set_mask(0.5)
    for consumer in (_on(net.conv2), _on(net.head)):
        assert isinstance(consumer, MaskedLayer)
        with pytest.raises(WidthError, match="mask at 1"):
            consumer.fold()


@pytest.mark.parametrize("host", ["cnn", "transformer"])
def test_a_host_growths_alpha_is_every_masks_value(host: str) -> None:
    """Between 0 and 1 a host's widening sets every masked module's mask to its alpha
    exactly (a mask squared, or snapped to 0/1, agrees at 0 and 1 alone)."""
    from tests.core.test_fold_optimizer_state import _cnn, _transformer, _widen

    model = _cnn() if host == "cnn" else _transformer()
    growth = _widen(model)
    for alpha in (0.3, 0.7):
        growth.set_alpha(alpha)
        masks = [b for name, b in model.named_buffers() if name.rsplit(".", 1)[-1] == "mask"]
        assert masks and all(torch.all(m == alpha) for m in masks)
