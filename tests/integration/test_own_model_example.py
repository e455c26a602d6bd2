"""examples/own_model_resnet18.py, the worked example of docs/own-model.md, runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

Run = Callable[..., str]


@pytest.mark.slow
def test_the_resnet18_example_runs_and_saves_a_resumable_state(
    run_script: Run, tmp_path: Path
) -> None:
    state = tmp_path / "grower.pt"
    out = run_script(
        "examples/own_model_resnet18.py",
        "--epochs",
        "2",
        "--policy",
        "random",
        "--save",
        str(state),
    )
    assert "epoch 2: val" in out and "test accuracy (the grown model)" in out
    assert state.is_file()


def test_the_mlp_example_grows_and_says_why(run_script: Run, tmp_path: Path) -> None:
    # Seconds of one core: the heuristic grows a residual seed in a hidden
    # layer, and every epoch prints its events and the next decision with its reason.
    state = tmp_path / "grower.pt"
    out = run_script("examples/own_model_mlp.py", "--save", str(state))
    assert "epoch 0: WAIT: the first epoch trains the model as it was given" in out
    assert "germinated mlp/residual" in out
    assert "next: GERMINATE body/1 mlp/residual" in out and "bottleneck: expansion score" in out
    assert "next: WAIT: " in out
    assert "test accuracy (the grown model)" in out
    assert state.is_file()


def test_the_mlp_example_widens_its_own_layers(run_script: Run) -> None:
    # --widen-at: the MLP's layer pairs widen 16 -> 32 at epoch 6 of 24 and are folded.
    out = run_script("examples/own_model_mlp.py", "--widen-at", "0.25")
    assert "the model's own layers start to widen: body.0 -> body.2: 16 -> 32" in out
    assert "widened: 693 -> 1,893 parameters" in out
    assert "the host widens at 0.25 of the run" in out
