"""Depth growth of the tasks' transformer host (esper_operators.host_depth): G_stack
and identity blocks bit-identical at birth, the ramp, the fold, prune, the optimizer's
state, the cost meter, and runs that deepen (resume mid-ramp and rollback included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from esper_operators.deepening import GatedBlock
from esper_operators.host_depth import DepthError, HostDepthGrowth
from esper_tamiyo_heuristic.static import StaticOptions, StaticPolicy
from esper_tasks.hosts.transformer import Block, TransformerHost
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.policy import DepthGrowthSpec, SchedulesHostGrowth
from esper_core.config import load_config
from esper_core.converter import structure
from esper_core.env import epoch_end, host_growth
from esper_core.env.cost import CostMeter, architecture, params_forward
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.ledger import HostGrowthRecord
from esper_core.run.summary import growth_verdict
from tests.plugins.esper_tasks.growth_checks import (
    OPERATORS,
    assert_resumes_identically,
    grown_with_state_carried,
)

VOCAB, BLOCK = 11, 8


def _no_blueprint(key: str) -> Blueprint:
    raise AssertionError(f"no seed grows in these tests ({key})")


def _host(n_layer: int = 2) -> TransformerHost:
    torch.manual_seed(0)
    return TransformerHost(VOCAB, BLOCK, 16, n_layer=n_layer, n_head=2, n_segments=2)


def _model(n_layer: int = 2) -> MorphogeneticModel:
    return MorphogeneticModel(_host(n_layer), _no_blueprint)


X = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(3))
Y = torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(4))


def _loss(model: nn.Module) -> torch.Tensor:
    logits = model(X)
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), Y.reshape(-1))


def _train(model: nn.Module, steps: int = 3) -> None:
    """A few SGD steps, so no weight is at its init (the new ones included)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        opt.zero_grad()
        _loss(model).backward()
        opt.step()


def _grow(model: MorphogeneticModel, mode: str = "stack", factor: int = 2) -> HostDepthGrowth:
    gen = torch.Generator().manual_seed(7)
    growth = HostDepthGrowth(model, mode, factor, tempo=3, generator=gen)
    model.host_growths.append(growth)
    return growth


def _blocks(model: MorphogeneticModel) -> int:
    return sum(isinstance(m, Block) for m in model.host.modules())


@pytest.mark.parametrize(("mode", "factor"), [("stack", 2), ("identity", 2), ("stack", 3)])
def test_the_host_computes_the_same_bits_at_birth(mode: str, factor: int) -> None:
    model = _model()
    _train(model)
    old = dict(model.host.named_parameters())
    model.zero_grad()
    before = _loss(model)
    before.backward()
    grads = {n: p.grad.clone() for n, p in old.items() if p.grad is not None}
    model.zero_grad()
    growth = _grow(model, mode, factor)
    after = _loss(model)
    after.backward()
    assert torch.equal(after, before)
    assert all(torch.equal(old[n].grad, g) for n, g in grads.items())  # type: ignore[arg-type]
    assert _blocks(model) == 2 * factor and model.host.n_layer == 2 * factor
    assert growth.new_param_count() == (factor - 1) * sum(
        p.numel()
        for p in model.host.segments.parameters()
        if id(p) in {id(q) for q in old.values()}
    )
    # The new blocks change the output as soon as the ramp lets them in.
    growth.set_alpha(0.5)
    assert not torch.allclose(_loss(model), before)


def test_g_stack_at_alpha_one_is_the_stack_copied_on_itself_and_folds_exactly() -> None:
    model = _model()
    _train(model)
    host = model.host
    b1, b2 = (host.segments[0][0], host.segments[1][0])
    growth = _grow(model)
    for _ in range(3):
        growth.tick()
    assert growth.stage == Stage.HOLDING and growth.alpha == 1.0
    held = model(X).detach()
    # What G_stack means: [b1, b2] -> [b1, b2, b1', b2'], a plain host of that depth.
    deep = _host(4)
    deep.load_state_dict(
        {
            **{k: v for k, v in host.state_dict().items() if not k.startswith("segments")},
            **{f"segments.0.0.{k}": v for k, v in b1.state_dict().items()},
            **{f"segments.0.1.{k}": v for k, v in b2.state_dict().items()},
            **{f"segments.1.0.{k}": v for k, v in b1.state_dict().items()},
            **{f"segments.1.1.{k}": v for k, v in b2.state_dict().items()},
        }
    )
    assert torch.allclose(deep(X), held, atol=1e-6)
    assert growth.fossilize() == []  # the same parameters: nothing to assemble
    assert growth.stage == Stage.FOSSILIZED
    assert not any(isinstance(m, GatedBlock) for m in host.modules())
    assert torch.equal(model(X), held)  # lerp's end point is exact: the fold changes no bit
    assert (
        model.host_param_count() == MorphogeneticModel(_host(4), _no_blueprint).host_param_count()
    )


def test_pruning_restores_the_old_function_and_parameters() -> None:
    model = _model()
    original = dict(model.host.named_parameters())
    count = model.host_param_count()
    growth = _grow(model, "identity")
    growth.set_alpha(0.6)
    _train(model)  # the old parameters train on alongside the new ones
    assert model.host_param_count() > count
    growth.set_alpha(0.0)
    at_zero = model(X).detach()
    growth.prune()
    assert growth.stage == Stage.PRUNED
    assert torch.equal(model(X), at_zero)
    assert dict(model.host.named_parameters()) == original  # the very same parameters
    assert model.host_param_count() == count and model.host.n_layer == 2
    with pytest.raises(Exception, match="illegal"):
        growth.prune()


def test_old_parameters_keep_their_state_new_ones_start_fresh() -> None:
    model = _model()
    growth, opt = grown_with_state_carried(model, _loss, _grow)
    new = growth.new_parameters()
    assert len(new) == len(opt.state) - 4  # the blocks' (not the two embeddings, nor ln_f's two)
    assert all(p not in opt.state for p in new)
    opt.zero_grad()
    _loss(model).backward()
    opt.step()
    for p in new:  # fresh moments: zero, then one step of their running means
        assert p.grad is not None
        assert torch.allclose(opt.state[p]["exp_avg"], 0.1 * p.grad)
        assert int(opt.state[p]["step"]) == 1


def test_the_cost_meter_counts_the_new_blocks() -> None:
    model = _model()
    loss = nn.functional.cross_entropy
    run_meter = CostMeter(OPERATORS)  # one meter across the growth, as an episode's

    def flops(m: MorphogeneticModel, meter: CostMeter | None = None) -> int:
        meter = meter if meter is not None else CostMeter(OPERATORS)
        meter.begin_epoch(m)
        return meter.batch_flops(
            m, lambda out, y: loss(out.reshape(-1, VOCAB), y.reshape(-1)), X, Y
        )

    small, params = flops(model, run_meter), params_forward(model)
    growth = _grow(model)
    assert params_forward(model) == params + growth.new_param_count()
    growing = flops(model, run_meter)
    growth.set_alpha(1.0)
    growth.stage = Stage.HOLDING
    growth.fossilize()
    reference = MorphogeneticModel(_host(4), _no_blueprint)
    assert architecture(model, OPERATORS) == architecture(reference, OPERATORS)
    # The deeper stack is a new architecture: counted anew, not priced as the old one.
    assert flops(model, run_meter) == flops(reference) == growing
    assert params_forward(model) == params_forward(reference)
    assert 1.5 * small < growing


def test_a_host_or_a_plan_that_cannot_deepen_is_refused_in_one_line() -> None:
    # A CNN host deepens too (test_host_depth_cnn.py); a transformer has no stages to name.
    with pytest.raises(DepthError, match="leave deepen_stages empty") as caught:
        HostDepthGrowth(_model(), "identity", stages=(0,))
    assert "\n" not in str(caught.value)
    with pytest.raises(DepthError, match="expected one of stack, identity"):
        HostDepthGrowth(_model(), "copy")
    with pytest.raises(DepthError, match="2 to 8 times"):
        HostDepthGrowth(_model(), "stack", 1)


# ------------------------------------------------------------ in an env and a run


def _charlm(tmp_path: Path, *overrides: str) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 120, encoding="utf-8")
    return [
        'run.task="charlm"',
        f'tasks.charlm.path="{corpus.as_posix()}"',
        "tasks.charlm.max_chars=3000",
        "tasks.charlm.block_size=16",
        "tasks.charlm.d_model=16",
        "tasks.charlm.n_head=2",
        "tasks.charlm.n_layer=2",
        "tasks.charlm.n_segments=2",
        'env.blueprints=["transformer/block"]',
        'run.policy="static"',
        "run.telemetry=[]",
        *overrides,
    ]


def test_the_static_policy_schedules_a_depth_growth() -> None:
    options = StaticOptions(deepen_at=0.2, deepen_mode="identity", deepen_factor=3)
    policy = StaticPolicy(options, None)  # type: ignore[arg-type]
    assert isinstance(policy, SchedulesHostGrowth)
    assert policy.host_growths() == [DepthGrowthSpec(0.2, "identity", 3)]


def test_an_env_deepens_at_its_epoch_and_folds_after_the_ramp(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=5")), pm)
    env.schedule_host_growth([DepthGrowthSpec(at=0.4, tempo=3)])  # epoch 2
    env.reset(0)
    small = env.host_params
    depths = []
    for _ in range(5):
        env.step(WAIT)
        growth = env.model.host_growth
        depths.append((env.model.host.n_layer, growth and round(growth.alpha, 3)))
        if growth is not None:  # no seed may be born on top of the stack meanwhile
            assert not env.fits[env.space.slot_ids.index("r0c1")].any()
            assert env.fits[env.space.slot_ids.index("r0c0")].any()
    # Born before epoch 2 at alpha 0 and ticked at once; folded at the end of epoch 3.
    assert depths == [
        (2, None),
        (4, pytest.approx(1 / 3, abs=1e-3)),
        (4, pytest.approx(2 / 3, abs=1e-3)),
        (4, None),
        (4, None),
    ]
    assert len(env.model.host.segments[1]) == 3 and env.host_params > small
    trained = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in env.model.host.parameters()}


def test_a_schedule_that_cannot_deepen_is_refused_in_one_line(
    pm: PluginManager, tmp_path: Path
) -> None:
    glyphs = [
        'run.task="glyphs"',
        "tasks.glyphs.n_train=64",
        "tasks.glyphs.n_val=32",
        "tasks.glyphs.n_test=32",
        'run.policy="static"',
        "run.telemetry=[]",
    ]
    env = make_env(load_config(overrides=glyphs), pm)
    with pytest.raises(ConfigError, match="stage 0 has no channel-preserving layer") as caught:
        env.schedule_host_growth([DepthGrowthSpec(at=0.2)])
    assert "\n" not in str(caught.value)
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=10")), pm)
    with pytest.raises(ConfigError, match="2 to 8 times"):
        env.schedule_host_growth([DepthGrowthSpec(at=0.2, factor=9)])
    with pytest.raises(ConfigError, match="overlap"):
        env.schedule_host_growth([DepthGrowthSpec(at=0.1), DepthGrowthSpec(at=0.3)])
    for bad in ({"deepen_factor": 1}, {"deepen_mode": "copy"}, {"deepen_at": 1.0}):
        with pytest.raises(ConfigError, match=next(iter(bad))) as refused:
            structure(bad, StaticOptions, path="policies.static")
        assert "\n" not in str(refused.value)


@pytest.mark.parametrize("mode", ["stack", "identity"])
def test_a_deepened_run_resumes_mid_ramp_identically(
    pm: PluginManager, tmp_path: Path, mode: str
) -> None:
    base = _charlm(
        tmp_path,
        "env.max_epochs=5",
        "policies.static.deepen_at=0.2",  # epoch 1, folded at the end of epoch 3
        "policies.static.deepen_tempo=4",
        f'policies.static.deepen_mode="{mode}"',
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    deep = [*base, "tasks.charlm.n_layer=4"]
    built_deep = make_env(load_config(overrides=deep), pm).model.host_param_count()
    assert reference["episodes"][0]["host_params"] == built_deep
    # Interrupted mid-ramp (after epoch 2), resumed: the same run to the last bit.
    assert_resumes_identically(pm, tmp_path, base, reference)


def test_a_rollback_prunes_a_growth_in_flight_and_restores_the_snapshot(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=10", "governor.snapshot_every=1")
    env = make_env(load_config(overrides=overrides), pm)
    env.schedule_host_growth([DepthGrowthSpec(at=0.1, tempo=5)])  # born before epoch 1
    env.reset(0)
    small = env.host_params
    env.step(WAIT)
    assert env.model.host_growth is not None
    snapshot = {k: v.clone() for k, v in env.governor.snapshot_state["host"].items()}  # type: ignore[index]
    snapshot_epoch = env.governor.snapshot_epoch
    env.step(WAIT)
    assert env.governor.snapshot_epoch == snapshot_epoch  # none taken mid-growth
    epoch_end.rollback(env, "test", 1.0, StepEvents(env=0, episode=0, epoch=env.epoch))
    assert env.model.host_growth is None and env.model.host.n_layer == 2
    state = env.model.host.state_dict()
    assert state.keys() == snapshot.keys()
    assert all(torch.equal(state[k], v) for k, v in snapshot.items())  # the old function
    params = {id(p) for g in env.trainer.host_optimizer.param_groups for p in g["params"]}
    assert params == {id(p) for p in env.model.host.parameters()}
    assert env.host_params == small
    env.step(WAIT)  # trains on at the old depth


def test_a_growth_is_refused_while_another_is_in_flight(pm: PluginManager, tmp_path: Path) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=6")), pm)
    env.reset(0)
    spec = DepthGrowthSpec(at=0.0, mode="stack", factor=2, tempo=3, curve="linear")
    host_growth.start(env, spec)
    with pytest.raises(ValueError, match="depth growth of the host is still in flight"):
        host_growth.start(env, spec)


def test_the_growth_event_names_n_layer(pm: PluginManager, tmp_path: Path) -> None:
    overrides = _charlm(
        tmp_path,
        "env.max_epochs=3",
        "policies.static.deepen_at=0.34",
        "policies.static.deepen_tempo=1",
        'run.telemetry=["jsonl"]',
    )
    run(load_config(overrides=overrides), pm, run_dir=tmp_path / "r", quiet=True)
    events = [json.loads(line) for line in (tmp_path / "r" / "events.jsonl").open()]
    (started,) = [e for e in events if e["kind"] == "host_growth_started"]
    assert (started["growth_id"], started["operator"]) == ("depth-0", "depth")
    assert started["plan"] == "n_layer 2 -> 4, stack"
    assert (started["widths_before"], started["widths_after"]) == ({"n_layer": 2}, {"n_layer": 4})
    (fossilized,) = [e for e in events if e["kind"] == "host_growth_fossilized"]
    assert fossilized["params_after"] > fossilized["params_before"]


def test_the_growth_line_says_the_host_deepened() -> None:
    record = HostGrowthRecord(
        growth_id="depth-0",
        env=0,
        episode=0,
        operator="depth",
        plan="n_layer 2 -> 4, stack",
        widths_before={"n_layer": 2},
        widths_after={"n_layer": 4},
        params_before=114368,
        params_after=214336,
        started_epoch=3,
        fate="fossilized",
    )
    episode = {
        "seeds_germinated": 0,
        "host_params": 214336,
        "host_params_added": 99968,
        "params_added": 99968,
        "train_flops": 0,
    }
    line = growth_verdict([episode], [], [record])
    assert line.startswith(
        "growth kept: host deepened 2x (n_layer 2 -> 4, stack) at epoch 3: "
        "114,368 -> 214,336 parameters"
    )


def test_a_host_deepened_then_widened_is_the_host_built_deep_and_wide(
    pm: PluginManager, tmp_path: Path
) -> None:
    base = _charlm(
        tmp_path,
        "env.max_epochs=4",
        "policies.static.deepen_at=0.0",  # folded after epoch 0 (tempo 2)
        "policies.static.deepen_tempo=2",
        "policies.static.widen_at=0.5",  # epoch 2: widens the four blocks, folded after it
        "policies.static.widen_tempo=2",
    )
    result = run(load_config(overrides=base), pm, run_dir=tmp_path / "r", quiet=True)
    built = [*base, "tasks.charlm.n_layer=4", "tasks.charlm.d_model=32", "tasks.charlm.n_head=4"]
    expected = make_env(load_config(overrides=built), pm).model.host_param_count()
    assert result["episodes"][0]["host_params"] == expected
