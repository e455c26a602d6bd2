"""Isolation modes and the host's gradient while a seed blends."""

from __future__ import annotations

import copy

import pytest
import torch

from esper_core.config import LifecycleSection
from esper_core.lifecycle import rules
from esper_core.lifecycle.gates import GateThresholds
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot_state import SlotSettings
from esper_core.lifecycle.stages import Stage
from tests.core.lifecycle_helpers import healthy, make_slot, resolve_any
from tests.fakes import RES, RES_RANDOM, TinyCNNHost

GATES = GateThresholds(min_training_epochs=10)


def settings(**kw: object) -> SlotSettings:
    return SlotSettings(gates=GATES, **kw)  # type: ignore[arg-type]


def test_isolation_none_blends_from_germination() -> None:
    slot = make_slot(settings(isolation="none", isolation_non_identity="none"))
    slot.germinate("s", RES_RANDOM, tempo=4, accuracy=61.0)
    assert slot.stage == Stage.BLENDING
    assert [stage for stage, _ in slot.state.history] == ["GERMINATED", "BLENDING"]
    assert slot.state.alpha == pytest.approx(0.25)  # the ramp's first tick: no idle epoch
    assert slot.state.acc_before_blend == 61.0
    for _ in range(3):
        slot.end_epoch()
    assert slot.state.alpha == 1.0 and slot.next_gate().passed  # G3: on to HOLDING


@pytest.mark.parametrize(("mode", "need"), [("full", 10), ("short", 3)], ids=["full", "short"])
def test_isolated_modes_need_their_training_epochs_before_g2(mode: str, need: int) -> None:
    slot = make_slot(settings(isolation_non_identity=mode, short_training_epochs=3))
    slot.germinate("s", RES_RANDOM)
    assert slot.stage == Stage.GERMINATED
    assert slot.advance().passed and slot.stage == Stage.TRAINING
    healthy(slot)
    for _ in range(need - 1):
        slot.end_epoch()
    assert not slot.next_gate().passed
    slot.end_epoch()
    assert slot.next_gate().passed


def test_the_mode_follows_whether_the_seed_is_the_identity_at_birth() -> None:
    s = settings(isolation="none", isolation_non_identity="full")
    identity, other = make_slot(s), make_slot(s)
    identity.germinate("a", RES)
    other.germinate("b", RES_RANDOM)
    assert (identity.stage, other.stage) == (Stage.BLENDING, Stage.GERMINATED)
    assert s.epochs_before_blending(True) == 0
    assert s.epochs_before_blending(False) == 11  # one GERMINATED epoch + 10 TRAINING


@pytest.mark.parametrize(("max_epochs", "short"), [(30, 2), (150, 11), (5, 1)])
def test_short_isolation_scales_with_the_episode(max_epochs: int, short: int) -> None:
    lc = LifecycleSection(isolation="short", short_training_fraction=0.07)
    s = SlotSettings.from_lifecycle(lc, max_epochs)
    assert s.short_training_epochs == short
    assert s.isolation_epochs(True) == short


def test_lifecycle_lengths() -> None:
    assert rules.epochs_to_full_alpha(rules.epochs_before_blending("none", 0), 5) == 5
    assert rules.epochs_to_full_alpha(rules.epochs_before_blending("full", 10), 5) == 16
    assert rules.isolation_epochs("short", 10, 2) == 2
    with pytest.raises(ValueError, match="unknown isolation mode"):
        rules.isolation_epochs("half", 10, 2)


# ---------------------------------------------------------------- host gradient


def blending(mode: str, tempo: int = 4):  # type: ignore[no-untyped-def]
    """A model whose r0c0 seed (identity at birth) blends at alpha 1/tempo, and a bare host."""
    torch.manual_seed(0)
    host = TinyCNNHost(width=4, blocks=2)
    bare = copy.deepcopy(host)
    s = settings(isolation="none", blend_host_gradient=mode)
    model = MorphogeneticModel(host, resolve_any, s)
    model.slot("r0c0").germinate("s", RES, tempo=tempo)
    x, y = torch.randn(6, 1, 4, 4), torch.randint(0, 4, (6,))
    return model, bare, x, y


def upstream_grads(model, bare, x, y):  # type: ignore[no-untyped-def]
    loss = torch.nn.functional.cross_entropy
    out, ref = model(x), bare(x)
    assert torch.equal(out, ref)  # the forward pass is the host's either way
    loss(out, y).backward()
    loss(ref, y).backward()
    named = dict(bare.named_parameters())
    return [
        (p.grad, named[f"blocks.0.{n}"].grad) for n, p in model.host.blocks[0].named_parameters()
    ]


def test_full_host_gradient_gives_the_upstream_host_all_of_its_gradient() -> None:
    for grad, bare_grad in upstream_grads(*blending("full")):
        assert torch.allclose(grad, bare_grad, rtol=1e-5, atol=1e-7)


def test_scaled_host_gradient_gives_it_one_minus_alpha() -> None:
    for grad, bare_grad in upstream_grads(*blending("scaled")):
        assert torch.allclose(grad, 0.75 * bare_grad, rtol=1e-4, atol=1e-7)


def test_full_host_gradient_keeps_the_seed_input_isolated() -> None:
    model, _, x, y = blending("full")
    slot = model.slot("r0c0")
    seen: list[torch.Tensor] = []
    slot.seed.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))  # type: ignore[union-attr]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert not seen[0].requires_grad  # the seed learns from a detached input
    assert all(p.grad is not None for p in slot.seed_parameters())
