"""What ``esper train`` prints while it trains, piped: progress names
the rollout episode of the update, and each update ends in a short aligned block of
statistics, while events.jsonl keeps every diagnostic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.plugin_set import FAKE_COMPONENTS, REPO, subprocess_env


def test_train_progress_names_the_episode_and_prints_a_short_block(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    result = subprocess.run(
        [
            sys.executable, "-m", "esper_cli", "train", *FAKE_COMPONENTS,
            "--plugin", "policies.ppo", "--policy", "ppo",
            "--plugin", "telemetry.console", "--plugin", "telemetry.jsonl",
            "--set", 'run.telemetry=["console", "jsonl"]',
            "--set", "run.threads=1", "--set", "policies.ppo.rollout_episodes=2",
            "--set", "telemetry.console.progress_epochs=1",
            "--max-epochs", "3", "--updates", "2", "--out", str(run_dir),
        ],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=subprocess_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = [line.split(":")[0] for line in lines if " · epoch " in line]
    assert progress == [
        f"update {u}/2 · episode {k}/2 · epoch {e}/3"
        for u in (1, 2)
        for k in (1, 2)
        for e in (1, 2)
    ]
    assert sum(line.startswith("update 2/2 · episode 2/2 env 0:") for line in lines) == 1

    start = lines.index(next(line for line in lines if line.startswith("update 1/2 done")))
    assert "2 episodes in " in lines[start] and "episodes/s" in lines[start]
    block = lines[start + 1 : start + 8]
    labels = [line[:20].strip() for line in block]
    assert labels == [
        "return",
        "policy loss",
        "value loss",
        "entropy",
        "approx KL",
        "clip fraction",
        "explained variance",
    ]
    # the values share one column (a sign or a space, then a digit), and no progress or
    # statistics line is the old ~900-character one
    assert all(line[20:22] == "  " and line[22] in " -" and line[23].isdigit() for line in block)
    assert max(len(line) for line in lines if line.startswith(("update", "  "))) < 120

    updates = [
        json.loads(line)
        for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
        if '"policy_update"' in line
    ]
    assert len(updates) == 2
    assert {"update_sps", "ratio_deviation/epoch1", "reward_scale"} <= set(
        updates[0]["diagnostics"]
    )
