"""SeedSlot forward/backward semantics per stage, gate parameters and alpha overrides."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from esper_core.lifecycle.alpha import STYLES, blend_add, blend_gated, blend_multiply
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.stages import Stage
from tests.core.lifecycle_helpers import FAST, LIN_RES, drive_to, make_slot, resolve_any
from tests.fakes import RES, RES_RANDOM, TinyCNNHost

ALL_STYLES = sorted(STYLES)


def transformer_host() -> nn.Module:
    hosts = pytest.importorskip(
        "esper_tasks.hosts.transformer",
        reason="the esper-tasks plugin (transformer host) is not installed",
    )
    return hosts.TransformerHost(
        vocab_size=13, block_size=8, d_model=16, n_layer=2, n_head=2, n_segments=2
    )


def cnn_case(seed: int = 0) -> tuple[MorphogeneticModel, nn.Module, torch.Tensor, torch.Tensor]:
    """A model over a TinyCNNHost, an identical bare host, a batch and its targets."""
    torch.manual_seed(seed)
    host = TinyCNNHost(width=4, blocks=2)
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST)
    x = torch.randn(6, 1, 4, 4)
    y = torch.randint(0, 4, (6,))
    return model, bare, x, y


def transformer_case() -> tuple[MorphogeneticModel, nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    host = transformer_host()
    bare = copy.deepcopy(host)
    model = MorphogeneticModel(host, resolve_any, FAST)
    x = torch.randint(0, 13, (3, 8))
    y = torch.randint(0, 13, (3, 8))
    return model, bare, x, y


def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def assert_host_grads_equal(model: MorphogeneticModel, bare: nn.Module) -> None:
    named = dict(bare.named_parameters())
    for name, p in model.host.named_parameters():
        q = named[name]
        assert p.grad is not None and q.grad is not None, name
        assert torch.equal(p.grad, q.grad), name


# ---------------------------------------------------------------- TRAINING


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_training_seed_leaves_output_and_host_gradients_bit_identical(topology: str) -> None:
    if topology == "cnn":
        model, bare, x, y = cnn_case()
        for slot_id, blueprint in (("r0c0", RES_RANDOM), ("r0c1", RES)):
            drive_to(model.slot(slot_id), Stage.TRAINING, blueprint=blueprint)
    else:
        model, bare, x, y = transformer_case()
        for slot_id in model.slot_ids:
            drive_to(model.slot(slot_id), Stage.TRAINING, blueprint=LIN_RES)
    out, ref = model(x), bare(x)
    assert torch.equal(out, ref)
    loss_of(out, y).backward()
    loss_of(ref, y).backward()
    assert_host_grads_equal(model, bare)
    for name, buf in bare.named_buffers():  # BatchNorm statistics too
        assert torch.equal(dict(model.host.named_buffers())[name], buf), name
    seed_params = model.seed_parameters()
    assert seed_params
    for p in seed_params:
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0


def test_training_seed_is_skipped_without_grad() -> None:
    slot = drive_to(make_slot(), Stage.TRAINING)
    h = torch.randn(2, 4, 3, 3)
    with torch.no_grad():
        assert slot(h) is h


@pytest.mark.parametrize(
    "stage", [Stage.DORMANT, Stage.GERMINATED, Stage.PRUNED, Stage.EMBARGOED, Stage.RESETTING]
)
def test_stages_without_a_blend_return_the_host_activation(stage: Stage) -> None:
    slot = drive_to(make_slot(), stage)
    h = torch.randn(2, 4, 3, 3, requires_grad=True)
    assert slot(h) is h


# ---------------------------------------------------------------- gradient capture


class Capture:
    """Records the activation entering a slot and the gradients at its input and output."""

    def __init__(self, slot: SeedSlot) -> None:
        self.values: dict[str, torch.Tensor] = {}
        slot.register_forward_pre_hook(self._pre)
        slot.register_forward_hook(self._post)

    def _pre(self, _module: nn.Module, args: tuple[Any, ...]) -> None:
        h = args[0]
        self.values["h"] = h.detach().clone()
        h.register_hook(lambda g: self.values.__setitem__("grad_in", g))

    def _post(self, _module: nn.Module, _args: tuple[Any, ...], out: torch.Tensor) -> None:
        out.register_hook(lambda g: self.values.__setitem__("grad_out", g))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.values[key]


def reference_grad(
    slot: SeedSlot, h: torch.Tensor, grad_out: torch.Tensor, *, isolate: bool
) -> torch.Tensor:
    """d(blend)/dh . grad_out computed from the public operators, with or without isolation."""
    leaf = h.clone().requires_grad_(True)
    x = leaf.detach() if isolate else leaf
    assert slot.seed is not None
    s = slot.seed(x)
    alpha = torch.tensor(slot.state.alpha)
    operator = STYLES[slot.state.style or ""].operator
    if operator == "add":
        out = blend_add(leaf, s, alpha, x)
    elif operator == "multiply":
        out = blend_multiply(leaf, s, alpha, x)
    else:
        assert slot.gate is not None
        out = blend_gated(leaf, s, alpha, slot.gate(x))
    (grad,) = torch.autograd.grad(out, leaf, grad_out)
    return grad


def blending_model(tempo: int, ticks: int, style: str = "linear_add", blueprint=RES_RANDOM):  # type: ignore[no-untyped-def]
    model, bare, x, y = cnn_case()
    slot = drive_to(
        model.slot("r0c0"), Stage.BLENDING, blueprint=blueprint, style=style, tempo=tempo
    )
    for _ in range(ticks):
        slot.end_epoch()
    return model, bare, slot, x, y


ALPHAS = [(4, 0, 0.25), (4, 1, 0.5), (4, 2, 0.75), (3, 0, 1 / 3)]


@pytest.mark.parametrize(("tempo", "ticks", "alpha"), ALPHAS)
def test_blending_add_scales_the_direct_host_gradient_by_one_minus_alpha(
    tempo: int, ticks: int, alpha: float
) -> None:
    model, _, slot, x, y = blending_model(tempo, ticks)
    assert slot.state.alpha == pytest.approx(alpha)
    capture = Capture(slot)
    loss_of(model(x), y).backward()
    expected = (1 - slot.alpha_tensor) * capture["grad_out"]
    assert torch.allclose(capture["grad_in"], expected, rtol=1e-5, atol=1e-8)
    assert torch.count_nonzero(capture["grad_in"]) > 0
    for p in slot.seed_parameters():  # the seed learns while isolated
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0


@pytest.mark.parametrize(("tempo", "ticks", "alpha"), ALPHAS)
def test_blending_add_scales_the_layer_before_the_slot(
    tempo: int, ticks: int, alpha: float
) -> None:
    # RES is the identity at birth, so everything downstream of the slot sees exactly the
    # host's activation and the only difference is the (1 - alpha) on the direct path.
    model, bare, slot, x, y = blending_model(tempo, ticks, blueprint=RES)
    out, ref = model(x), bare(x)
    assert torch.equal(out, ref)
    loss_of(out, y).backward()
    loss_of(ref, y).backward()
    scale = 1 - slot.state.alpha
    named = dict(bare.named_parameters())
    for name, p in model.host.blocks[0].named_parameters():
        q = named[f"blocks.0.{name}"]
        assert torch.allclose(p.grad, scale * q.grad, rtol=1e-4, atol=1e-7), name
    for name, p in model.host.blocks[1].named_parameters():  # downstream: untouched
        assert torch.equal(p.grad, named[f"blocks.1.{name}"].grad), name


@pytest.mark.parametrize("style", ALL_STYLES)
def test_blending_isolates_the_seed_input_for_every_operator(style: str) -> None:
    model, _, slot, x, y = blending_model(4, 1, style=style)
    capture = Capture(slot)
    loss_of(model(x), y).backward()
    expected = reference_grad(slot, capture["h"], capture["grad_out"], isolate=True)
    assert torch.allclose(capture["grad_in"], expected, rtol=1e-5, atol=1e-7)
    leaky = reference_grad(slot, capture["h"], capture["grad_out"], isolate=False)
    assert not torch.allclose(
        leaky, expected, rtol=1e-3, atol=1e-6
    )  # the check can tell them apart


@pytest.mark.parametrize("style", ALL_STYLES)
def test_blending_at_full_alpha_never_starves_the_upstream_host(style: str) -> None:
    # A BLENDING seed at alpha 1 once kept its input detached, so lerp(h, s, 1)
    # left the upstream host layers with exactly zero gradient until a controller moved
    # the seed to HOLDING. At alpha 1 isolation is off: the host learns through the seed.
    model, _, slot, x, y = blending_model(1, 0, style=style)
    assert slot.state.alpha == 1.0 and slot.stage == Stage.BLENDING
    capture = Capture(slot)
    loss_of(model(x), y).backward()
    for p in model.host.blocks[0].parameters():
        assert torch.count_nonzero(p.grad) > 0
    through_seed = reference_grad(slot, capture["h"], capture["grad_out"], isolate=False)
    assert torch.allclose(capture["grad_in"], through_seed, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("stage", [Stage.HOLDING, Stage.FOSSILIZED])
@pytest.mark.parametrize("style", ALL_STYLES)
def test_upstream_host_layers_learn_through_the_seed(stage: Stage, style: str) -> None:
    model, _, x, y = cnn_case()
    slot = drive_to(model.slot("r0c0"), stage, style=style)
    capture = Capture(slot)
    loss_of(model(x), y).backward()
    through_seed = reference_grad(slot, capture["h"], capture["grad_out"], isolate=False)
    isolated = reference_grad(slot, capture["h"], capture["grad_out"], isolate=True)
    assert torch.allclose(capture["grad_in"], through_seed, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(capture["grad_in"], isolated, rtol=1e-3, atol=1e-6)
    for p in model.host.blocks[0].parameters():
        assert torch.count_nonzero(p.grad) > 0


def test_holding_add_gradient_is_the_seed_vjp() -> None:
    model, _, x, y = cnn_case()
    slot = drive_to(model.slot("r0c0"), Stage.HOLDING)
    capture = Capture(slot)
    loss_of(model(x), y).backward()
    leaf = capture["h"].clone().requires_grad_(True)
    (vjp,) = torch.autograd.grad(slot.seed(leaf), leaf, capture["grad_out"])  # type: ignore[misc]
    assert torch.allclose(capture["grad_in"], vjp, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(capture["grad_in"], capture["grad_out"])  # not the direct path


# ---------------------------------------------------------------- gate parameters


def test_gate_parameters_join_the_seed_from_germination() -> None:
    slot = make_slot()
    assert slot.param_version == 0 and slot.seed_parameters() == []
    slot.germinate("g", RES_RANDOM, "gated", tempo=2)
    assert slot.param_version == 1
    assert slot.gate is not None
    ids = {id(p) for p in slot.seed_parameters()}
    assert {id(p) for p in slot.gate.parameters()} <= ids
    assert {id(p) for p in slot.seed.parameters()} <= ids  # type: ignore[union-attr]
    assert slot.seed_param_count() == 4 * 4 + 4 + 4 + 1  # 1x1 conv + the gate's Linear(4, 1)
    assert slot.report().seed_params == slot.seed_param_count()
    # An optimizer made right after germination owns the gate and trains it once blending.
    optimizer = torch.optim.SGD(slot.seed_parameters(), lr=0.1)
    slot.advance()
    slot.end_epoch()
    slot.state.record_gradients(1.0, False, 1.0, 1.0)
    slot.advance()
    assert slot.stage == Stage.BLENDING and slot.param_version == 1
    before = slot.gate.proj.weight.detach().clone()
    h = torch.randn(4, 4, 3, 3)
    slot(h).square().sum().backward()
    assert torch.count_nonzero(slot.gate.proj.weight.grad) > 0  # type: ignore[arg-type]
    optimizer.step()
    assert not torch.equal(slot.gate.proj.weight, before)


def test_param_version_changes_exactly_when_the_parameter_set_does() -> None:
    slot = make_slot()
    versions = [slot.param_version]
    slot.germinate("a", RES, "linear_add", tempo=1)
    versions.append(slot.param_version)
    slot.advance()
    slot.end_epoch()
    slot.state.record_gradients(1.0, False, 1.0, 1.0)
    slot.advance()
    slot.set_alpha_target(0.5)
    slot.state.record_contribution(1.0)
    assert slot.param_version == versions[-1]  # same parameters through the stages
    slot.prune()
    versions.append(slot.param_version)
    while slot.stage != Stage.DORMANT:
        slot.end_epoch()
    assert slot.param_version == versions[-1]
    slot.germinate("b", RES, "gated")
    versions.append(slot.param_version)
    slot.load_state_dict(slot.state_dict())
    versions.append(slot.param_version)
    assert len(set(versions)) == len(versions)


def test_non_gated_styles_have_no_gate() -> None:
    for style in ALL_STYLES:
        slot = make_slot()
        slot.germinate("s", RES, style)
        assert (slot.gate is not None) == (STYLES[style].operator == "gate")


# ---------------------------------------------------------------- alpha overrides


def eval_case(stage: Stage, style: str):  # type: ignore[no-untyped-def]
    model, bare, x, _ = cnn_case()
    slot = drive_to(model.slot("r0c1"), stage, style=style, tempo=4)
    if stage == Stage.BLENDING:
        slot.end_epoch()
    model.eval()
    bare.eval()
    return model, bare, slot, x


OVERRIDE_CASES = [
    (stage, style) for stage in (Stage.BLENDING, Stage.HOLDING) for style in ALL_STYLES
]


@pytest.mark.parametrize(("stage", "style"), OVERRIDE_CASES)
def test_per_sample_overrides_reproduce_the_scheduled_and_the_host_outputs(
    stage: Stage, style: str
) -> None:
    model, bare, slot, x = eval_case(stage, style)
    with torch.no_grad():
        out, host_out = model(x), bare(x)
        assert not torch.allclose(out, host_out)  # the seed does change the output
        b = x.shape[0]
        with slot.alpha_override(torch.full((b,), slot.state.alpha)):
            assert torch.equal(model(x), out)
        with slot.alpha_override(torch.zeros(b)):
            assert torch.equal(model(x), host_out)
        mixed = torch.tensor([slot.state.alpha, 0.0] * (b // 2))
        with slot.alpha_override(mixed):
            both = model(x)
        assert torch.equal(both[0::2], out[0::2]) and torch.equal(both[1::2], host_out[1::2])
        with slot.alpha_override(0.0):
            assert torch.equal(model(x), host_out)
        assert torch.equal(model(x), out)  # the override is gone after the block


def test_overrides_nest_and_restore() -> None:
    model, bare, slot, x = eval_case(Stage.BLENDING, "linear_add")
    with torch.no_grad():
        out, host_out = model(x), bare(x)
        with slot.alpha_override(1.0):
            full = model(x)
            with slot.alpha_override(0.0):
                assert torch.equal(model(x), host_out)
            assert torch.equal(model(x), full)
        assert torch.equal(model(x), out)
        assert not torch.equal(full, out)


def test_override_of_the_wrong_batch_size_is_refused() -> None:
    model, _, slot, x = eval_case(Stage.BLENDING, "linear_add")
    wrong = torch.zeros(x.shape[0] + 1)
    with (
        slot.alpha_override(wrong),
        pytest.raises(ValueError, match=r"r0c1: per-sample alpha has 7 values"),
    ):
        model(x)


def test_override_does_not_switch_on_a_training_seed() -> None:
    model, bare, x, _ = cnn_case()
    slot = drive_to(model.slot("r0c0"), Stage.TRAINING)
    with slot.alpha_override(1.0):
        assert torch.equal(model(x), bare(x))


# ---------------------------------------------------------------- germination details


def test_germinate_refuses_a_foreign_topology_and_an_unknown_style() -> None:
    slot = make_slot()
    with pytest.raises(ValueError, match="for transformer hosts, this slot is cnn"):
        slot.germinate("s", LIN_RES)
    with pytest.raises(ValueError, match="unknown style 'sparkly'"):
        slot.germinate("s", RES, "sparkly")
    assert slot.stage == Stage.DORMANT and slot.seed is None and slot.param_version == 0


def test_init_seed_is_deterministic_and_leaves_the_global_rng_alone() -> None:
    a, b = make_slot(), make_slot()
    rng = torch.random.get_rng_state()
    a.germinate("a", RES_RANDOM, "gated", init_seed=7)
    b.germinate("b", RES_RANDOM, "gated", init_seed=7)
    assert torch.equal(torch.random.get_rng_state(), rng)
    for p, q in zip(a.seed_parameters(), b.seed_parameters()):
        assert torch.equal(p, q)


def test_seed_follows_the_slot_dtype() -> None:
    slot = make_slot().double()
    drive_to(slot, Stage.HOLDING)
    assert all(p.dtype == torch.float64 for p in slot.seed_parameters())
    assert slot(torch.randn(2, 4, 3, 3, dtype=torch.float64)).dtype == torch.float64


def test_report_reflects_the_state() -> None:
    slot = drive_to(make_slot(), Stage.BLENDING, tempo=4)
    slot.state.record_contribution(1.0)
    slot.state.record_contribution(2.5)
    slot.state.record_gradients(0.8, False, 0.3, 1.2)
    report = slot.report()
    assert report.stage == Stage.BLENDING and report.slot_id == "r0c0"
    assert report.alpha == pytest.approx(0.25) and report.alpha_target == 1.0
    assert report.contribution == 2.5 and report.contribution_velocity == pytest.approx(1.5)
    assert report.gradient_health == 0.8 and report.grad_ratio == 0.3
    assert report.blueprint == RES_RANDOM.key and report.style == "linear_add"
