"""Checkpoints: the digest is unkeyed, so it detects corruption,
not forgery. A checkpoint edited and saved again with a fresh digest is refused in one
line when any number a resume reads lies outside what a run writes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from esper_core.errors import CheckpointError
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint
from tests.plugins.esper_telemetry.helpers import resume_tiny, run_tiny
from tests.reliability.test_resume_config import crashed_run


def forge(path: Path, edit: Any) -> None:
    """Edit the checkpoint at ``path`` and save it with a digest that matches again."""
    data = load_checkpoint(path)
    data.pop("format")
    edit(data)
    save_checkpoint(path, data)


def _set(key: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data[key] = value

    return edit


def _env(key: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data["envs"][0]["counters"][key] = value

    return edit


# A run of 2 episodes of 12 epochs, killed in epoch 7 of the first; checkpoint at epoch 5.
MID_EPISODE = {
    "epoch far beyond the episode": (_set("epoch", 10**9), "epoch = 1000000000"),
    "negative epoch": (_set("epoch", -5), "epoch = -5"),
    "episode beyond the run": (
        _set("outer", 7),
        "outer = 7, but a run writes a whole number in 0..2",
    ),
    "negative episode": (_set("outer", -1), "outer = -1"),
    "boolean episode": (_set("outer", True), "outer = True"),
    "NaN elapsed": (_set("elapsed", math.nan), "elapsed = nan"),
    "negative elapsed": (_set("elapsed", -3.0), "elapsed = -3.0"),
    "rollout episode in a run": (_set("rollout_episode", 4), "rollout_episode = 4"),
    "episodes not a list": (_set("episodes", "many"), "episodes = 'str'"),
    "negative counter": (_env("n_pruned", -2), "envs[0].counters.n_pruned = -2"),
    "NaN reward total": (_env("reward_total", math.nan), "envs[0].counters.reward_total = nan"),
}


@pytest.mark.parametrize("case", sorted(MID_EPISODE))
def test_a_forged_field_is_refused_before_the_run_continues(tmp_path: Path, case: str) -> None:
    edit, expected = MID_EPISODE[case]
    run_dir = tmp_path / "run"
    crashed_run(run_dir, "run.episodes=2")
    forge(run_dir / "checkpoint.pt", edit)
    with pytest.raises(CheckpointError) as info:
        resume_tiny(run_dir)
    message = str(info.value)
    assert expected in message and "edited or written by another tool" in message, message
    assert not (run_dir / "summary.json").exists()


def test_an_intact_checkpoint_still_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    crashed_run(run_dir)
    forge(run_dir / "checkpoint.pt", lambda data: None)  # saved again, unchanged
    summary = resume_tiny(run_dir)
    assert summary["status"] == "completed" and math.isfinite(summary["wall_time"])


def test_a_finished_run_forged_to_epoch_past_its_length_is_refused(tmp_path: Path) -> None:
    # After an episode the checkpoint is at epoch 0 (nothing of the envs is read), so only
    # the episode length built from the task bounds it.
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "env.max_epochs=2", "run.episodes=2")
    forge(run_dir / "checkpoint.pt", lambda data: data.update(outer=1, epoch=3))
    with pytest.raises(
        CheckpointError, match=r"epoch = 3, but a run writes a whole number in 0\.\.2"
    ):
        resume_tiny(run_dir)
