"""``esper`` on the fake plugin's tiny task, for the reliability tests: in this process
(the ``invoke`` fixture) where that is enough, as a real process where the test needs one."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.plugin_set import FAKE_COMPONENTS, FAKE_PLUGIN_FILE, subprocess_env

FAKE = str(FAKE_PLUGIN_FILE)
TINY = [
    *FAKE_COMPONENTS,
    "--set",
    "run.telemetry=[]",
    "--set",
    "lifecycle.min_training_epochs=2",
    "--quiet",
]


def esper(*args: str) -> subprocess.Popen[str]:
    """A real ``esper`` process (repository root as working directory: ``tests`` imports)."""
    from tests.plugin_set import REPO

    return subprocess.Popen(
        [sys.executable, "-m", "esper_cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
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


def failed_in_one_line(result: Any, code: int = 2) -> str:
    """The ``error:`` line of an ``invoke`` result that failed with ``code``."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return one_error_line(result.stderr)
