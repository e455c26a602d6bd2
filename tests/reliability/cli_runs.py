"""Real ``esper`` processes on the fake plugin's tiny task, for the reliability tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FAKE = str(Path(__file__).parents[1] / "fake_plugin.py")
TINY = [
    "--plugin",
    FAKE,
    "--task",
    "tiny",
    "--policy",
    "scripted",
    "--reward",
    "acc_delta",
    "--set",
    "run.telemetry=[]",
    "--set",
    "lifecycle.min_training_epochs=2",
    "--quiet",
]


def esper(*args: str, **popen: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ESPER_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        [sys.executable, "-m", "esper_cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


def esper_done(*args: str, timeout: float = 300) -> tuple[int, str, str]:
    proc = esper(*args)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def one_error_line(err: str) -> str:
    """The single ``error:`` line of a failed command (and nothing else on stderr)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]
