"""An env's epoch event names what happens to the host: a deepening
on a schedule, and a widening an action asks for (the heuristic's and PPO's request,
``Action.host_growth``), with the action's reason kept after what the host does."""

from __future__ import annotations

from pathlib import Path

from esper_core.components.policy import DepthGrowthSpec, WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env.gym import make_env
from esper_core.lifecycle.actions import WAIT, Action
from esper_core.plugins import PluginManager
from esper_core.run.telemetry import EpochCompleted
from tests.plugins.esper_tasks.test_host_depth import _charlm


def _said(env, action: Action) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    (event,) = [e for e in env.step(action).events if isinstance(e, EpochCompleted)]
    return event.action, event.reason


def test_a_scheduled_deepening_is_named_at_its_start_ramp_and_fold(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=5")), pm)
    env.schedule_host_growth([DepthGrowthSpec(at=0.4, tempo=3)])  # born before epoch 2
    env.reset(0)
    said = [_said(env, WAIT.because("why")) for _ in range(5)]
    assert said == [
        ("WAIT", "why"),
        ("WAIT", "why"),
        ("DEEPEN host x2", "on schedule; why"),
        ("WAIT", "host deepening, ramp 2/3; why"),
        ("FOLD host deepening", "ramp 3/3 done, folded into the host; why"),
    ]


def _env(pm: PluginManager, tmp_path: Path):  # type: ignore[no-untyped-def]
    env = make_env(load_config(overrides=_charlm(tmp_path, "env.max_epochs=5")), pm)
    env.reset(0)
    assert _said(env, WAIT) == ("WAIT", "")
    return env


def test_a_widening_the_action_asks_for_is_named_with_the_policys_reason(
    pm: PluginManager, tmp_path: Path
) -> None:
    env = _env(pm, tmp_path)
    ask = Action(host_growth=WidthGrowthSpec(at=1 / 5, factor=2.0, tempo=2))
    assert _said(env, ask.because("slowed down")) == ("WIDEN host x2", "slowed down")
    # A seed's action at the fold keeps its words; the fold leads its reason.
    germinate = env.space.germinate("r0c0", "block").because("capacity limit")
    assert _said(env, germinate) == (
        env.space.describe(germinate),
        "host widening folded, ramp 2/2 done; capacity limit",
    )
    env = _env(pm, tmp_path)
    ask = Action(host_growth=WidthGrowthSpec(at=1 / 5, factor=2.0, tempo=1))
    assert _said(env, ask) == ("WIDEN host x2", "folded at once (tempo 1)")
    assert _said(env, WAIT) == ("WAIT", "")
