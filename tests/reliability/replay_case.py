"""One case of the attack replay (``tests/reliability/attack_replay.py``): a real process
run the way a user runs it, and the verdict on how it ended."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attrs import field, frozen

from tests.plugin_set import REPO, subprocess_env

# Seconds past which a case is a hang. A case takes 5 to 60 s; on a machine starved by
# other work (a 2-core machine at load 30) a one-epoch run took over 480 s, hence the knob.
TIMEOUT = float(os.environ.get("ESPER_REPLAY_TIMEOUT", "480"))
# What a case leaves to check once its process ended: None when nothing was lost and the
# behaviour was right, else what went wrong (a file outside the run directory changed).
Check = Callable[[], str | None]
# Given a fresh directory: the process's arguments after ``python`` and the check.
Setup = Callable[[Path], tuple[list[str], Check]]
VERDICTS = ("clean", "traceback", "hang", "silent acceptance", "data loss", "unclear")


def nothing_lost() -> str | None:
    return None


def esper_args(*args: str) -> list[str]:
    return ["-m", "esper_cli", *args]


@frozen
class Case:
    name: str
    setup: Setup
    code: int = 2  # 2: one `error:` line on stderr; 1: one `FAIL` line on stdout; 0: works
    says: str = ""  # a phrase the error (or FAIL) line must hold
    file_limit: int | None = None  # RLIMIT_FSIZE of the process, in bytes (a full disk)


@frozen
class Outcome:
    case: Case
    verdict: str  # one of VERDICTS
    seconds: float
    line: str
    detail: str = field(default="")

    def row(self) -> str:
        shown = self.line.replace("|", "/")[:110]
        extra = f" ({self.detail})" if self.detail else ""
        return f"| {self.case.name} | {self.verdict}{extra} | {self.seconds:.1f} | {shown} |"


def _limit_files(limit: int | None) -> Callable[[], None] | None:
    if limit is None:
        return None

    def preexec() -> None:
        import resource
        import signal

        # Ignored, a write past the limit fails with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def classify(case: Case, code: int, stdout: str, stderr: str, damage: str | None) -> Outcome:
    """The verdict on a finished process (seconds filled in by :func:`replay`)."""
    errors = [line for line in stderr.splitlines() if line.strip()]
    fails = [line for line in stdout.splitlines() if line.strip()]
    if case.code == 1:
        line = fails[-1] if fails else ""
    else:
        line = errors[-1] if errors else ""
    if damage and damage.startswith("DATA LOST"):
        return Outcome(case, "data loss", 0.0, line, damage)
    if "Traceback" in stderr:
        return Outcome(case, "traceback", 0.0, line)
    if code == 3 and line.startswith("WRONG: "):  # tests/reliability/replay_library.py
        return Outcome(case, "silent acceptance", 0.0, line)
    if code == 0 and case.code != 0:
        return Outcome(case, "silent acceptance", 0.0, line, "exit 0")
    if damage:  # a case that ran without error but did the wrong thing
        return Outcome(case, "silent acceptance", 0.0, line, damage)
    problems = []
    if code != case.code:
        problems.append(f"exit {code}, expected {case.code}")
    if case.code == 2 and not (len(errors) == 1 and line.startswith("error: ")):
        problems.append(f"{len(errors)} stderr lines")
    if case.code == 1 and not (len(fails) == 1 and line.startswith("FAIL ")):
        problems.append(f"{len(fails)} stdout lines")
    if case.says and case.says not in line:
        problems.append(f"no {case.says!r}")
    if problems:
        return Outcome(case, "unclear", 0.0, line, "; ".join(problems))
    return Outcome(case, "clean", 0.0, line)


def replay(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="esper-replay-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        args, check = case.setup(work)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, *args],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                cwd=REPO,
                env=subprocess_env(autoload=True),  # every installed plugin, as for a user
                preexec_fn=_limit_files(case.file_limit),
            )
        except subprocess.TimeoutExpired:
            check()
            seconds = time.perf_counter() - started
            return Outcome(case, "hang", seconds, "", f"> {TIMEOUT:.0f} s")
        seconds = time.perf_counter() - started
        outcome = classify(case, done.returncode, done.stdout, done.stderr, check())
        return Outcome(case, outcome.verdict, seconds, outcome.line, outcome.detail)
