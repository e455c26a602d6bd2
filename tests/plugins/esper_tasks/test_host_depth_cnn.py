"""Depth growth of the tasks' CNN host (esper_operators.deepening_cnn): new conv
layers before each stage's pool, bit-identical at birth, the host built deep at alpha 1,
prune, the optimizer's state, the cost meter, and runs that deepen (resume mid-ramp,
rollback and a later widening included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from esper_operators.deepening_cnn import GatedLayer
from esper_operators.host_depth import DepthError, HostDepthGrowth, deepenable
from esper_tamiyo_heuristic.static import StaticOptions, StaticPolicy
from esper_tasks.hosts.cnn import CNNHost
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.policy import DepthGrowthSpec
from esper_core.config import load_config
from esper_core.env import epoch_end
from esper_core.env.cost import CostMeter, architecture, params_forward
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.host_growth import GrowthError
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import (
    OPERATORS,
    assert_resumes_identically,
    grown_with_state_carried,
)

CLASSES = 5
X = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(3))
Y = torch.randint(0, CLASSES, (6,), generator=torch.Generator().manual_seed(4))


def _no_blueprint(key: str) -> Blueprint:
    raise AssertionError(f"no seed grows in these tests ({key})")


def _host(convs: int = 1, before_pool: bool = False) -> CNNHost:
    torch.manual_seed(0)
    return CNNHost(3, CLASSES, 4, 3, convs_per_block=convs, slots_before_pool=before_pool)


def _model(convs: int = 1, before_pool: bool = False) -> MorphogeneticModel:
    return MorphogeneticModel(_host(convs, before_pool), _no_blueprint)


def _loss(model: nn.Module) -> torch.Tensor:
    return nn.functional.cross_entropy(model(X), Y)


def _train(model: nn.Module, steps: int = 3) -> None:
    """A few SGD steps, so no weight is at its init (the new ones included)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        _loss(model).backward()
        opt.step()


def _grow(
    model: MorphogeneticModel, mode: str = "identity", factor: int = 2, stages: tuple[int, ...] = ()
) -> HostDepthGrowth:
    gen = torch.Generator().manual_seed(7)
    growth = HostDepthGrowth(model, mode, factor, stages=stages, tempo=3, generator=gen)
    model.host_growths.append(growth)
    return growth


def _hold(growth: HostDepthGrowth) -> None:
    for _ in range(3):
        growth.tick()
    assert growth.stage == Stage.HOLDING and growth.alpha == 1.0


def _convs(model: MorphogeneticModel) -> int:
    return sum(isinstance(m, nn.Conv2d) for m in model.host.modules())


@pytest.mark.parametrize(
    ("mode", "factor", "convs", "before_pool"),
    [
        ("identity", 2, 1, False),
        ("identity", 3, 1, True),
        ("stack", 2, 2, False),
        ("stack", 3, 2, True),
    ],
)
def test_the_host_computes_the_same_bits_at_birth(
    mode: str, factor: int, convs: int, before_pool: bool
) -> None:
    model = _model(convs, before_pool)
    _train(model)
    old = dict(model.host.named_parameters())
    # A training forward moves the BatchNorms' running statistics: put them back after it.
    state = {k: v.clone() for k, v in model.host.state_dict().items()}
    model.eval()
    evaluated = model(X)
    model.train()
    model.zero_grad()
    before = _loss(model)
    before.backward()
    grads = {n: p.grad.clone() for n, p in old.items() if p.grad is not None}
    model.zero_grad()
    growth = _grow(model, mode, factor)
    model.host.load_state_dict(state, strict=False)
    model.eval()
    assert torch.equal(model(X), evaluated)
    model.train()
    after = _loss(model)
    after.backward()
    assert torch.equal(after, before)  # train mode: batch statistics, the new BN's too
    assert all(torch.equal(old[n].grad, g) for n, g in grads.items())  # type: ignore[arg-type]
    # identity: (factor - 1) x k new layers a stage; stack: factor - 1 copies of its C->C.
    added = (factor - 1) * (convs if mode == "identity" else convs - 1)
    assert _convs(model) == 3 * (convs + added)
    assert growth.sizes(True) == {f"stage{i}_layers": convs + added for i in range(3)}
    growth.set_alpha(0.5)
    assert not torch.allclose(_loss(model), before)


def test_identity_at_alpha_one_is_the_host_built_deep_and_folds_exactly() -> None:
    model = _model()
    growth = _grow(model)
    _hold(growth)
    _train(model)
    model.eval()
    held = model(X).detach()
    assert growth.fossilize() == []  # the same parameters: nothing to assemble
    assert not any(isinstance(m, GatedLayer) for m in model.host.modules())
    assert torch.equal(model(X), held)  # lerp's end point is exact: the fold changes no bit
    # The folded stages are named as a host built with two convs a stage names them.
    deep = _host(2)
    deep.load_state_dict(model.host.state_dict())
    deep.eval()
    assert torch.equal(deep(X), held)
    assert (
        model.host_param_count() == MorphogeneticModel(_host(2), _no_blueprint).host_param_count()
    )


def test_stack_copies_each_stages_channel_preserving_layers_on_top_of_them() -> None:
    model = _model(2)
    _train(model)
    second = [v.clone() for v in model.host.blocks[1][3:5].state_dict().values()]
    growth = _grow(model, "stack")
    _hold(growth)
    growth.fossilize()
    model.eval()
    # [l1: 4->8, l2: 8->8] -> [l1, l2, l2']: the host built with three convs a stage.
    copied = list(model.host.blocks[1][6:8].state_dict().values())
    assert len(copied) == len(second) == 6
    assert all(torch.equal(c, v) for c, v in zip(copied, second))
    deep = _host(3)
    deep.load_state_dict(model.host.state_dict())
    deep.eval()
    assert torch.allclose(deep(X), model(X), atol=1e-6)


def test_only_the_named_stages_deepen() -> None:
    model = _model()
    growth = _grow(model, stages=(1,))
    assert growth.sizes(False) == {"stage0_layers": 1, "stage1_layers": 1, "stage2_layers": 1}
    assert growth.sizes(True) == {"stage0_layers": 1, "stage1_layers": 2, "stage2_layers": 1}
    assert growth.describe() == "stage 1 layers 1 -> 2, identity"
    assert growth.new_param_count() == 9 * 8 * 8 + 2 * 8  # one 8->8 conv and its BatchNorm
    assert [s.slot_id for s in model.iter_slots() if s.slot_id in growth.affected_slots()] == [
        "r0c1"
    ]


def test_pruning_restores_the_old_function_and_parameters() -> None:
    model = _model()
    original = dict(model.host.named_parameters())
    count = model.host_param_count()
    growth = _grow(model)
    growth.set_alpha(0.6)
    _train(model)  # the old parameters train on alongside the new ones
    assert model.host_param_count() > count
    growth.set_alpha(0.0)
    model.eval()
    at_zero = model(X).detach()
    growth.prune()
    assert growth.stage == Stage.PRUNED
    assert torch.equal(model(X), at_zero)
    assert dict(model.host.named_parameters()) == original  # the very same parameters
    assert model.host_param_count() == count
    assert [len(block) for block in model.host.blocks] == [4, 4, 4]
    with pytest.raises(Exception, match="illegal"):
        growth.prune()


def test_old_parameters_keep_their_state_new_ones_start_fresh() -> None:
    model = _model()
    growth, opt = grown_with_state_carried(model, _loss, _grow)
    new = growth.new_parameters()
    assert len(new) == 9  # a conv weight and a BatchNorm's two, in each of three stages
    assert all(p not in opt.state for p in new)
    opt.zero_grad()
    _loss(model).backward()
    opt.step()
    for p in new:  # fresh moments: zero, then one step of their running means
        assert p.grad is not None
        assert torch.allclose(opt.state[p]["exp_avg"], 0.1 * p.grad)
        assert int(opt.state[p]["step"]) == 1


def test_the_cost_meter_counts_the_new_layers() -> None:
    model = _model()
    run_meter = CostMeter(OPERATORS)  # one meter across the growth, as an episode's

    def flops(m: MorphogeneticModel, meter: CostMeter | None = None) -> int:
        meter = meter if meter is not None else CostMeter(OPERATORS)
        meter.begin_epoch(m)
        return meter.batch_flops(m, nn.functional.cross_entropy, X, Y)

    small, params = flops(model, run_meter), params_forward(model)
    growth = _grow(model)
    assert params_forward(model) == params + growth.new_param_count()
    growing = flops(model, run_meter)
    _hold(growth)
    growth.fossilize()
    reference = MorphogeneticModel(_host(2), _no_blueprint)
    assert architecture(model, OPERATORS) == architecture(reference, OPERATORS)
    # The deeper stages are a new architecture: counted anew, not priced as the old one.
    assert flops(model, run_meter) == flops(reference) == growing
    assert params_forward(model) == params_forward(reference)
    assert 1.5 * small < growing


def test_a_plan_that_cannot_deepen_is_refused_in_one_line() -> None:
    for args, match in (
        (
            ("stack", 2, ()),
            'stage 0 has no channel-preserving layer to stack; deepen it with fresh layers: mode "identity"',
        ),
        (("identity", 2, (3,)), "deepen_stages 3 out of range: this host has stages 0..2"),
        (("identity", 2, (1, 1)), "names a stage twice"),
        (("copy", 2, ()), "expected one of stack, identity"),
        (("identity", 9, ()), "2 to 8 times"),
    ):
        mode, factor, stages = args
        with pytest.raises(GrowthError, match=match) as caught:
            HostDepthGrowth(_model(), mode, factor, stages=stages)  # type: ignore[arg-type]
        assert "\n" not in str(caught.value)
    with pytest.raises(DepthError, match="Linear cannot grow in depth") as caught:
        deepenable(nn.Linear(2, 2))
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------ in an env and a run


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


def _built(pm: PluginManager, *overrides: str) -> int:
    return make_env(load_config(overrides=_glyphs(*overrides)), pm).model.host_param_count()


def test_the_static_policy_schedules_a_cnn_depth_growth() -> None:
    options = StaticOptions(deepen_at=0.25, deepen_mode="identity", deepen_stages=[0, 2])
    policy = StaticPolicy(options, None)  # type: ignore[arg-type]
    assert policy.host_growths() == [DepthGrowthSpec(0.25, "identity", stages=(0, 2))]


def test_an_env_deepens_at_its_epoch_and_folds_after_the_ramp(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=5")), pm)
    env.schedule_host_growth([DepthGrowthSpec(at=0.4, mode="identity", tempo=3, stages=(2,))])
    env.reset(0)
    small = env.host_params
    depths = []
    for _ in range(5):
        env.step(WAIT)
        growth = env.model.host_growth
        depths.append((len(env.model.host.blocks[2]), growth and round(growth.alpha, 3)))
        if growth is not None:  # no seed may be born after the stage it deepens
            assert not env.fits[env.space.slot_ids.index("r0c2")].any()
        state = env.trainer.host_optimizer.state
        assert all(p in state for p in env.model.host.parameters() if p.grad is not None)
    # Born before epoch 2 at alpha 0 and ticked at once; folded at the end of epoch 3.
    assert depths == [
        (4, None),
        (5, pytest.approx(1 / 3, abs=1e-3)),
        (5, pytest.approx(2 / 3, abs=1e-3)),
        (7, None),
        (7, None),
    ]
    assert env.host_params == small + 9 * 16 * 16 + 2 * 16
    trained = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in env.model.host.parameters()}


def test_a_schedule_that_cannot_deepen_is_refused_in_one_line(
    pm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=10")), pm)
    import esper_operators.depth

    # The depth operator checks the bound (a plugin's, since operators are plugins).
    monkeypatch.setattr(esper_operators.depth, "MAX_HOST_WEIGHTS", 3 * env.host_params)
    for spec, match in (
        (DepthGrowthSpec(at=0.2), "stage 0 has no channel-preserving layer to stack"),
        (DepthGrowthSpec(at=0.2, mode="identity", stages=(4,)), "out of range"),
        (DepthGrowthSpec(at=0.2, mode="identity", factor=4), "lower the factor"),
    ):
        with pytest.raises(ConfigError, match=match) as caught:
            env.schedule_host_growth([spec])
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("mode", "convs"), [("identity", 1), ("stack", 2)])
def test_a_deepened_run_resumes_mid_ramp_identically(
    pm: PluginManager, tmp_path: Path, mode: str, convs: int
) -> None:
    base = _glyphs(
        "env.max_epochs=5",
        f"tasks.glyphs.convs_per_block={convs}",
        "policies.static.deepen_at=0.2",  # epoch 1, folded at the end of epoch 3
        "policies.static.deepen_tempo=4",
        f'policies.static.deepen_mode="{mode}"',
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    deep = _built(pm, f"tasks.glyphs.convs_per_block={2 * convs - (mode == 'stack')}")
    assert reference["episodes"][0]["host_params"] == deep
    # Interrupted mid-ramp (after epoch 2), resumed: the same run to the last bit.
    assert_resumes_identically(pm, tmp_path, base, reference)


def test_a_rollback_prunes_a_growth_in_flight_and_restores_the_snapshot(
    pm: PluginManager,
) -> None:
    config = load_config(overrides=_glyphs("env.max_epochs=10", "governor.snapshot_every=1"))
    env = make_env(config, pm)
    env.schedule_host_growth([DepthGrowthSpec(at=0.1, mode="identity", tempo=5)])
    env.reset(0)
    small = env.host_params
    env.step(WAIT)
    assert env.model.host_growth is not None
    snapshot = {k: v.clone() for k, v in env.governor.snapshot_state["host"].items()}  # type: ignore[index]
    snapshot_epoch = env.governor.snapshot_epoch
    env.step(WAIT)
    assert env.governor.snapshot_epoch == snapshot_epoch  # none taken mid-growth
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    assert env.model.host_growth is None
    state = env.model.host.state_dict()
    assert state.keys() == snapshot.keys()
    assert all(torch.equal(state[k], v) for k, v in snapshot.items())  # the old function
    params = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert params == {id(p) for p in env.model.host.parameters()}
    assert env.host_params == small
    env.step(WAIT)  # trains on at the old depth


def test_a_host_deepened_then_widened_is_the_host_built_deep_and_wide(
    pm: PluginManager, tmp_path: Path
) -> None:
    base = _glyphs(
        "env.max_epochs=4",
        "policies.static.deepen_at=0.0",  # folded after epoch 0 (tempo 2)
        'policies.static.deepen_mode="identity"',
        "policies.static.deepen_tempo=2",
        "policies.static.widen_at=0.5",  # epoch 2: widens the inserted layers too
        "policies.static.widen_tempo=2",
        'run.telemetry=["jsonl"]',
    )
    result = run(load_config(overrides=base), pm, run_dir=tmp_path / "r", quiet=True)
    expected = _built(pm, 'tasks.glyphs.preset="base"', "tasks.glyphs.convs_per_block=2")
    assert result["episodes"][0]["host_params"] == expected
    events = [json.loads(line) for line in (tmp_path / "r" / "events.jsonl").open()]
    started = [e for e in events if e["kind"] == "host_growth_started"]
    assert [e["operator"] for e in started] == ["depth", "width"]
    depth = started[0]
    assert depth["plan"] == (
        "stage 0 layers 1 -> 2, stage 1 layers 1 -> 2, stage 2 layers 1 -> 2, identity"
    )
    assert depth["widths_after"] == {f"stage{i}_layers": 2 for i in range(3)}
