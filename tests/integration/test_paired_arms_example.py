"""examples/paired_arms.py pairs two arms of a finished comparison by seed."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


def _script() -> ModuleType:
    return load_script("examples/paired_arms.py")


def _results(tmp_path: Path) -> Path:
    # Arm a is 0.1 lower (better) than b on seeds 0-3, 0.2 higher on seed 4; seed 5 only in a.
    cells = []
    for seed in range(6):
        cells.append(_cell("a", seed, 1.0 + (0.2 if seed == 4 else -0.1), flops=70.0))
        if seed < 5:
            cells.append(_cell("b", seed, 1.0, flops=100.0))
    (tmp_path / "results.json").write_text(
        json.dumps({"cells": cells, "metrics": {"lm": "final_test_loss"}})
    )
    return tmp_path


def _cell(policy: str, seed: int, loss: float, flops: float) -> dict:
    return {
        "task": "lm",
        "policy": policy,
        "seed": seed,
        "final_test_loss": loss,
        "final_test_acc": 50.0,
        "train_flops": flops,
    }


def test_a_pair_is_seed_by_seed_in_the_experiments_metric(tmp_path: Path) -> None:
    results = json.loads((_results(tmp_path) / "results.json").read_text())
    row = _script().pair(results, "lm", "a", "b", "final_test_loss")
    assert row["seeds"] == [0, 1, 2, 3, 4]  # seed 5 has no partner
    assert row["wins_ties_losses"] == [4, 0, 1]  # a lower loss wins
    estimate, low, high = row["difference"]
    assert estimate == pytest.approx(-0.1) and low <= estimate <= high
    assert row["flops_ratio"] == pytest.approx(0.7)


def test_the_command_prints_one_line_per_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _script().main([str(_results(tmp_path)), "a:b", "b:a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("a 0.9000 - b 1.0000: -0.1000") and "(4/0/1)" in lines[0]
    assert "FLOPs 70.0 %" in lines[0] and "(1/0/4)" in lines[1]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["a-b"], "expected A:B"),
        (["a:c"], "no finished cell of 'c'"),
        (["a:b", "--metric", "wall_time"], "--metric wall_time: expected one of"),
    ],
)
def test_a_mistake_is_one_line(
    tmp_path: Path, argv: list[str], expected: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as info:
        _script().main([str(_results(tmp_path)), *argv])
    assert info.value.code == 2
    assert expected in capsys.readouterr().err
