"""``policies.schedule``: seeds germinated from a fixed fraction of the run and kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from esper_tamiyo_heuristic.schedule import ScheduleOptions, SchedulePolicy

from esper_core.config import load_config
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.run import api

# The fast fake task (tests/fake_plugin.py) with a lifecycle that fits its short episodes.
SCHEDULE = [
    "run.task=tiny",
    "run.reward=acc_delta",
    "run.telemetry=[]",
    "run.quiet=true",
    "env.max_epochs=14",
    "lifecycle.min_training_epochs=2",
    "lifecycle.tempos=[1, 2, 3]",
    "lifecycle.default_tempo=2",
    "run.policy=schedule",
    "policies.schedule.tempo=2",
]


def run(pm: PluginManager, tmp_path: Path, name: str, sets: list[str]) -> dict:
    config = load_config(overrides=[*SCHEDULE, *sets])
    return api.run(config, pm, run_dir=tmp_path / name, quiet=True, notify=lambda _m: None)


def test_the_seeds_germinate_at_the_fraction_one_an_epoch_and_are_kept(
    pm: PluginManager, tmp_path: Path
) -> None:
    summary = run(
        pm,
        tmp_path,
        "schedule",
        ["policies.schedule.at=0.25", 'policies.schedule.seeds=["res@r0c1", "res@r0c0"]'],
    )
    assert summary["refused_actions"] == 0
    seeds = sorted(summary["seeds"], key=lambda s: s["germinated_epoch"])
    # 14 epochs x 0.25 = epoch 4 (3.5 rounds to even), then one germination an epoch.
    assert [(s["slot_id"], s["germinated_epoch"]) for s in seeds] == [("r0c1", 4), ("r0c0", 5)]
    assert all(s["fate"] == "fossilized" for s in seeds)


def test_a_schedule_names_what_it_cannot_find_in_one_error(pm: PluginManager, build) -> None:
    options = ScheduleOptions(seeds=["nope@r0c0", "conv_light@r9c9", "norm@r0c1:wobbly"])
    with pytest.raises(ConfigError) as caught:
        SchedulePolicy(options, build.context())
    text = str(caught.value)
    assert "no blueprint 'nope'" in text and "no slot 'r9c9'" in text and "'wobbly'" in text
    with pytest.raises(ConfigError, match="a slot is named twice"):
        SchedulePolicy(ScheduleOptions(seeds=["norm@r0c0", "conv_light@r0c0"]), build.context())
    with pytest.raises(ConfigError, match="tempo: 4 is not one of"):
        SchedulePolicy(ScheduleOptions(seeds=["norm@r0c0"], tempo=4), build.context())


def test_a_schedule_without_seeds_is_refused(tmp_path: Path, pm: PluginManager) -> None:
    with pytest.raises(ConfigError, match="name at least one seed"):
        run(pm, tmp_path, "empty", [])


def test_the_schedules_progress_survives_a_checkpoint(build) -> None:
    policy = SchedulePolicy(ScheduleOptions(seeds=["norm@r0c0"], tempo=3), build.context())
    policy.germinated = {0: 1, 1: 0}
    restored = SchedulePolicy(ScheduleOptions(seeds=["norm@r0c0"], tempo=3), build.context())
    restored.load_state_dict(policy.state_dict())
    assert restored.germinated == {0: 1, 1: 0}
