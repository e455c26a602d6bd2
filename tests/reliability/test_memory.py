"""A long run with many germinate/prune cycles keeps its memory bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_set import FAKE_PLUGIN, REPO, subprocess_env

MIB = 2**20


@pytest.mark.slow
def test_200_epochs_of_churn_on_digits_keep_rss_bounded(tmp_path: Path) -> None:
    out = tmp_path / "mem"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "esper_cli",
            "run",
            "--plugin",
            FAKE_PLUGIN,
            "--plugin",
            "tasks.digits",
            "--plugin",
            "blueprints.cnn",
            "--plugin",
            "rewards.pbrs",
            "--task",
            "digits",
            "--policy",
            "churn",
            "--set",
            'run.telemetry=["memory_probe"]',
            "--max-epochs",
            "200",
            "--set",
            "lifecycle.min_training_epochs=1",
            "--set",
            "env.min_prune_age=2",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["seeds_pruned"] >= 40, "the policy should cycle seeds many times"
    rss = dict(json.loads((out / "rss.json").read_text()))
    growth_after_warmup = (rss[200] - rss[20]) / MIB
    growth_second_half = (rss[200] - rss[100]) / MIB
    # Measured 2026-11-22: +10 MiB from epoch 21 to 181, +1 MiB over the second half.
    assert growth_after_warmup < 32, f"RSS grew {growth_after_warmup:.1f} MiB from epoch 20 to 200"
    assert growth_second_half < 8, f"RSS grew {growth_second_half:.1f} MiB from epoch 100 to 200"
