"""Issue 33's reproducers replayed as a user runs them: each case a real ``esper`` process.

``python -m tests.reliability.attack_replay`` (from the repository root) prints one row per
case and exits 1 if any case is not clean. A case is clean when the process ends in time
with the expected exit code, prints no traceback, says what was wrong in exactly one
``error:`` line on stderr (for a failure), and leaves every file outside the run directory
as it was. The pytest suite pins each case on its own; this replays a representative set
end to end, against whatever is installed, the way the outside attack did.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attrs import frozen

from tests.plugin_set import FAKE_COMPONENTS, REPO, subprocess_env
from tests.reliability.hostile_plugins import hostile_reward

TIMEOUT = 240.0  # seconds: a case past this is a hang
TINY = [*FAKE_COMPONENTS, "--quiet", "--set", "run.telemetry=[]"]


@frozen
class Case:
    name: str
    # Given a fresh directory: the esper arguments, and a check of what is left on disk
    # (None: nothing lost; else what was).
    setup: Callable[[Path], tuple[list[str], Callable[[], str | None]]]
    code: int = 2
    says: str = ""  # a phrase the error line must hold


@frozen
class Outcome:
    case: Case
    verdict: str  # "clean", or what went wrong
    seconds: float
    line: str

    def row(self) -> str:
        return f"| {self.case.name} | {self.verdict} | {self.seconds:.1f} | {self.line[:110]} |"


def _nothing_lost() -> str | None:
    return None


def _lock_link(d: Path) -> tuple[list[str], Callable[[], str | None]]:
    run_dir, victim = d / "r", d / "victim.txt"
    run_dir.mkdir()
    victim.write_text("precious\n")
    (run_dir / ".esper.lock").symlink_to(victim)

    def lost() -> str | None:
        return None if victim.read_text() == "precious\n" else "victim.txt overwritten"

    return ["run", *TINY, "--max-epochs", "1", "--out", str(run_dir)], lost


def _sweep_label(d: Path) -> tuple[list[str], Callable[[], str | None]]:
    config = d / "exp.toml"
    config.write_text(
        'seeds = 1\nbaselines = ["size-sweep"]\npolicies = ["wait"]\nout = "exp"\n'
        '[[tasks]]\nname = "digits"\n'
        '[[sweep.sizes]]\nlabel = "../../../../../../victimexp"\n'
        "options = { base_channels = 4 }\n"
    )
    return ["compare", str(config), "--dry-run"], _nothing_lost


def _compare_bound(
    flag: str, value: str
) -> Callable[[Path], tuple[list[str], Callable[[], str | None]]]:
    def setup(d: Path) -> tuple[list[str], Callable[[], str | None]]:
        example = str(REPO / "examples" / "compare-digits.toml")
        return ["compare", example, "--dry-run", flag, value], _nothing_lost

    return setup


def _config_set(assignment: str) -> Callable[[Path], tuple[list[str], Callable[[], str | None]]]:
    def setup(d: Path) -> tuple[list[str], Callable[[], str | None]]:
        return ["config", "show", "--set", assignment], _nothing_lost

    return setup


def _nul_out_dir(d: Path) -> tuple[list[str], Callable[[], str | None]]:
    config = d / "c.toml"
    config.write_text('[run]\nout_dir = "\\u0000"\n')
    return ["run", *TINY, "--config", str(config)], _nothing_lost


def _reward(body: str) -> Callable[[Path], tuple[list[str], Callable[[], str | None]]]:
    def setup(d: Path) -> tuple[list[str], Callable[[], str | None]]:
        plugin = hostile_reward(d / "hostile_reward.py", body)
        args = ["run", *TINY, "--plugin", plugin, "--reward", "hostile", "--max-epochs", "6"]
        return [*args, "--out", str(d / "r")], _nothing_lost

    return setup


def _corpus(content: bytes) -> Callable[[Path], tuple[list[str], Callable[[], str | None]]]:
    def setup(d: Path) -> tuple[list[str], Callable[[], str | None]]:
        corpus = d / "corpus.txt"
        corpus.write_bytes(content)
        args = ["run", "--task", "charlm", "--quiet", "--max-epochs", "1"]
        sets = [f"tasks.charlm.path={corpus}", "run.telemetry=[]"]
        return [
            *args,
            *(x for s in sets for x in ("--set", s)),
            "--out",
            str(d / "r"),
        ], _nothing_lost

    return setup


def _dataset_labels(d: Path) -> tuple[list[str], Callable[[], str | None]]:
    module = "tests.plugins.esper_tasks.own_data"
    sets = [
        f"tasks.dataset.data={module}:label_past_the_outputs",
        f"tasks.dataset.model={module}:small_cnn",
        'tasks.dataset.slots=["0"]',
        "run.telemetry=[]",
    ]
    args = ["run", "--task", "dataset", "--quiet", "--max-epochs", "1"]
    return [*args, *(x for s in sets for x in ("--set", s)), "--out", str(d / "r")], _nothing_lost


CASES = (
    Case(
        "33.1 lock file a link out of the run directory",
        _lock_link,
        says="outside the run directory",
    ),
    Case("33.2 sweep label ../../victimexp (--dry-run)", _sweep_label, says="label"),
    Case("33.7 --resamples 1e11 (--dry-run)", _compare_bound("--resamples", "100000000000")),
    Case("33.14 --seeds 100000000 (--dry-run)", _compare_bound("--seeds", "100000000")),
    Case("33.8 rewards.pbrs.epoch_bonus=1e20", _config_set("rewards.pbrs.epoch_bonus=1e20")),
    Case("33.8 env.blueprints=''", _config_set("env.blueprints=''"), says="at least one"),
    Case("33.13 run.out_dir NUL in a TOML file", _nul_out_dir, says="NUL"),
    Case("33.4 sys.exit(0) in a reward", _reward("sys.exit(0)"), says="sys.exit(0)"),
    Case(
        "33.5 NaN reward", _reward("return RewardBreakdown.of(delta=math.nan)"), says="non-finite"
    ),
    Case("33.12 str reward", _reward('return "1.0"'), says="returned a str"),
    Case("33.6 charlm: empty corpus", _corpus(b""), says="is empty"),
    Case("33.6 charlm: binary corpus", _corpus(bytes(range(256)) * 40), says="binary"),
    Case("33.6 charlm: one character", _corpus(b"a" * 6000), says="one distinct character"),
    Case("33.6 tasks.dataset: label past the outputs", _dataset_labels, says="labels must lie"),
)


def replay(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="esper-replay-") as tmp:
        work = Path(tmp)
        args, lost = case.setup(work)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "esper_cli", *args],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                cwd=REPO,
                env=subprocess_env(autoload=True),  # every installed plugin, as for a user
            )
        except subprocess.TimeoutExpired:
            return Outcome(case, f"HANG (> {TIMEOUT:.0f} s)", time.perf_counter() - started, "")
        seconds = time.perf_counter() - started
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        problems = []
        if "Traceback" in done.stderr:
            problems.append("TRACEBACK")
        if done.returncode != case.code:
            problems.append(f"exit {done.returncode}, expected {case.code}")
        if case.code and not (len(lines) == 1 and line.startswith("error: ")):
            problems.append(f"{len(lines)} stderr lines")
        if case.says and case.says not in line:
            problems.append(f"no {case.says!r}")
        damage = lost()
        if damage:
            problems.append(f"DATA LOST: {damage}")
        return Outcome(case, "; ".join(problems) or "clean", seconds, line)


def main() -> int:
    print("| case | outcome | s | stderr |\n|---|---|---|---|")
    outcomes = []
    for case in CASES:
        outcome = replay(case)
        outcomes.append(outcome)
        print(outcome.row(), flush=True)
    clean = sum(o.verdict == "clean" for o in outcomes)
    print(f"\n{clean} of {len(outcomes)} clean")
    return 0 if clean == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
