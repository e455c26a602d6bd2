"""Whether a declared host growth can start now (``Observation.host_growth_ready``,
esper_core.env.host_growth_ready): never at the last epoch nor while another growth
ramps; a live seed blocks a growth only where the growth touches it; a fossil blocks
neither a widening (it keeps its widths, on the old channels) nor a deepening: each grows
around it, bit for bit at birth, and the run goes on to the end. What the env says ready
it starts."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch

from esper_core.components.growth_request import DepthGrowthSpec, WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env import host_growth
from esper_core.env.gym import make_env
from esper_core.env.host_growth_online import check_declared
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT, Action
from esper_core.lifecycle.rules import LIVE_STAGES
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from tests.plugins.esper_tasks.test_transformer_width import _charlm

WIDEN = WidthGrowthSpec(at=0.0, tempo=3)
DEEPEN = DepthGrowthSpec(at=0.0, mode="identity", tempo=2)


def _env(pm: PluginManager, overrides: list[str], specs, fossils=()):  # type: ignore[no-untyped-def]
    env = make_env(load_config(overrides=overrides), pm)
    check_declared([env], specs)
    env.install_at_birth(list(fossils))
    env.reset(0)
    return env


def _now(env, spec):  # type: ignore[no-untyped-def]
    return Action(host_growth=attrs.evolve(spec, at=env.epoch / env.max_epochs))


def test_never_at_the_last_epoch_nor_while_another_growth_ramps(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = _env(pm, _charlm(tmp_path, "env.max_epochs=6"), [WIDEN])
    assert env.observation.host_growth_ready == (True,)
    ready = [env.step(_now(env, WIDEN)).observation.host_growth_ready]
    # Born before epoch 0 and ticked at once: it ramps through epoch 1, folded at its end.
    ready += [env.step(WAIT).observation.host_growth_ready for _ in range(5)]
    assert ready == [(False,), (True,), (True,), (True,), (False,), (False,)]
    assert env.model.host_growths[0].stage == Stage.FOSSILIZED
    # Nothing declared: nothing to say.
    assert _env(pm, _charlm(tmp_path), []).observation.host_growth_ready == ()


def test_a_live_seed_blocks_only_a_growth_that_touches_its_slot(
    pm: PluginManager, tmp_path: Path
) -> None:
    """A transformer's d_model touches every slot; its deepening only the top one (r0c1)."""
    for slot, expected in (("r0c0", (False, True)), ("r0c1", (False, False))):
        env = _env(pm, _charlm(tmp_path, "env.max_epochs=6"), [WIDEN, DEEPEN])
        obs = env.step(env.space.germinate(slot, "transformer/block", "linear_add")).observation
        assert next(r for r in obs.slots if r.slot_id == slot).stage in LIVE_STAGES
        assert obs.host_growth_ready == expected, slot
    # What the env says ready it starts; what it does not, it refuses in one line.
    env = _env(pm, _charlm(tmp_path, "env.max_epochs=6"), [WIDEN, DEEPEN])
    env.step(env.space.germinate("r0c0", "transformer/block", "linear_add"))
    with pytest.raises(ConfigError, match=r"slot r0c0 holds a seed .* width growth"):
        env.apply_action(_now(env, WIDEN))
    env.step(_now(env, DEEPEN))
    assert [r.operator for r in host_growth.records(env)] == ["depth"]


def _outputs(env) -> torch.Tensor:  # type: ignore[no-untyped-def]
    x = env.data.val.inputs[:8]
    env.model.eval()
    with torch.no_grad():
        return env.model(x.to(env.device))


@pytest.mark.parametrize("which", [0, 1])
def test_a_widening_and_a_deepening_grow_around_a_fossil(
    pm: PluginManager, tmp_path: Path, which: int
) -> None:
    overrides = _charlm(tmp_path, "env.max_epochs=5")
    fossil = ["transformer/block@r0c1"]  # the top slot, which both growths touch
    spec = (WIDEN, DEEPEN)[which]
    env = _env(pm, overrides, [WIDEN, DEEPEN], fossil)
    assert env.model.slot("r0c1").stage == Stage.FOSSILIZED
    assert env.observation.host_growth_ready == (True, True)
    # Born at alpha 0 around the fossil, the host computes what it did, bit for bit.
    before = _outputs(env)
    host_growth.start(env, spec)
    assert torch.equal(_outputs(env), before)
    # Asked by a policy, it ramps, folds and the run ends with the fossil in place.
    env = _env(pm, overrides, [WIDEN, DEEPEN], fossil)
    small = env.host_params
    results = [env.step(_now(env, spec))] + [env.step(WAIT) for _ in range(4)]
    assert results[-1].done and env.host_params > small
    assert [r.stage for r in host_growth.records(env)] == ["FOSSILIZED"]
    assert env.model.slot("r0c1").stage == Stage.FOSSILIZED


def _glyphs(*overrides: str) -> list[str]:
    return [
        'run.task="glyphs"',
        "tasks.glyphs.n_train=128",
        "tasks.glyphs.n_val=64",
        "tasks.glyphs.n_test=64",
        "env.batch_size=64",
        'run.policy="static"',
        "run.telemetry=[]",
        *overrides,
    ]


def test_a_cnn_grows_around_a_fossil(pm: PluginManager) -> None:
    """A fossil at r0c2 (after stage 2): widening stage 0 does not touch it, widening every
    stage and deepening stage 2 do, and keep it."""
    specs = [
        WidthGrowthSpec(at=0.0, stages=(0,), tempo=2),
        WidthGrowthSpec(at=0.0, tempo=2),
        DepthGrowthSpec(at=0.0, mode="identity", stages=(2,), tempo=2),
    ]
    fossil = ["cnn/conv_small@r0c2"]
    env = _env(pm, _glyphs("env.max_epochs=4"), specs, fossil)
    assert env.observation.host_growth_ready == (True, True, True)
    before = _outputs(env)
    host_growth.start(env, specs[1])
    assert torch.equal(_outputs(env), before)
    for spec in specs:
        env = _env(pm, _glyphs("env.max_epochs=4"), specs, fossil)
        results = [env.step(_now(env, spec))] + [env.step(WAIT) for _ in range(3)]
        assert results[-1].done and [r.stage for r in host_growth.records(env)] == ["FOSSILIZED"]
        assert env.model.slot("r0c2").stage == Stage.FOSSILIZED
