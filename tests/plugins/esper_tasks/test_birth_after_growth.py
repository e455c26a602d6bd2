"""Seeds installed at birth beside a host growth scheduled at epoch 0 (esper_core.env.birth):
a one-epoch ramp folds before the first epoch, so the seeds are built on the grown host,
as a grown run's seeds born after its host grew are (the static-final twin of such a run);
a longer ramp starts after them and grows around them."""

from __future__ import annotations

import pytest
import torch

from esper_core.components.growth_request import WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.gym import make_env
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager

SEED = "conv_small@r0c0"


def _env(pm: PluginManager, *overrides: str, tempo: int | None = None) -> MorphogeneticEnv:
    base = ['run.task="glyphs"', "tasks.glyphs.preset=small", "tasks.glyphs.n_train=64"]
    base += ["tasks.glyphs.n_val=32", "tasks.glyphs.n_test=32", "env.max_epochs=4"]
    base += ['env.blueprints=["cnn/conv_small"]', 'run.policy="static"', "run.telemetry=[]"]
    env = make_env(load_config(overrides=[*base, *overrides]), pm)
    if tempo is not None:
        env.schedule_host_growth([WidthGrowthSpec(at=0.0, factor=2.0, tempo=tempo)])
    env.install_at_birth([SEED])
    env.reset(0)
    return env


def _seed_shapes(env: MorphogeneticEnv) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in env.model.slot("r0c0").seed_parameters()]


def test_seeds_at_birth_are_built_on_a_host_grown_before_the_first_epoch(
    pm: PluginManager,
) -> None:
    grown = _env(pm, tempo=1)
    built_wide = _env(pm, "tasks.glyphs.base_channels=8")  # small is 4/8/16 channels
    assert grown.model.host_growth is None
    assert grown.model.host_growths[-1].stage == Stage.FOSSILIZED
    assert grown.model.host_param_count() == built_wide.model.host_param_count()
    assert _seed_shapes(grown) == _seed_shapes(built_wide) != _seed_shapes(_env(pm))
    assert grown.model.slot("r0c0").stage == Stage.FOSSILIZED
    # The grown host with its seed computes: the seed acts on the grown channels.
    grown.model.eval()
    with torch.no_grad():
        out = grown.model(grown.data.val.inputs[:4])
    assert out.shape[0] == 4 and bool(torch.isfinite(out).all())


def test_a_growth_ramped_over_epochs_grows_around_the_seeds_born_before_it(
    pm: PluginManager,
) -> None:
    ramping = _env(pm, tempo=2)
    assert ramping.model.host_growth is not None  # in flight, around the kept seed
    assert _seed_shapes(ramping) == _seed_shapes(_env(pm))


def test_a_host_grown_before_its_first_epoch_is_priced_against_the_host_as_built(
    pm: PluginManager,
) -> None:
    """The FLOPs baseline is the host as built, counted before anything grows it: a host
    widened before its first batch (at birth here; by a controller's first decision in
    training) pays for the widening in the epoch's FLOPs ratio the reward prices."""
    grown, bare = _env(pm, tempo=1), _env(pm)
    for env in (grown, bare):
        env.step(WAIT)
    assert bare.cost.epoch_flops_ratio() < 1.1  # its small seed's price
    # Every channel doubled: about 4x the bare host's FLOPs in its convolutions.
    assert grown.cost.epoch_flops_ratio() > 2.5
    assert grown.stats.host_flops_per_sample == pytest.approx(bare.stats.host_flops_per_sample)
