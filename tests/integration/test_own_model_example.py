"""examples/own_model_resnet18.py, the worked example of docs/own-model.md, runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_set import REPO, subprocess_env


@pytest.mark.slow
def test_the_resnet18_example_runs_and_saves_a_resumable_state(tmp_path: Path) -> None:
    state = tmp_path / "grower.pt"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "own_model_resnet18.py"),
            "--epochs",
            "2",
            "--policy",
            "random",
            "--save",
            str(state),
        ],
        env=subprocess_env(autoload=True),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "epoch 2: val" in done.stdout and "test accuracy (the grown model)" in done.stdout
    assert state.is_file()
