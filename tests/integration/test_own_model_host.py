"""A host from any nn.Module: bit-identity with the bare model, and the errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from esper_core.errors import HostError
from esper_core.grow.grower import Grower
from esper_core.grow.module_host import host_from_module
from esper_core.lifecycle.stages import Stage
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    RESNET_SLOTS,
    TRANSFORMER_SLOTS,
    bare_copy,
    grads,
    grower_kwargs,
    image_batches,
    mlp,
    resnet,
    tabular_batches,
    token_batches,
    transformer,
)

CASES = {
    "resnet18": (resnet, RESNET_SLOTS, image_batches, "conv_heavy"),
    "transformer": (transformer, TRANSFORMER_SLOTS, token_batches, "mlp_small"),
    "mlp": (mlp, MLP_SLOTS, tabular_batches, "residual"),
}


def _forward_backward(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    out = model(batch[0])
    nn.functional.cross_entropy(out, batch[1]).backward()
    return out.detach()


def test_resnet18_slots_are_found_from_the_example_input() -> None:
    x = image_batches(1, 0)[0][0]
    host = host_from_module(resnet(), RESNET_SLOTS, x)
    specs = host.injection_specs()
    assert [(s.slot_id, s.channels, s.topology, s.segment) for s in specs] == [
        ("layer1", 64, "cnn", 0),
        ("layer2", 128, "cnn", 1),
        ("layer3", 256, "cnn", 2),
    ]
    assert host.output_features == 10


def test_transformer_slots_are_transformer_topology() -> None:
    x = token_batches(1, 0)[0][0]
    specs = host_from_module(transformer(), TRANSFORMER_SLOTS, x).injection_specs()
    assert [(s.slot_id, s.channels, s.topology) for s in specs] == [
        ("encoder/layers/0", 32, "transformer"),
        ("encoder/layers/1", 32, "transformer"),
    ]


def test_mlp_slots_on_hidden_activations_are_mlp_topology() -> None:
    x = tabular_batches(1, 0)[0][0]
    host = host_from_module(mlp(), MLP_SLOTS, x)
    assert [(s.slot_id, s.channels, s.topology) for s in host.injection_specs()] == [
        ("body/1", 32, "mlp"),
        ("body/3", 32, "mlp"),
    ]
    assert host.output_features == 3


@pytest.mark.parametrize("case", sorted(CASES))
def test_empty_slots_and_a_training_seed_keep_outputs_and_gradients_bit_identical(
    case: str,
) -> None:
    build, slots, batches, blueprint = CASES[case]
    model = build()
    bare = bare_copy(model)
    batch = batches(1, 1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    isolated = ["lifecycle.isolation=full", "lifecycle.isolation_non_identity=full"]
    grower = Grower(
        model, slots, example_input=batch[0], optimizer=opt, **grower_kwargs(overrides=isolated)
    )
    bare_out = _forward_backward(bare, batch)

    # Every slot empty: the grown model, and the user's own module, are the bare model.
    for runs in (grower.model, model):
        out = _forward_backward(runs, batch)
        assert torch.equal(out, bare_out)
        for a, b in zip(grads(model), grads(bare), strict=True):
            assert torch.equal(a, b)

    # A seed in TRAINING: the host's output and gradients are still bit-identical.
    slot = grower.model.slot(grower.model.slot_ids[1])
    bp = next(b for key, b in grower.env.blueprints.items() if key.endswith("/" + blueprint))
    slot.germinate("s1", bp, "linear_add")
    if slot.stage == Stage.GERMINATED:
        slot.advance()
    assert slot.stage == Stage.TRAINING
    out = _forward_backward(grower.model, batch)
    assert torch.equal(out, bare_out)
    host_grads = [p.grad for p in grower.model.host_parameters()]
    for a, b in zip(host_grads, grads(bare), strict=True):
        assert a is not None and torch.equal(a, b)
    assert all(p.grad is not None for p in slot.seed_parameters())  # the seed learns


@pytest.mark.parametrize(
    ("make", "slots", "example", "expected"),
    [
        (
            resnet,
            ["layer9"],
            lambda: image_batches(1, 0)[0][0],
            "slot 'layer9': ResNet has no submodule of that name; name one from "
            "model.named_modules() (did you mean layer",
        ),
        (
            transformer,
            ["encoder.layers.0.self_attn"],
            lambda: token_batches(1, 0)[0][0],
            "slot 'encoder.layers.0.self_attn': MultiheadAttention returns a tuple, not a "
            "tensor; put the slot on a submodule that returns one tensor",
        ),
        (
            resnet,
            ["layer1", "fc"],
            lambda: image_batches(1, 0)[0][0],
            "slots ['layer1', 'fc'] mix cnn and mlp outputs; choose slots of one kind",
        ),
        (
            mlp,
            ["body.1"],
            lambda: torch.randn(4, 8).unsqueeze(1).unsqueeze(1).unsqueeze(1),
            "slot 'body.1': ReLU outputs shape (4, 1, 1, 1, 32); a slot needs "
            "[batch, channels, H, W] (cnn), [batch, seq, features] (transformer) or "
            "[batch, features] (mlp)",
        ),
        (
            resnet,
            ["layer1"],
            lambda: torch.randn(4, 5, 32, 32),
            "example_input of shape (4, 5, 32, 32): ResNet rejects it (",
        ),
    ],
)
def test_user_errors_are_one_line_naming_the_module_and_the_fix(
    make: Callable[[], nn.Module],
    slots: list[str],
    example: Callable[[], torch.Tensor],
    expected: str,
) -> None:
    with pytest.raises(HostError) as info:
        host_from_module(make(), slots, example())
    message = str(info.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_the_dry_run_leaves_batchnorm_statistics_and_the_mode_alone() -> None:
    model = resnet()
    model.train()
    before = [b.clone() for b in model.buffers()]
    host_from_module(model, RESNET_SLOTS, image_batches(1, 0)[0][0])
    assert model.training
    for a, b in zip(before, model.buffers(), strict=True):
        assert torch.equal(a, b)


def test_close_removes_the_hooks() -> None:
    model = resnet()
    x = image_batches(1, 0)[0][0]
    grower = Grower(model, RESNET_SLOTS, example_input=x, **grower_kwargs())
    assert model.layer1._forward_hooks
    grower.close()
    assert not model.layer1._forward_hooks
