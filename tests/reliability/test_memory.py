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
def test_300_epochs_of_churn_on_digits_keep_memory_bounded(tmp_path: Path) -> None:
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
            "300",
            # Three slots to churn through (digits defaults to the one-slot impaired host).
            "--set",
            "tasks.digits.preset=base",
            # Three training batches an epoch instead of 17: the churn, the host and the
            # size of a batch's activations are the test's; most of the data is not.
            "--set",
            "tasks.digits.val_fraction=0.1",
            "--set",
            "tasks.digits.test_fraction=0.8",
            # Test accuracy at every memory sample only (the other epochs took 40 % of the
            # run's time on 80 % of the data): the test split goes through the validation
            # pass's code every epoch, and every sample is taken after the same passes.
            "--set",
            "env.eval_test_every=20",
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
    samples = {s["epoch"]: s for s in json.loads((out / "memory.json").read_text())}
    # A leaked seed keeps its module and its parameter, gradient and optimiser tensors
    # alive: the live counts must not climb with the 90+ seeds this run prunes.
    for key in ("tensors", "modules"):
        counts = [samples[e][key] for e in (100, 200, 300)]
        assert max(counts) - samples[20][key] < 60, f"live {key} grew: {counts}"
    # RSS settles in steps over ~250 epochs as the allocator meets every blueprint's
    # sizes, with flat tensor and module counts (measured 2026-11-22 over 700 epochs:
    # 817 MiB at epoch 20, 856 at 160, 865 from 260 to 700; other runs gave +9 to +11 MiB
    # from 160 to 300). The live counts catch kept seeds; the bound below catches memory kept
    # every epoch outside Python objects (140 epochs of one batch of activations is ~70 MiB).
    # How much it takes to settle depends on the sizes met (73 MiB from epoch 20 to 300 in
    # one CI run, with flat live counts), so only the settled stretch is bounded.
    settled = (samples[300]["rss"] - samples[160]["rss"]) / MIB
    assert settled < 20, f"RSS grew {settled:.1f} MiB from epoch 160 to 300"
