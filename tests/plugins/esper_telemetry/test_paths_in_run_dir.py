"""Telemetry files stay inside the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from esper_telemetry.console import ConsoleBackend, ConsoleOptions
from esper_telemetry.tensorboard_writer import TensorBoardOptions

from esper_core import TelemetryContext
from esper_core.converter import structure
from esper_core.errors import ConfigError
from tests.plugins.esper_telemetry.helpers import feed, synthetic_batches


def test_console_file_is_written_in_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, elsewhere = tmp_path / "run", tmp_path / "cwd"
    run_dir.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    options = structure({"file": "logs.txt", "force_terminal": False}, ConsoleOptions)
    backend = ConsoleBackend(options, TelemetryContext(run_dir=run_dir))
    feed(backend, synthetic_batches(n_envs=1, episodes=1, max_epochs=2))
    backend.close()
    assert (run_dir / "logs.txt").is_file()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("value", ["/tmp/escape.txt", "../escape.txt", "a/../../b", ""])
def test_console_file_outside_the_run_directory_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.console\.file: expected a relative path"):
        structure({"file": value}, ConsoleOptions, "telemetry.console")


@pytest.mark.parametrize("value", ["/tmp/tb", "../tb", "tb/../..", "~"])
def test_tensorboard_subdir_outside_the_run_directory_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"subdir: expected a relative path"):
        structure({"subdir": value}, TensorBoardOptions, "telemetry.tensorboard")
    assert structure({"subdir": "tb/run1"}, TensorBoardOptions).subdir == "tb/run1"
