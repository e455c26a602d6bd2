"""A host widened around a fossil (esper_core.lifecycle.slot_forward): the fossil keeps
the widths it was born at, acting on its slot's old channels, while the new channels
pass it by; the host computes what it did at the widening's birth, folds to what it
computed at alpha 1, a rollback brings the fossil back at its widths, the cost meter
counts the seed at its own width, and a run that fossilized a seed and then widened
resumes to the last bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from esper_operators.host_width import HostWidthGrowth, plan_by_factor
from esper_operators.width import LayerWidth

from esper_core.components.growth_request import WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env import epoch_end, host_growth
from esper_core.env.cost import CostMeter
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.env.host_growth_online import check_declared
from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp
from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_forward import branch, channel_dim, series, stage_forward
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import OPERATORS, assert_resumes_identically
from tests.plugins.esper_tasks.test_transformer_width import _charlm


def _glyphs(*overrides: str) -> list[str]:
    return [
        'run.task="glyphs"',
        "tasks.glyphs.n_train=128",
        "tasks.glyphs.n_val=64",
        "tasks.glyphs.n_test=64",
        "env.batch_size=64",
        'env.blueprints=["cnn/conv_small", "cnn/widen"]',
        'run.policy="static"',
        "run.telemetry=[]",
        *overrides,
    ]


def _fossil_model(pm: PluginManager, overrides: list[str], fossils: list[str]):  # type: ignore[no-untyped-def]
    """An env's model in float64 with ``fossils`` installed at birth, their weights drawn
    at random so each changes what the host computes."""
    env = make_env(load_config(overrides=overrides), pm)
    env.install_at_birth(fossils)
    env.reset(0)
    model = env.model.double().eval()
    _randomize(model)
    x = env.data.val.inputs[:8]
    return env, model, (x.double() if x.is_floating_point() else x)


def _randomize(model: MorphogeneticModel) -> None:
    """Random seed weights: a seed born an identity would hide where it reads and writes."""
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for slot in model.iter_slots():
            for p in slot.seed_parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def _grow(model: MorphogeneticModel, tempo: int = 2) -> HostWidthGrowth:
    plan = plan_by_factor(model.host, 2.0)
    growth = HostWidthGrowth(model, plan, tempo=tempo, generator=torch.Generator().manual_seed(7))
    model.host_growths.append(growth)
    return growth


def _out(model: MorphogeneticModel, x: torch.Tensor) -> torch.Tensor:
    model.eval()  # the growth's modules are built (and folded) in training mode
    with torch.no_grad():
        out: torch.Tensor = model(x)
    return out


def _slot_io(model: MorphogeneticModel, slot: SeedSlot, x: torch.Tensor) -> list[torch.Tensor]:
    """What a slot read and returned on ``x``: a series slot's activation and output; a
    branch slot's input, the following segment's output, and their merge."""
    seen: list[torch.Tensor] = []
    if not slot.is_branch:
        hook = slot.register_forward_hook(lambda _m, args, out: seen.extend([args[0], out]))
        _out(model, x)
        hook.remove()
        return seen
    merge = slot.merge

    def spy(pending: torch.Tensor, h_next: torch.Tensor) -> torch.Tensor:
        out = merge(pending, h_next)
        seen.extend([pending, h_next, out])
        return out

    slot.merge = spy  # type: ignore[method-assign]
    try:
        _out(model, x)
    finally:
        del slot.merge
    return seen


def _assert_fossil_on_old_channels(
    model: MorphogeneticModel, slot_id: str, x: torch.Tensor, born: tuple[int, ...]
) -> None:
    """The slot's output: on the first channels the fossil alone, reading and writing
    the widths it was ``born`` at (a branch: its input's, then its output's); on the rest
    the activation unchanged."""
    slot = model.slot(slot_id)
    assert slot.seed is not None
    dim = channel_dim(slot.spec.topology)
    seen = _slot_io(model, slot, x)
    if slot.is_branch:
        pending, h, out = seen
        assert pending.shape[dim] > born[0]
        old = h.narrow(dim, 0, born[1])
        proposal = branch(slot.seed, pending.narrow(dim, 0, born[0]), old)
    else:
        h, out = seen
        old = h.narrow(dim, 0, born[0])
        proposal = series(slot.seed, old)
    width, rest = old.shape[dim], h.shape[dim] - old.shape[dim]
    assert rest > 0
    with torch.no_grad():
        alone = stage_forward(slot, old, proposal)
    assert torch.equal(out.narrow(dim, 0, width), alone)
    assert not torch.equal(alone, old)  # the fossil does something there
    assert torch.equal(out.narrow(dim, width, rest), h.narrow(dim, width, rest))


def _through_the_widening(
    model: MorphogeneticModel, x: torch.Tensor, fossils: dict[str, tuple[int, ...]]
) -> None:
    """Birth: the same bits; the ramp: each fossil on the old channels at the widths it
    was born at; the fold: what alpha 1 computed (float64, to 1e-6 where the fold
    reorders sums), the fossils still on the old channels."""
    before = _out(model, x)
    growth = _grow(model)
    assert torch.equal(_out(model, x), before)
    for _ in range(2):
        growth.tick()
        for slot_id, born in fossils.items():
            _assert_fossil_on_old_channels(model, slot_id, x, born)
    assert growth.stage == Stage.HOLDING
    at_one = _out(model, x)
    growth.fossilize()
    assert torch.allclose(_out(model, x), at_one, atol=1e-6, rtol=0)
    for slot_id, born in fossils.items():
        _assert_fossil_on_old_channels(model, slot_id, x, born)
        assert model.slot(slot_id).stage == Stage.FOSSILIZED


@pytest.mark.parametrize("style", ["linear_add", "gated", "linear_multiply"])
def test_a_cnn_widens_around_a_series_and_a_branch_fossil(pm: PluginManager, style: str) -> None:
    """r0c1 (after stage 1) holds a series fossil, r0c0 a branch of stage 1: widening every
    stage changes the widths both read and write; each blend style (a gate reads the
    seed's input) works on the old channels."""
    fossils = [f"cnn/conv_small@r0c1:{style}", f"cnn/widen@r0c0:{style}"]
    _env, model, x = _fossil_model(pm, _glyphs("env.max_epochs=4"), fossils)
    assert model.host.stage_channels() == (4, 8, 16)
    _through_the_widening(model, x, {"r0c1": (8,), "r0c0": (4, 8)})
    assert model.host.stage_channels() == (8, 16, 32)
    branch = model.slot("r0c0")
    assert (branch.spec.channels, branch.spec.next_channels) == (8, 16)
    assert (branch.seed_spec.channels, branch.seed_spec.next_channels) == (4, 8)


def test_a_transformer_widens_d_model_around_a_fossil(pm: PluginManager, tmp_path: Path) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=4")
    _env, model, x = _fossil_model(pm, overrides, ["transformer/block@r0c0"])
    _through_the_widening(model, x, {"r0c0": (16,)})
    assert model.host.stage_channels() == (32,)


def test_a_users_layer_pair_widens_around_a_fossil(pm: PluginManager) -> None:
    """layers/width (a Grower's model): the slot on the widened layer's output keeps its
    fossil at 8 features while the layer grows to 16."""
    operator = LayerWidth()
    sample = operator.sample()
    blueprints = {b.key: b for b in pm.blueprints_for("mlp")}
    model = MorphogeneticModel(sample.host, blueprints.__getitem__).double()
    (slot,) = model.iter_slots()
    slot.install_at_birth("s0", blueprints["mlp/residual"], epochs_done=0)
    _randomize(model)
    x = sample.example_input.double()
    before = _out(model, x)
    plan = plan_by_factor(model.host, 2.0, (), operator.layout)
    growth = HostWidthGrowth(model, plan, tempo=2, layout=operator.layout)
    model.host_growths.append(growth)
    assert torch.equal(_out(model, x), before)
    for _ in range(2):
        growth.tick()
        _assert_fossil_on_old_channels(model, slot.slot_id, x, (8,))
    at_one = _out(model, x)
    growth.fossilize()
    assert torch.allclose(_out(model, x), at_one, atol=1e-6, rtol=0)
    assert (slot.spec.channels, slot.seed_spec.channels) == (16, 8)


def test_a_live_seed_still_blocks_the_widening(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=4")), pm)
    env.reset(0)
    env.step(env.space.germinate("r0c1", "cnn/conv_small", "linear_add"))
    with pytest.raises(WidthError, match="r0c1, which holds a live seed"):
        _grow(env.model)


def test_a_seed_grown_then_fossilized_no_longer_blocks_a_widening(pm: PluginManager) -> None:
    """Grow a seed first, then widen the host: while the seed lives the widening is not
    ready; once it is fossilized the request is honoured and the episode runs to its end."""
    fast = [
        'lifecycle.isolation="none"',
        'lifecycle.isolation_non_identity="none"',
        "lifecycle.tempos=[1]",
        "lifecycle.default_tempo=1",
        "lifecycle.min_training_epochs=0",
    ]
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=6", *fast)), pm)
    widen = WidthGrowthSpec(at=0.0, tempo=2)
    check_declared([env], [widen])
    env.reset(0)
    ready = [env.step(env.space.germinate("r0c1", "cnn/conv_small", "linear_add", 1))]
    ready.append(env.step(env.space.on_slot(LifecycleOp.ADVANCE, "r0c1")))  # to HOLDING
    ready.append(env.step(env.space.on_slot(LifecycleOp.FOSSILIZE, "r0c1")))
    assert [r.observation.host_growth_ready for r in ready] == [(False,), (False,), (True,)]
    assert env.model.slot("r0c1").stage == Stage.FOSSILIZED
    grow = Action(host_growth=WidthGrowthSpec(at=env.epoch / env.max_epochs, tempo=2))
    results = [env.step(grow)] + [env.step(WAIT) for _ in range(2)]
    assert all(r.refused is None for r in results) and results[-1].done
    assert [r.stage for r in host_growth.records(env)] == ["FOSSILIZED"]
    slot = env.model.slot("r0c1")
    assert slot.stage == Stage.FOSSILIZED and env.model.host.stage_channels() == (8, 16, 32)
    assert (slot.spec.channels, slot.seed_spec.channels) == (16, 8)


def test_a_rollback_mid_widening_restores_the_host_and_its_fossil(pm: PluginManager) -> None:
    overrides = _glyphs("env.max_epochs=6", "governor.snapshot_every=1")
    env = make_env(load_config(overrides=overrides), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.2, tempo=4)])  # born before epoch 1
    env.install_at_birth(["cnn/conv_small@r0c1"])
    env.reset(0)
    env.step(WAIT)
    assert env.model.host_growth is not None
    env.step(WAIT)
    snapshot = env.governor.snapshot_state
    assert snapshot is not None
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    slot = env.model.slot("r0c1")
    assert env.model.host_growth is None and env.model.host.stage_channels() == (4, 8, 16)
    assert slot.stage == Stage.FOSSILIZED and slot.spec == slot.seed_spec
    restored = slot.state_dict()
    assert all(
        torch.equal(restored[k], v)
        for k, v in snapshot["fossils"]["r0c1"].items()
        if isinstance(v, torch.Tensor)
    )
    assert env.step(WAIT).refused is None  # trains on at the old width
    # After the fold the snapshot is of the wide host: the fossil comes back at its widths.
    env = make_env(load_config(overrides=overrides), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.2, tempo=1)])  # folded after epoch 1
    env.install_at_birth(["cnn/conv_small@r0c1"])
    env.reset(0)
    for _ in range(3):
        env.step(WAIT)
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    slot = env.model.slot("r0c1")
    assert (slot.spec.channels, slot.seed_spec.channels) == (16, 8)
    assert env.step(WAIT).refused is None


def test_the_cost_meter_counts_the_fossil_at_its_own_width(pm: PluginManager) -> None:
    """The fossil's FLOPs after the widening are those of the seed as born: the widened
    host with it costs what the widened host alone costs plus what the fossil cost before."""
    _env, model, x = _fossil_model(pm, _glyphs("env.max_epochs=4"), ["cnn/conv_small@r0c1"])
    y = torch.zeros(x.shape[0], dtype=torch.long)
    loss = torch.nn.functional.cross_entropy

    def flops() -> tuple[int, int]:
        meter = CostMeter(OPERATORS)
        meter.begin_epoch(model)
        with_seed = meter.batch_flops(model, loss, x, y, x.shape[0])
        return with_seed, round(meter.host_per_sample * x.shape[0])

    with_seed, host = flops()
    seed_before = with_seed - host
    growth = _grow(model, tempo=1)
    growth.tick()
    growth.fossilize()
    with_seed, host = flops()
    assert with_seed - host == seed_before > 0


def test_a_run_that_widens_around_a_fossil_resumes_identically(
    pm: PluginManager, tmp_path: Path
) -> None:
    base = _glyphs(
        "env.max_epochs=5",
        'policies.static.seeds=["cnn/conv_small@r0c1"]',
        "policies.static.widen_at=0.2",  # born before epoch 1, folded at the end of epoch 2
        "policies.static.widen_tempo=3",
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    episode = reference["episodes"][0]
    assert episode["host_params"] > 0
    for at_epoch in (1, 3):  # mid-ramp (alpha 2/3), and after the fold
        assert_resumes_identically(pm, tmp_path / f"at{at_epoch}", base, reference, at_epoch)
