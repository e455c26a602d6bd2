"""The break-even script compares what the learner maximises: returns discounted with the
run's gamma, so a seed's lifecycle shaping (which telescopes only when discounted) does
not read as a gain of the host growth beside it."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


def _script() -> ModuleType:
    return load_script("benchmarks/ppo_price_break_even.py")


def _episode(env: int, rewards: list[float], rents: list[float], grew: bool) -> list[dict]:
    epochs = [
        {
            "kind": "epoch_completed",
            "env": env,
            "episode": 0,
            "epoch": t + 1,
            "reward": r,
            "reward_components": {"rent": rent},
        }
        for t, (r, rent) in enumerate(zip(rewards, rents, strict=True))
    ]
    finished = {
        "kind": "episode_finished",
        "env": env,
        "episode": 0,
        "update": 5,
        "seed": 7,
        "pair": "user-mlp-broad",
        "host_params_added": 100 if grew else 0,
        "final_val_acc": 80.0,
        "total_reward": sum(rewards),
        "reward_components": {"rent": sum(rents)},
    }
    return [*epochs, finished]


def test_gain_and_rent_are_discounted_with_the_runs_gamma(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[run]\nreward = 'pbrs'\ngamma = 0.5\n[rewards.pbrs]\nflops_rent_weight = 0.1\n"
    )
    # Equal undiscounted sums (return 3, rent -1 each): undiscounted, the gain would read
    # 0. Discounted at 0.5, the grown episode returns 2.5 against 1.75 and its late rent
    # counts -0.25 against the other's -1.
    events = _episode(0, [2.0, 1.0, 0.0], [0.0, 0.0, -1.0], grew=True)
    events += _episode(1, [1.0, 1.0, 1.0], [-1.0, 0.0, 0.0], grew=False)
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))

    summary = _script().summarise([tmp_path], from_update=5)

    pair = summary["pairs"]["user-mlp-broad"]
    assert pair["return_gain"] == pytest.approx(0.75)
    assert pair["rent_change"] == pytest.approx(0.75)
    assert pair["groups"] == 1
