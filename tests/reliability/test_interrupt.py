"""Ctrl-C during an epoch: a checkpoint, a clean exit with resume advice, an identical resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.plugins import PluginManager
from tests.plugin_set import FAKE_COMPONENTS, FAKE_PLUGIN, REPO, subprocess_env

ARGS = [
    "run",
    *FAKE_COMPONENTS,
    "--set",
    "run.telemetry=[]",
    "--set",
    "lifecycle.min_training_epochs=2",
    "--max-epochs",
    "12",
    "--episodes",
    "2",
    "--quiet",
    "--json",
]


def esper(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "esper_cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=subprocess_env(),
    )


def esper_here(*args: str) -> Any:
    """``esper ARGS`` in this process, loading only the plugins ARGS name (as ``esper`` in a
    subprocess of the tests does): the uninterrupted reference and the resume. Only the
    run that is interrupted needs a process of its own to send SIGINT to."""
    group, pm = build_cli(PluginManager(autoload=False))
    return CliRunner().invoke(group, list(args), obj={"pm": pm})


def stable(summary: dict) -> dict:  # type: ignore[type-arg]
    out = {k: v for k, v in summary.items() if k not in ("wall_time", "run_name")}
    out["episodes"] = [{k: v for k, v in e.items() if k != "time"} for e in summary["episodes"]]
    return out


def test_sigint_checkpoints_exits_cleanly_and_resumes_identically(tmp_path: Path) -> None:
    reference = esper_here(*ARGS, "--out", str(tmp_path / "ref"))
    assert reference.exit_code == 0, reference.output
    expected = stable(json.loads(reference.stdout))

    run_dir = tmp_path / "cut"
    proc = esper(*ARGS, "--out", str(run_dir))
    deadline = time.time() + 120
    while not (run_dir / "checkpoint.pt").exists():  # first periodic checkpoint: mid-episode
        assert time.time() < deadline and proc.poll() is None, (
            proc.stderr.read() if proc.stderr else ""
        )
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Interrupt received" in err and f"Resume with: esper run --resume {run_dir}" in err
    assert "Traceback" not in err
    assert not (run_dir / "summary.json").exists()
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]

    resumed = esper_here(
        "run", "--plugin", FAKE_PLUGIN, "--resume", str(run_dir), "--quiet", "--json"
    )
    assert resumed.exit_code == 0, resumed.output
    assert stable(json.loads(resumed.stdout)) == expected
