"""A host width growth is told like a seed's life: typed events, the run's summary line and
parameter fields."""

from __future__ import annotations

from pathlib import Path

from esper_core.components.policy import WidthGrowthSpec
from esper_core.config import load_config
from esper_core.env import epoch_end
from esper_core.env.events import StepEvents
from esper_core.env.gym import make_env
from esper_core.lifecycle.actions import WAIT
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.ledger import HostGrowthRecord
from esper_core.run.summary import growth_verdict
from esper_core.run.telemetry import (
    EpisodeFinished,
    Event,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStageChanged,
    HostGrowthStarted,
    read_events,
)
from tests.plugins.esper_tasks.test_host_width import _glyphs

GROWTH_KINDS = (HostGrowthStarted, HostGrowthStageChanged, HostGrowthFossilized, HostGrowthPruned)


def _growth_events(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, GROWTH_KINDS)]


def test_a_widening_emits_started_stage_changes_and_fossilized(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=5")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.4, factor=2.0, tempo=2)])  # epoch 2
    env.reset(0)
    birth = env.host_params
    events: list[Event] = []
    for _ in range(5):
        events += env.step(WAIT).events
    started, holding, fossilized, folded = _growth_events(events)
    assert isinstance(started, HostGrowthStarted)
    assert (started.epoch, started.growth_id, started.operator) == (2, "width-0", "width")
    assert started.widths_before == {"stage0": 4, "stage1": 8, "stage2": 16}
    assert started.widths_after == {"stage0": 8, "stage1": 16, "stage2": 32}
    assert started.plan == "stage 0 -> 8, stage 1 -> 16, stage 2 -> 32"
    assert (started.params_before, started.params_after) == (birth, env.host_params)
    assert (started.tempo, started.curve) == (2, "linear")
    # Ticked at birth (alpha 1/2), holding at 1 after epoch 3 and folded there.
    assert isinstance(holding, HostGrowthStageChanged) and holding.epoch == 3
    assert (holding.from_stage, holding.to_stage) == ("BLENDING", "HOLDING")
    assert isinstance(fossilized, HostGrowthFossilized) and fossilized.epoch == 3
    assert (fossilized.started_epoch, fossilized.params_before) == (2, birth)
    assert fossilized.params_after == env.host_params > birth
    assert isinstance(folded, HostGrowthStageChanged)
    assert (folded.from_stage, folded.to_stage) == ("HOLDING", "FOSSILIZED")
    (finished,) = [e for e in events if isinstance(e, EpisodeFinished)]
    assert finished.host_params_added == env.host_params - birth
    assert finished.params_added == finished.host_params_added  # no seed: the host's growth


def test_a_growth_at_epoch_zero_is_told_in_the_first_step(pm: PluginManager) -> None:
    env = make_env(load_config(overrides=_glyphs("env.max_epochs=4")), pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.0, stages=(1,), tempo=3)])
    env.reset(0)
    (started,) = _growth_events(env.step(WAIT).events)
    assert isinstance(started, HostGrowthStarted) and started.epoch == 0
    assert started.widths_after == {"stage0": 4, "stage1": 16, "stage2": 16}


def test_a_rollback_prunes_the_growth_with_its_events(pm: PluginManager) -> None:
    config = load_config(overrides=_glyphs("env.max_epochs=10", "governor.snapshot_every=1"))
    env = make_env(config, pm)
    env.schedule_host_growth([WidthGrowthSpec(at=0.1, tempo=5)])
    env.reset(0)
    birth = env.host_params
    env.step(WAIT)
    wide = env.host_params
    events = StepEvents(env=0, episode=0, epoch=env.epoch)
    epoch_end.rollback(env, "test", 1.0, events)
    pruned, stage = _growth_events(events.events)
    assert isinstance(pruned, HostGrowthPruned)
    assert (pruned.growth_id, pruned.stage, pruned.reason) == ("width-0", "BLENDING", "rollback")
    assert (pruned.started_epoch, pruned.params_before, pruned.params_after) == (1, wide, birth)
    assert isinstance(stage, HostGrowthStageChanged) and stage.to_stage == "PRUNED"


def _record(**changes: object) -> HostGrowthRecord:
    fields: dict[str, object] = {
        "growth_id": "width-0",
        "env": 0,
        "episode": 0,
        "operator": "width",
        "plan": "stage 0 -> 16, stage 1 -> 32, stage 2 -> 64",
        "widths_before": {"stage0": 4, "stage1": 8, "stage2": 16},
        "widths_after": {"stage0": 16, "stage1": 32, "stage2": 64},
        "params_before": 1702,
        "params_after": 24058,
        "started_epoch": 7,
        "fate": "fossilized",
    }
    return HostGrowthRecord(**{**fields, **changes})  # type: ignore[arg-type]


def _episode(**changes: object) -> dict[str, object]:
    return {
        "seeds_germinated": 0,
        "host_params": 24058,
        "host_params_added": 22356,
        "params_added": 22356,
        "train_flops": 0,
        **changes,
    }


def test_the_growth_line_says_what_the_host_did() -> None:
    line = growth_verdict([_episode()], [], [_record()])
    assert line == (
        "growth kept: host widened 4x at epoch 7: 1,702 -> 24,058 parameters, "
        "+22,356 parameters per episode (+1314% of the host)"
    )
    live = growth_verdict([_episode()], [], [_record(fate="live")])
    assert "24,058 parameters (still ramping in at the end)" in live
    some = _record(widths_after={"stage0": 8, "stage1": 8, "stage2": 16}, plan="stage 0 -> 8")
    assert "host widened 2x (stage 0 -> 8) at epoch 7" in growth_verdict([_episode()], [], [some])
    uneven = _record(widths_after={"stage0": 8, "stage1": 24, "stage2": 16}, plan="p")
    assert "host widened (p) at epoch 7" in growth_verdict([_episode()], [], [uneven])
    pruned = growth_verdict(
        [_episode(host_params=1702, host_params_added=0, params_added=0)],
        [],
        [_record(fate="pruned_by_rollback", params_after=1702)],
    )
    assert pruned.startswith("no growth kept: host widened 4x at epoch 7")
    assert pruned.endswith("(pruned by a governor rollback)")


def test_a_widened_run_summarises_its_growth_and_counts_its_parameters(
    pm: PluginManager, tmp_path: Path
) -> None:
    overrides = _glyphs(
        "env.max_epochs=4",
        "policies.static.widen_at=0.25",  # epoch 1
        "policies.static.widen_factor=4",
        "policies.static.widen_tempo=2",
        'run.telemetry=["jsonl"]',
    )
    summary = run(load_config(overrides=overrides), pm, run_dir=tmp_path / "w", quiet=True)
    (episode,) = summary["episodes"]
    birth = summary["host_params"]
    assert episode["host_params"] > birth  # the host as built, and at the end
    assert episode["host_params_added"] == episode["host_params"] - birth
    assert summary["params_added_mean"] == summary["host_params_added_mean"] > 0
    assert summary["params_forward_mean"] == birth + summary["params_added_mean"]
    assert summary["growth"].startswith(
        f"growth kept: host widened 4x at epoch 1: {birth:,} -> {episode['host_params']:,} "
        "parameters, "
    )
    (growth,) = summary["host_growths"]
    assert (growth["fate"], growth["started_epoch"], growth["ended_epoch"]) == ("fossilized", 1, 2)
    kinds = [e.kind for e in read_events(tmp_path / "w" / "events.jsonl")]
    assert kinds.count("host_growth_started") == kinds.count("host_growth_fossilized") == 1
