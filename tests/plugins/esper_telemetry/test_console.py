"""The live console: silent when quiet, throttled when live, plain lines when not a terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from esper_telemetry.console import ConsoleBackend, ConsoleOptions
from esper_telemetry.stages import STAGE_COLOURS, STAGE_ORDER

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import feed, synthetic_batches

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_quiet_shows_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "display.txt"
    backend = ConsoleBackend(
        ConsoleOptions(file=str(out), force_terminal=True),
        TelemetryContext(run_dir=tmp_path, quiet=True),
    )
    feed(backend, synthetic_batches())
    backend.close()
    assert not out.exists()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_live_display_shows_progress_and_each_slots_stage(tmp_path: Path) -> None:
    out = tmp_path / "display.txt"
    options = ConsoleOptions(
        file=str(out), force_terminal=True, refresh_per_second=30, transient=False, width=120
    )
    backend = ConsoleBackend(options, TelemetryContext(run_dir=tmp_path))
    feed(backend, synthetic_batches(n_envs=2, episodes=2, max_epochs=3))
    backend.close()
    text = ANSI.sub("", out.read_text(encoding="utf-8"))
    for piece in (
        "episodes",
        "epoch",
        "r0c0",
        "r0c1",
        "TRAINING",
        "DORMANT",
        "val%",
        "return",
        "res",
        "germinated cnn/res",
    ):
        assert piece in text, piece
    assert "2/2" in text  # both episodes done at the end
    raw = out.read_text(encoding="utf-8")
    styles = {
        stage: set(re.findall(r"\x1b\[([0-9;]+)m" + stage, raw))
        for stage in ("TRAINING", "DORMANT")
    }
    assert styles["TRAINING"] and styles["DORMANT"], "stages are drawn in colour"
    assert not styles["TRAINING"] & styles["DORMANT"], "each stage in its own colour"


def test_redraws_are_throttled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = ConsoleOptions(
        file=str(tmp_path / "d.txt"), force_terminal=True, refresh_per_second=2
    )
    backend = ConsoleBackend(options, TelemetryContext(run_dir=tmp_path))
    batches = synthetic_batches(n_envs=2, episodes=10, max_epochs=20)
    feed(backend, batches[:2])
    builds = 0
    original = backend._renderable

    def counting():  # type: ignore[no-untyped-def]
        nonlocal builds
        builds += 1
        return original()

    monkeypatch.setattr(backend, "_renderable", counting)
    import time

    start = time.monotonic()
    feed(backend, batches[2:])
    elapsed = time.monotonic() - start
    backend.close()
    # at most one rebuild per half second (+1 for the forced final draw), however many epochs
    assert len(batches) > 200
    assert builds <= elapsed * 2 + 2


def test_not_a_terminal_prints_one_line_per_episode(tmp_path: Path) -> None:
    out = tmp_path / "log.txt"
    backend = ConsoleBackend(
        ConsoleOptions(file=str(out), force_terminal=False), TelemetryContext(run_dir=tmp_path)
    )
    feed(backend, synthetic_batches(n_envs=2, episodes=2, max_epochs=3, mode="train"))
    backend.close()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len([line for line in lines if " env " in line and "epoch" not in line]) == 4
    assert len([line for line in lines if line.startswith("update ") and " done" in line]) == 2
    assert len([line for line in lines if line.startswith("  policy loss ")]) == 2
    assert "\x1b[" not in out.read_text(encoding="utf-8")


def test_every_stage_has_a_colour() -> None:
    assert set(STAGE_ORDER) == set(STAGE_COLOURS)
    assert len(set(STAGE_COLOURS.values())) == len(STAGE_COLOURS)


def _resumed(tmp_path: Path, quiet_first: bool) -> str:
    """What a console prints after resuming, aloud, a run whose first part it showed (or,
    ``quiet_first``, did not)."""
    batches = synthetic_batches(n_envs=1, episodes=3, max_epochs=2)
    first = ConsoleBackend(
        ConsoleOptions(file=str(tmp_path / "a.txt"), force_terminal=False),
        TelemetryContext(run_dir=tmp_path, quiet=quiet_first),
    )
    feed(first, batches[:2])
    state = first.state_dict()
    first.close()
    resumed = ConsoleBackend(
        ConsoleOptions(file=str(tmp_path / "b.txt"), force_terminal=False),
        TelemetryContext(run_dir=tmp_path),
    )
    resumed.load_state_dict(state)
    feed(resumed, batches[2:])
    resumed.close()
    return (tmp_path / "b.txt").read_text()


def test_resume_restores_the_run_totals(tmp_path: Path) -> None:
    assert "episode 3/3" in _resumed(tmp_path, quiet_first=False)


def test_a_quiet_run_resumed_aloud_still_knows_the_run_totals(tmp_path: Path) -> None:
    text = _resumed(tmp_path, quiet_first=True)
    assert "episode 3/3" in text and "/1" not in text


def _plain(tmp_path: Path, **options: float) -> ConsoleBackend:
    return ConsoleBackend(
        ConsoleOptions(file="log.txt", force_terminal=False, **options),  # type: ignore[arg-type]
        TelemetryContext(run_dir=tmp_path),
    )


def test_not_a_terminal_prints_a_progress_line_every_n_epochs(tmp_path: Path) -> None:
    """Piped or in CI, a run used to print nothing until its first episode ended."""
    backend = _plain(tmp_path, progress_epochs=2, progress_seconds=0)
    feed(backend, synthetic_batches(n_envs=1, episodes=1, max_epochs=7))
    backend.close()
    lines = (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines()
    progress = [line for line in lines if " epoch " in line]
    assert [line.split(":")[0] for line in progress] == [
        "episode 1/1 · epoch 2/7",
        "episode 1/1 · epoch 4/7",
        "episode 1/1 · epoch 6/7",
    ]
    assert "val " in progress[0] and "test " in progress[0] and "r0c0 " in progress[0]
    assert "\x1b[" not in "\n".join(lines)


def test_not_a_terminal_prints_a_progress_line_every_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import esper_telemetry.console as console

    clock = iter(float(t) for t in range(0, 1000, 10))  # every reading is 10 s later
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    backend = _plain(tmp_path, progress_epochs=0, progress_seconds=15)
    feed(backend, synthetic_batches(n_envs=2, episodes=1, max_epochs=5))
    backend.close()
    lines = (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines()
    progress = [line for line in lines if " epoch " in line]
    assert progress and all("(mean of 2 envs)" in line for line in progress)
    assert len(progress) < 4  # not one per epoch: only when 15 s have passed


def test_quiet_prints_no_progress_line(tmp_path: Path) -> None:
    backend = ConsoleBackend(
        ConsoleOptions(file="log.txt", force_terminal=False, progress_epochs=1),
        TelemetryContext(run_dir=tmp_path, quiet=True),
    )
    feed(backend, synthetic_batches(n_envs=1, episodes=1, max_epochs=4))
    backend.close()
    assert not (tmp_path / "log.txt").exists() or not (tmp_path / "log.txt").read_text()
