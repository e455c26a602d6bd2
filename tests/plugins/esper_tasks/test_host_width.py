"""Host width growth of the tasks' CNN host (esper_operators.host_width): bit-identity
at birth, prune, fossilize, the optimizer's state, the cost meter, and a run that grows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from esper_operators.host_width import HostWidthGrowth, WidthPlan, plan_by_factor
from esper_operators.width_conv import MaskedConvStage
from esper_tamiyo_heuristic.static import StaticOptions, StaticPolicy
from esper_tasks.hosts.cnn import CNNHost
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.policy import SchedulesHostGrowth, WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env import epoch_end
from esper_core.env.cost import CostMeter, architecture, params_forward
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.env.optimizers import carry_state
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.host_growth import WidthError
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import OPERATORS, assert_resumes_identically


def _no_blueprint(key: str) -> Blueprint:
    raise AssertionError(f"no seed grows in these tests ({key})")


def _model(convs: int = 1, base: int = 4) -> MorphogeneticModel:
    torch.manual_seed(0)
    return MorphogeneticModel(CNNHost(1, 10, base, 3, convs), _no_blueprint)


def _warm(model: nn.Module, x: torch.Tensor) -> None:
    """A few SGD steps, so BatchNorm statistics and weights are not at their init."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for _ in range(3):
        opt.zero_grad()
        model(x).logsumexp(dim=1).mean().backward()
        opt.step()


X = torch.randn(8, 1, 16, 16, generator=torch.Generator().manual_seed(3))


def _grow(model: MorphogeneticModel, factor: float = 2.0, **kw: object) -> HostWidthGrowth:
    gen = torch.Generator().manual_seed(7)
    growth = HostWidthGrowth(model, plan_by_factor(model.host, factor), generator=gen, **kw)  # type: ignore[arg-type]
    model.host_growths.append(growth)
    return growth


@pytest.mark.parametrize("convs", [1, 2])
@pytest.mark.parametrize("train", [True, False])
def test_the_host_computes_the_same_bits_at_birth(convs: int, train: bool) -> None:
    model = _model(convs)
    _warm(model, X)
    model.train(train)
    before = model(X)
    _grow(model)
    model.train(train)
    assert torch.equal(model(X), before)
    assert model.host.stage_channels() == (8, 16, 32)
    assert [s.spec.channels for s in model.iter_slots()] == [8, 16, 32]
    assert model.slot("r0c0").spec.next_channels == 16


def test_only_some_stages_can_grow() -> None:
    model = _model()
    before = model(X)
    growth = HostWidthGrowth(model, plan_by_factor(model.host, 1.5, [1]))
    assert model.host.stage_channels() == (4, 12, 16)
    assert torch.equal(model(X), before)
    # Stage 1 widened, stage 2 only reads its new channels: no stage-0 wrapper, no head one.
    stages = model.host.conv_stages()
    assert isinstance(stages[1], MaskedConvStage) and stages[1].out_extra == 4
    assert isinstance(stages[2], MaskedConvStage) and stages[2].out_extra == 0
    assert not isinstance(stages[0], MaskedConvStage)
    assert isinstance(model.host.head, nn.Linear)
    assert growth.affected_slots() == ["r0c0", "r0c1"]


def test_pruning_restores_the_old_function_and_parameters() -> None:
    model = _model(convs=2)
    original = {n: p for n, p in model.host.named_parameters()}
    growth = _grow(model)
    growth.set_alpha(0.6)
    _warm(model, X)  # the old parameters train on alongside the new ones
    model.eval()
    growth.set_alpha(0.0)
    at_zero = model(X)
    growth.prune()
    assert growth.stage == Stage.PRUNED
    assert torch.equal(model(X), at_zero)
    assert model.host.stage_channels() == (4, 8, 16)
    assert [s.spec.channels for s in model.iter_slots()] == [4, 8, 16]
    assert dict(model.host.named_parameters()) == original  # the very same parameters
    with pytest.raises(Exception, match="illegal"):
        growth.prune()


@pytest.mark.parametrize("convs", [1, 2])
def test_fossilizing_folds_the_mask_away(convs: int) -> None:
    model = _model(convs)
    growth = _grow(model, tempo=3)
    values = [growth.tick() for _ in range(3)]
    assert values == pytest.approx([1 / 3, 2 / 3, 1.0]) and growth.stage == Stage.HOLDING
    _warm(model, X)
    model.eval()
    expected = model(X)
    folded = growth.fossilize()
    assert growth.stage == Stage.FOSSILIZED and folded
    assert not any(isinstance(m, MaskedConvStage) for m in model.modules())
    assert torch.allclose(model(X), expected, atol=1e-5, rtol=1e-5)
    # The folded host has exactly the parameters of a host built at the new width.
    assert model.host_param_count() == _model(convs, base=8).host_param_count()
    assert model.host.head.in_features == 32


def test_fossilize_needs_the_ramp_done_and_refusals_say_why() -> None:
    model = _model()
    growth = _grow(model)
    growth.tick()
    with pytest.raises(Exception, match="fossilize is illegal from BLENDING"):
        growth.fossilize()
    with pytest.raises(WidthError, match="nothing to widen"):
        plan_by_factor(_model().host, 0.5)
    narrower = WidthPlan((0,), (_model().host.stage_channels()[0] // 2,))
    with pytest.raises(WidthError, match="needs more"):
        HostWidthGrowth(_model(), narrower)
    with pytest.raises(WidthError, match="out of range"):
        plan_by_factor(model.host, 2.0, [3])


def test_a_host_that_cannot_widen_is_named() -> None:
    class Flat(nn.Module):
        pass

    with pytest.raises(WidthError, match="Flat cannot grow in width"):
        plan_by_factor(Flat(), 2.0)


# ------------------------------------------------------------ the optimizer


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(X).logsumexp(dim=1).mean().backward()
    opt.step()


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_old_parameters_keep_their_state_new_ones_start_fresh(kind: str) -> None:
    model = _model(convs=2)
    make = (
        (lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9))
        if kind == "sgd"
        else (lambda ps: torch.optim.AdamW(ps, lr=0.01))
    )
    old_opt = make(list(model.host.parameters()))
    _step(model, old_opt)
    _step(model, old_opt)
    saved = {p: {k: v.clone() for k, v in old_opt.state[p].items()} for p in old_opt.state}
    growth = _grow(model)
    growth.set_alpha(1.0)  # so the new slices get gradients at once
    opt = make(list(model.host.parameters()))
    carry_state(old_opt, opt)
    for p, state in saved.items():
        for key, value in state.items():
            assert torch.equal(opt.state[p][key], value)
    new = growth.new_parameters()
    assert new and all(p not in opt.state for p in new)
    _step(model, opt)
    for p in new:
        assert p.grad is not None
        if kind == "sgd":  # a fresh momentum buffer is the first gradient itself
            assert torch.equal(opt.state[p]["momentum_buffer"], p.grad)
        else:  # fresh moments: zero, then one step of their running means
            assert torch.allclose(opt.state[p]["exp_avg"], 0.1 * p.grad)
            assert int(opt.state[p]["step"]) == 1


def test_folding_assembles_the_optimizer_state_of_the_pieces() -> None:
    model = _model()
    growth = _grow(model, tempo=1)
    growth.tick()
    opt = torch.optim.SGD(list(model.host.parameters()), lr=0.01, momentum=0.9)
    _step(model, opt)
    stage0 = model.host.conv_stages()[0]
    assert isinstance(stage0, MaskedConvStage)
    old_buf = opt.state[stage0.base[0].weight]["momentum_buffer"].clone()
    new_buf = opt.state[stage0.out_weight[0]]["momentum_buffer"].clone()
    folded = growth.fossilize()
    wide_opt = torch.optim.SGD(list(model.host.parameters()), lr=0.01, momentum=0.9)
    carry_state(opt, wide_opt, folded)
    conv = model.host.conv_stages()[0][0]
    assert isinstance(conv, nn.Conv2d) and conv.out_channels == 8
    buf = wide_opt.state[conv.weight]["momentum_buffer"]
    assert torch.equal(buf[:4], old_buf) and torch.equal(buf[4:], new_buf)
    assert all(p in wide_opt.state for p in model.host.parameters())


# ------------------------------------------------------------ costs


def test_the_cost_meter_counts_the_widened_layers() -> None:
    model = _model()
    loss = nn.functional.cross_entropy
    y = torch.zeros(X.shape[0], dtype=torch.long)
    meter = CostMeter(OPERATORS)
    meter.begin_epoch(model)
    small = meter.batch_flops(model, loss, X, y)
    params = params_forward(model)
    key = architecture(model, OPERATORS)
    growth = _grow(model)
    assert architecture(model, OPERATORS) != key
    assert params_forward(model) == params + growth.new_param_count()
    meter.begin_epoch(model)
    growing = meter.batch_flops(model, loss, X, y)
    growth.set_alpha(1.0)
    growth.stage = Stage.HOLDING
    growth.fossilize()
    meter.begin_epoch(model)
    wide = meter.batch_flops(model, loss, X, y)
    reference = _model(base=8)
    ref_meter = CostMeter(OPERATORS)
    ref_meter.begin_epoch(reference)
    assert wide == ref_meter.batch_flops(reference, loss, X, y)  # the base-8 host's FLOPs
    assert params_forward(model) == params_forward(reference)
    # Doubling every width roughly quadruples the convs' FLOPs; mid-growth it is the same
    # computation, split into the old and new channels' pieces.
    assert 3 * small < wide and growing == pytest.approx(wide, rel=0.05)


# ------------------------------------------------------------ in a run


def _glyphs(*overrides: str) -> list[str]:
    return [
        'run.task="glyphs"',
        "tasks.glyphs.n_train=256",
        "tasks.glyphs.n_val=64",
        "tasks.glyphs.n_test=64",
        "env.batch_size=64",
        'run.policy="static"',
        "run.telemetry=[]",
        *overrides,
    ]


def test_an_env_widens_at_its_epoch_and_folds_after_the_ramp(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=6")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.34, tempo=3)])  # epoch 2
    env.reset(0)
    host_params = env.host_params
    channels = []
    for _ in range(6):
        env.step(WAIT)
        growth = env.model.host_growth
        channels.append((env.model.host.stage_channels(), growth and round(growth.alpha, 3)))
        state = env.trainer.host_optimizer.state
        assert all(p in state for p in env.model.host.parameters() if p.grad is not None)
    # Born before epoch 2 at alpha 0 and ticked at once; folded at the end of epoch 3.
    assert channels == [
        ((4, 8, 16), None),
        ((8, 16, 32), pytest.approx(1 / 3, abs=1e-3)),
        ((8, 16, 32), pytest.approx(2 / 3, abs=1e-3)),
        ((8, 16, 32), None),
        ((8, 16, 32), None),
        ((8, 16, 32), None),
    ]
    assert env.host_params > host_params
    trained = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in env.model.host.parameters()}


def test_the_static_policy_schedules_a_width_growth() -> None:
    options = StaticOptions(widen_at=0.25, widen_factor=1.5, widen_stages=[0, 2], widen_tempo=4)
    policy = StaticPolicy(options, None)  # type: ignore[arg-type]
    assert isinstance(policy, SchedulesHostGrowth)
    assert policy.host_growths() == [WidthGrowthSpec(0.25, 1.5, (0, 2), 4)]
    assert StaticPolicy(StaticOptions(), None).host_growths() == []  # type: ignore[arg-type]


def test_the_masks_keep_seeds_out_of_slots_a_growth_is_widening(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=10")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.1, stages=(2,))])
    env.reset(0)
    env.step(WAIT)  # the growth is born at the end of epoch 1's step, before epoch 1
    slots = env.space.slot_ids
    assert env.model.host_growth is not None
    assert not env.fits[slots.index("r0c1")].any() and not env.fits[slots.index("r0c2")].any()
    assert env.fits[slots.index("r0c0")].any()


def test_a_schedule_that_cannot_apply_is_refused_in_one_line(pm: PluginManager) -> None:
    config = load_config(overrides=_glyphs("env.max_epochs=10"))
    env = make_env(config, pm)
    with pytest.raises(ConfigError, match="overlap"):
        env.schedule_host_growth([WidthGrowthSpec(at=0.1), WidthGrowthSpec(at=0.3)])
    with pytest.raises(ConfigError, match="out of range"):
        env.schedule_host_growth([WidthGrowthSpec(at=0.1, stages=(5,))])


def test_a_run_widened_at_epoch_k_ends_with_the_wide_host_and_resumes_identically(
    pm: PluginManager, tmp_path: Path
) -> None:
    base = _glyphs(
        "env.max_epochs=5",
        "policies.static.widen_at=0.2",  # epoch 1, folded at the end of epoch 3
        "policies.static.widen_tempo=4",
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    wide = _model(base=8).host_param_count()
    assert reference["episodes"][0]["host_params"] == wide
    # Interrupted mid-ramp (after epoch 2), resumed: the same run to the last bit.
    assert_resumes_identically(pm, tmp_path, base, reference)


def test_a_rollback_prunes_a_growth_in_flight_and_restores_the_snapshot(
    pm: PluginManager,
) -> None:
    config = load_config(overrides=_glyphs("env.max_epochs=10", "governor.snapshot_every=1"))
    env = make_env(config, pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.1, tempo=5)])  # born before epoch 1
    env.reset(0)
    env.step(WAIT)
    assert env.model.host_growth is not None
    snapshot_epoch = env.governor.snapshot_epoch
    env.step(WAIT)
    assert env.governor.snapshot_epoch == snapshot_epoch  # none taken mid-growth
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    assert env.model.host_growth is None
    assert env.model.host.stage_channels() == (4, 8, 16)
    params = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert params == {id(p) for p in env.model.host.parameters()}
    assert env.host_params == _model().host_param_count()
    env.step(WAIT)  # trains on at the old width
