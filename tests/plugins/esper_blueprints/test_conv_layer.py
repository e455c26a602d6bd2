"""``conv_layer``: the CNN host's own layer as a seed, so a host grown in depth and the
static host built with that layer (``convs_after_pool``) are the same network."""

from __future__ import annotations

import torch
from esper_blueprints.cnn import BLUEPRINTS
from esper_tasks.hosts.cnn import CNNHost
from torch import nn

from esper_core.lifecycle.blueprint_check import check_blueprint

CONV_LAYER = next(bp for bp in BLUEPRINTS if bp.name == "conv_layer")


def test_conv_layer_passes_the_blueprint_check_with_its_batchnorm() -> None:
    assert check_blueprint(CONV_LAYER, 8) == []


def test_a_seed_that_mixes_samples_in_eval_mode_is_refused() -> None:
    import attrs

    def batch_stats(channels: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels, track_running_stats=False),
        )

    mixing = attrs.evolve(CONV_LAYER, name="mixing", factory=batch_stats)
    problems = check_blueprint(mixing, 8)
    assert len(problems) == 1 and "depends on the other samples" in problems[0]


def test_a_fossilized_conv_layer_is_the_static_twins_layer() -> None:
    twin = CNNHost(1, 10, 4, 1, convs_per_block=1, convs_after_pool=1)
    host = CNNHost(1, 10, 4, 1)
    seed = CONV_LAYER.build(4)
    # The twin's weights in the grown network: its block 0 = conv, BN, ReLU, pool, then the
    # layer that the seed is.
    host.blocks[0].load_state_dict(twin.blocks[0][:4].state_dict())
    host.head.load_state_dict(twin.head.state_dict())
    seed.conv.load_state_dict(twin.blocks[0][4].state_dict())
    seed.norm.load_state_dict(twin.blocks[0][5].state_dict())
    x = torch.randn(3, 1, 8, 8)
    for training in (True, False):
        for module in (twin, host, seed):
            module.train(training)
        grown = host.forward_head(seed(host.forward_segment(0, x)))
        assert torch.equal(grown, twin(x))
    assert sum(p.numel() for p in seed.parameters()) == CONV_LAYER.param_estimate(4)


def test_slots_before_pool_change_where_seeds_grow_not_the_network() -> None:
    after = CNNHost(1, 10, 4, 2, convs_per_block=1, convs_after_pool=1)
    before = CNNHost(1, 10, 4, 2, convs_per_block=1, convs_after_pool=1, slots_before_pool=True)
    before.load_state_dict(after.state_dict())  # the same parameter names
    x = torch.randn(3, 1, 8, 8)
    after.eval(), before.eval()
    assert torch.equal(before(x), after(x))
    # The slot after block 0 sees the block's full resolution (8x8) before its pool.
    assert before.forward_segment(0, x).shape == (3, 4, 8, 8)
    assert after.forward_segment(0, x).shape == (3, 4, 4, 4)
    assert [s.next_stride for s in before.injection_specs()] == [2, 1]


def test_a_conv_layer_before_the_pool_grows_a_block_by_one_conv() -> None:
    deep = CNNHost(1, 10, 4, 1, convs_per_block=2)
    host = CNNHost(1, 10, 4, 1, slots_before_pool=True)
    seed = CONV_LAYER.build(4)
    host.blocks[0][:3].load_state_dict(deep.blocks[0][:3].state_dict())
    seed.conv.load_state_dict(deep.blocks[0][3].state_dict())
    seed.norm.load_state_dict(deep.blocks[0][4].state_dict())
    host.head.load_state_dict(deep.head.state_dict())
    x = torch.randn(3, 1, 8, 8)
    for training in (True, False):
        for module in (deep, host, seed):
            module.train(training)
        assert torch.equal(host.forward_head(seed(host.forward_segment(0, x))), deep(x))


def test_a_host_with_slots_before_pool_refuses_width_growth_in_one_line() -> None:
    import pytest

    from esper_core.lifecycle.host_growth import WidthError

    with pytest.raises(WidthError, match="slots_before_pool cannot grow in width"):
        CNNHost(1, 10, 4, 2, slots_before_pool=True).conv_stages()
