"""Branch seeds (``Blueprint.branch``): width for the block after a slot, identity at birth,
isolation, prune and cost, on the CNN host with the ``widen`` blueprints."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from esper_core.components.blueprint import Blueprint
from esper_core.env import cost
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.stages import Stage
from tests.core.lifecycle_helpers import FAST, drive_to, healthy

hosts = pytest.importorskip(
    "esper_tasks.hosts.cnn", reason="the esper-tasks plugin is not installed"
)
cnn = pytest.importorskip(
    "esper_blueprints.cnn", reason="the esper-blueprints plugin is not installed"
)
BY_KEY = {bp.key: bp for bp in cnn.BLUEPRINTS}
WIDEN, WIDEN4X, CONV_SMALL = BY_KEY["cnn/widen"], BY_KEY["cnn/widen4x"], BY_KEY["cnn/conv_small"]


def resolve(key: str) -> Blueprint:
    return BY_KEY[key]


def host_and_batch() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    host = hosts.CNNHost(in_channels=1, num_classes=10, base_channels=4, n_blocks=3)
    return host, torch.randn(6, 1, 16, 16), torch.randint(0, 10, (6,))


def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y)


def perturb(slot_seed: nn.Module) -> None:
    """Leave the zero initialisation, so a seed that leaked would show."""
    with torch.no_grad():
        for p in slot_seed.parameters():
            p.add_(torch.randn_like(p) * 0.5)


def same_forward_and_host_grads(
    model: MorphogeneticModel, bare: nn.Module, x: torch.Tensor, y: torch.Tensor, grads: bool = True
) -> None:
    model.zero_grad(set_to_none=True)
    bare.zero_grad(set_to_none=True)
    out, ref = model(x), bare(x)
    assert torch.equal(out, ref)
    if not grads:
        return
    loss(out, y).backward()
    loss(ref, y).backward()
    named = dict(bare.named_parameters())
    for name, p in model.host.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, named[name].grad), name


def test_the_cnn_host_names_the_block_after_each_slot() -> None:
    host, _, _ = host_and_batch()
    specs = host.injection_specs()
    assert [(s.channels, s.next_channels, s.next_stride) for s in specs] == [
        (4, 8, 2),
        (8, 16, 2),
        (16, None, 1),
    ]


@pytest.mark.parametrize("blueprint", [WIDEN, WIDEN4X], ids=lambda bp: bp.key)
@pytest.mark.parametrize("stage", [Stage.DORMANT, Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING])
def test_a_newborn_branch_is_bit_identical_to_the_bare_host(
    blueprint: Blueprint, stage: Stage
) -> None:
    host, x, y = host_and_batch()
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve, FAST)
    for slot_id in ("r0c0", "r0c1"):
        drive_to(model.slot(slot_id), stage, blueprint=blueprint, tempo=4)
    if stage != Stage.DORMANT:
        assert model.slot("r0c0").is_branch
    for train in (True, False):
        model.train(train)
        bare.train(train)
        # Blending at alpha > 0 scales the host's gradient by 1 - alpha (as for any seed;
        # lifecycle.blend_host_gradient), while the output stays the host's.
        same_forward_and_host_grads(model, bare, x, y, grads=stage != Stage.BLENDING)
    if stage == Stage.BLENDING:
        with model.slot("r0c0").alpha_override(0.0), model.slot("r0c1").alpha_override(0.0):
            same_forward_and_host_grads(model, bare, x, y)


@pytest.mark.parametrize("style", ["linear_add", "gated", "linear_multiply"])
def test_a_trained_branch_is_isolated_in_training_and_off_at_alpha_zero(style: str) -> None:
    host, x, y = host_and_batch()
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve, FAST)
    slot = drive_to(model.slot("r0c0"), Stage.TRAINING, blueprint=WIDEN, style=style)
    assert slot.seed is not None
    perturb(slot.seed)
    if slot.gate is not None:
        assert slot.gate.proj.in_features == 8  # the gate reads the following block's output
    same_forward_and_host_grads(model, bare, x, y)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in slot.seed.parameters())
    healthy(slot)
    assert slot.advance().passed
    with slot.alpha_override(torch.zeros(x.shape[0])):
        same_forward_and_host_grads(model, bare, x, y)
    # Blended in, the branch changes the output: the checks above could fail.
    assert not torch.equal(model(x), bare(x))


def test_a_branch_is_the_series_blend_of_the_widened_block() -> None:
    """The merge is exactly lerp(h, h + seed(x), alpha) on the next block's output h."""
    host, x, _ = host_and_batch()
    model = MorphogeneticModel(host, resolve, FAST)
    slot = drive_to(model.slot("r0c0"), Stage.BLENDING, blueprint=WIDEN, tempo=4)
    assert slot.seed is not None
    perturb(slot.seed)
    model.eval()
    with torch.no_grad():
        a = host.forward_segment(0, x)
        h = host.forward_segment(1, a)
        alpha = slot.alpha_tensor
        expected = host.forward_head(
            host.forward_segment(2, torch.lerp(h, h + slot.seed(a), alpha))
        )
        assert 0 < float(alpha) < 1
        assert torch.equal(model(x), expected)


def test_prune_restores_the_bare_host_after_blending() -> None:
    host, x, y = host_and_batch()
    model = MorphogeneticModel(host, resolve, FAST)
    slot = drive_to(model.slot("r0c1"), Stage.BLENDING, blueprint=WIDEN4X, tempo=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):  # host and seed both learn while the branch blends in
        optimizer.zero_grad()
        loss(model(x), y).backward()
        optimizer.step()
        slot.end_epoch()
    model.eval()
    with torch.no_grad():
        assert not torch.equal(model(x), model.host(x))
        slot.prune()
        assert not slot.is_branch
        assert torch.equal(model(x), model.host(x))


def test_the_last_slot_refuses_a_branch() -> None:
    host, _, _ = host_and_batch()
    model = MorphogeneticModel(host, resolve, FAST)
    with pytest.raises(ValueError, match="slot r0c2: blueprint cnn/widen is a branch"):
        model.slot("r0c2").germinate("s", WIDEN)
    assert model.slot("r0c2").stage == Stage.DORMANT
    model.slot("r0c2").germinate("s", CONV_SMALL)  # a series seed grows there


def test_a_branch_is_counted_in_params_and_flops() -> None:
    host, x, y = host_and_batch()
    model = MorphogeneticModel(host, resolve, FAST)
    bare_flops = cost.count_train_flops(model, loss, x, y)
    assert bare_flops == cost.count_train_flops(model.host, loss, x, y)
    slot = drive_to(model.slot("r0c0"), Stage.BLENDING, blueprint=WIDEN, tempo=4)
    assert slot.seed is not None
    estimate = WIDEN.estimate_for(slot.spec)
    assert estimate == 9 * 4 * 8 + 2 * 8 + 8 * 8 + 8
    assert cost.params_held(model) == model.host_param_count() + estimate
    assert cost.params_forward(model) == model.host_param_count() + estimate
    # The seed's convolutions: its forward and (its input detached while isolated) backward.
    seed_input = model.host.forward_segment(0, x).detach()
    with FlopCounterMode(display=False) as counter:
        seed_out = slot.seed(seed_input)
        seed_out.backward(torch.ones_like(seed_out))
    seed_flops = counter.get_total_flops()
    conv3x3 = 2 * x.shape[0] * 8 * 8 * 4 * 8 * 9  # on the 8x8 map after block 0
    assert seed_flops >= 2 * conv3x3
    assert cost.count_train_flops(model, loss, x, y) == bare_flops + seed_flops
    meter = cost.CostMeter()
    meter.begin_epoch(model)
    meter.batch_flops(model, loss, x, y)
    assert meter.epoch_flops == bare_flops + seed_flops
    assert meter.epoch_flops_ratio() > 1.0


def test_a_model_with_a_branch_mid_blending_restores_exactly() -> None:
    host, x, _ = host_and_batch()
    model = MorphogeneticModel(host, resolve, FAST)
    slot = drive_to(model.slot("r0c0"), Stage.BLENDING, blueprint=WIDEN, style="gated", tempo=4)
    assert slot.seed is not None
    perturb(slot.seed)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh_host, _, _ = host_and_batch()
    restored = MorphogeneticModel(fresh_host, resolve, FAST)
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    assert restored.slot("r0c0").is_branch and restored.slot("r0c0").stage == Stage.BLENDING
    model.eval()
    restored.eval()
    assert torch.equal(model(x), restored(x))
