"""Host growth a policy asks for at run time (``Action.host_growth``, ``GrowsHostOnline``):
it starts exactly as a growth scheduled for the same epoch (bit for bit), a
request the env cannot honour is refused in one line with the host left as it was, and a
run whose heuristic grew the host resumes mid-ramp exactly (the growth replayed from the
checkpoint, the heuristic's memory restored)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from esper_core.components.policy import WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env.gym import make_env
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT, Action
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugins.esper_tasks.growth_checks import assert_resumes_identically
from tests.plugins.esper_tasks.test_transformer_width import _charlm

SPEC = WidthGrowthSpec(at=0.4, tempo=3)  # epoch 2 of 5


def _trace(env, actions):  # type: ignore[no-untyped-def]
    """Each epoch's losses, the host's final width and parameters, the growths recorded."""
    from esper_core.env.host_growth import records

    env.reset(0)
    losses = []
    for action in actions:
        metrics = env.step(action).metrics
        losses.append((metrics.train_loss, metrics.val_loss))
    return losses, env.model.host.stage_channels(), env.host_params, records(env)


def test_a_request_grows_the_host_as_the_schedule_for_its_epoch_does(
    pm: PluginManager, tmp_path: Path
) -> None:
    config = load_config(overrides=_charlm(tmp_path, "env.max_epochs=5"))
    scheduled = make_env(config, pm)
    scheduled.schedule_host_growth([SPEC])
    expected = _trace(scheduled, [WAIT] * 5)
    asked = _trace(make_env(config, pm), [WAIT, WAIT, Action(host_growth=SPEC), WAIT, WAIT])
    assert asked == expected  # every loss bit for bit, the same GrowthRecord (epoch 2)
    (record,) = asked[3]
    assert (record.epoch, record.stage, record.channels) == (2, "FOSSILIZED", (32,))
    unchanged = _trace(make_env(config, pm), [WAIT] * 5)
    assert unchanged[0][:2] == asked[0][:2] and unchanged[0][2] != asked[0][2]


def _refused(env, action: Action, match: str) -> None:  # type: ignore[no-untyped-def]
    widths, n = env.model.host.stage_channels(), len(env.model.host_growths)
    with pytest.raises(ConfigError, match=match) as caught:
        env.apply_action(action)
    assert "\n" not in str(caught.value) and "run.policy 'static'" in str(caught.value)
    assert (env.model.host.stage_channels(), len(env.model.host_growths)) == (widths, n)


def test_a_request_the_env_cannot_honour_is_refused_in_one_line(
    pm: PluginManager, tmp_path: Path
) -> None:
    config = load_config(overrides=_charlm(tmp_path, "env.max_epochs=5"))
    env = make_env(config, pm)
    env.reset(0)
    env.step(WAIT)
    _refused(env, Action(host_growth=SPEC), r"names epoch 2 \(at 0.4\).*set at = 1/5")
    _refused(env, Action(host_growth=WidthGrowthSpec(at=0.2, factor=1.3)), "head dimension")
    _refused(env, Action(host_growth=WidthGrowthSpec(at=0.2, tempo=0)), "at least 1 epoch")
    # The last epoch: a request can only name it (a growth after it never trains).
    env = make_env(config, pm)
    env.reset(0)
    for _ in range(4):
        env.step(WAIT)
    _refused(env, Action(host_growth=WidthGrowthSpec(at=1.0)), "names epoch 5 .* set at = 4/5")
    # A growth still in flight, and one that would overlap the schedule.
    env = make_env(config, pm)
    env.reset(0)
    env.step(Action(host_growth=WidthGrowthSpec(at=0.0, tempo=3)))
    _refused(env, Action(host_growth=WidthGrowthSpec(at=0.2)), "still in flight")
    env = make_env(config, pm)
    env.schedule_host_growth([SPEC])
    env.reset(0)
    env.step(WAIT)
    _refused(env, Action(host_growth=WidthGrowthSpec(at=0.2)), "epochs 1 and 2 overlap")
    # A seed the same action germinates where the width would change.
    env = make_env(config, pm)
    env.reset(0)
    germinate = env.space.germinate("r0c1", "transformer/block", "linear_add")
    with pytest.raises(ConfigError, match="slot r0c1 holds a seed"):
        env.apply_action(attrs.evolve(germinate, host_growth=WidthGrowthSpec(at=0.0)))
    assert env.model.host.stage_channels() == (16,)


HEURISTIC = [
    'run.policy="heuristic"',
    'policies.heuristic.host_growth="widen"',
    "policies.heuristic.host_growth_drop=10.0",  # slowed down whatever the loss does
    "policies.heuristic.min_epoch=5",  # no seed: the host's growth alone
]


def test_the_heuristic_grows_the_host_as_a_schedule_at_its_epoch_would(
    pm: PluginManager, tmp_path: Path
) -> None:
    common = ["env.max_epochs=5"]
    heuristic = _charlm(
        tmp_path,
        *common,
        *HEURISTIC,
        "policies.heuristic.host_growth_min_at=0.4",
        "policies.heuristic.host_growth_tempo=3",
    )
    static = _charlm(
        tmp_path, *common, "policies.static.widen_at=0.4", "policies.static.widen_tempo=3"
    )
    grown = run(load_config(overrides=heuristic), pm, run_dir=tmp_path / "h", quiet=True)
    scheduled = run(load_config(overrides=static), pm, run_dir=tmp_path / "s", quiet=True)
    keys = ("final_val_loss", "final_test_loss", "host_params", "train_flops", "params_added")
    (h,), (s,) = grown["episodes"], scheduled["episodes"]
    assert {k: h[k] for k in keys} == {k: s[k] for k in keys}
    assert h["host_params_added"] > 0 and grown["host_growths"] == scheduled["host_growths"]


def test_a_run_the_heuristic_grew_resumes_mid_ramp_exactly(
    pm: PluginManager, tmp_path: Path
) -> None:
    base = _charlm(
        tmp_path,
        "env.max_epochs=5",
        *HEURISTIC,
        "policies.heuristic.host_growth_tempo=4",  # asked at epoch 1, folded after epoch 3
        "run.checkpoint_every=1",
    )
    reference = run(load_config(overrides=base), pm, run_dir=tmp_path / "ref", quiet=True)
    assert reference["episodes"][0]["host_params_added"] > 0
    assert_resumes_identically(pm, tmp_path, base, reference)


def test_a_host_the_policy_could_not_grow_is_refused_before_the_run(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _charlm(tmp_path, *HEURISTIC, "policies.heuristic.host_growth_factor=1.3")
    with pytest.raises(ConfigError) as caught:
        run(load_config(overrides=overrides), pm, run_dir=tmp_path / "r", quiet=True)
    message = str(caught.value)
    assert "\n" not in message and "run.policy 'heuristic' may grow the host so" in message
    assert "head dimension" in message and not (tmp_path / "r").exists()
