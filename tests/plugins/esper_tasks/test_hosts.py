"""Hosts: forward is exactly segment -> segment -> head; injection specs; protocol."""

from __future__ import annotations

import copy

import pytest
import torch
from esper_tasks.charlm import PRESETS as LM_PRESETS
from esper_tasks.cifar10 import PRESETS as CIFAR_PRESETS
from esper_tasks.digits import PRESETS as DIGITS_PRESETS
from esper_tasks.hosts.cnn import CNNHost
from esper_tasks.hosts.transformer import TransformerHost

from esper_core.components.host import HostProtocol, slot_id


def _segmentwise(host: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    for i in range(host.num_segments()):
        x = host.forward_segment(i, x)  # an empty slot would pass x through unchanged
    return host.forward_head(x)


def _check_bitwise(host: torch.nn.Module, x: torch.Tensor) -> None:
    twin = copy.deepcopy(host)
    for train in (True, False):
        host.train(train)
        twin.train(train)
        out = host(x)
        seg = _segmentwise(twin, x)
        assert torch.equal(out, seg)
        out.square().mean().backward()
        seg.square().mean().backward()
        for (name, p), q in zip(host.named_parameters(), twin.parameters()):
            assert torch.equal(p.grad, q.grad), name
        host.zero_grad()
        twin.zero_grad()


CNN_CASES = [(1, 8, p) for p in DIGITS_PRESETS.values()] + [
    (3, 32, p) for p in CIFAR_PRESETS.values()
]


@pytest.mark.parametrize(("in_channels", "size", "preset"), CNN_CASES)
def test_cnn_forward_is_segmentwise(in_channels: int, size: int, preset) -> None:
    torch.manual_seed(0)
    host = CNNHost(in_channels, 10, preset.base_channels, preset.n_blocks, preset.convs_per_block)
    assert isinstance(host, HostProtocol) and host.topology == "cnn"
    _check_bitwise(host, torch.randn(4, in_channels, size, size))
    specs = host.injection_specs()
    assert host.num_segments() == preset.n_blocks == len(specs)
    for i, spec in enumerate(specs):
        assert spec.slot_id == slot_id(0, i) == f"r0c{i}"
        assert spec.channels == preset.base_channels * 2**i
        assert spec.topology == "cnn" and spec.segment == i
        assert (
            host.forward_segment(i, torch.randn(2, *_cnn_input(host, i, in_channels, size))).shape[
                1
            ]
            == spec.channels
        )


def _cnn_input(host: CNNHost, i: int, in_channels: int, size: int) -> tuple[int, int, int]:
    channels = in_channels if i == 0 else host.channels[i - 1]
    return channels, size // 2**i, size // 2**i


@pytest.mark.parametrize("preset", list(LM_PRESETS.values()))
def test_transformer_forward_is_segmentwise(preset) -> None:
    torch.manual_seed(0)
    host = TransformerHost(50, 16, preset.d_model, preset.n_layer, preset.n_head, preset.n_segments)
    assert isinstance(host, HostProtocol) and host.topology == "transformer"
    x = torch.randint(0, 50, (3, 16))
    _check_bitwise(host, x)
    assert host(x).shape == (3, 16, 50)
    specs = host.injection_specs()
    assert host.num_segments() == preset.n_segments == len(specs)
    assert [s.slot_id for s in specs] == [f"r0c{i}" for i in range(preset.n_segments)]
    assert all(s.channels == preset.d_model and s.topology == "transformer" for s in specs)
    hidden = host.forward_segment(0, x)
    assert hidden.shape == (3, 16, preset.d_model)


def test_transformer_is_causal_tied_and_length_checked() -> None:
    torch.manual_seed(0)
    host = TransformerHost(20, 12, 32, 2, 2, 2).eval()
    x = torch.randint(0, 20, (2, 12))
    y = x.clone()
    y[:, 8:] = (y[:, 8:] + 1) % 20
    assert torch.equal(host(x)[:, :8], host(y)[:, :8])
    assert host(x[:, :5]).shape == (2, 5, 20)  # shorter sequences work
    assert host.head.weight is host.tok_emb.weight
    with pytest.raises(ValueError, match="block size 12"):
        host(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="segments"):
        TransformerHost(20, 12, 32, 3, 2, 2)
