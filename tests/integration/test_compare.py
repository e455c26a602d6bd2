"""`esper compare` end to end on the tiny task: validation before any cell, skip/resume/redo
of cells, SIGKILL and Ctrl-C in the middle, and --jobs 2 equal to --jobs 1."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.compare.cell_dirs import CellState, cell_state
from esper_core.compare.cells import CellJob, run_cell
from esper_core.compare.comparison import compare
from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
from esper_core.compare.plan import plan_cells
from esper_core.compare.results import ComparisonResults, load_results
from esper_core.converter import unstructure
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.interrupts import Interrupted
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import (
    FAKE_COMPONENTS,
    FAKE_PLUGIN,
    REPO,
    subprocess_env,
    write_broken_plugin,
)

OTHERS = ["wait", "random"]
POLICIES = ["scripted", *OTHERS]
BASELINE = "wait"
# Every plugin the experiments load (autoloading is off in tests), in this process, in the
# cells' worker processes and in `esper compare`: the same blueprints, the same results.
CELL_PLUGINS = (FAKE_PLUGIN, *(f"policies.{p}" for p in OTHERS))
# Two seeds: six cells, enough for a kill or an interrupt to land with cells still to run;
# each experiment below runs every cell (some twice), so each cell more costs them all.
SEEDS = 2
SHARED = {
    "run": {"reward": "acc_delta", "telemetry": [], "checkpoint_every": 1},
    "lifecycle": {"min_training_epochs": 1},
    "env": {"max_epochs": 3},
}


def cli_args(seeds: int) -> list[str]:
    return [
        "compare",
        *FAKE_COMPONENTS,  # --policy scripted; the others come in as --plugin policies.NAME
        *[a for p in CELL_PLUGINS[1:] for a in ("--plugin", p)],
        "--seeds",
        str(seeds),
        "--max-epochs",
        "3",
        "--baseline",
        BASELINE,
        "--set",
        "run.telemetry=[]",
        "--set",
        "run.checkpoint_every=1",
        "--set",
        "lifecycle.min_training_epochs=1",
        "--quiet",
    ]


CLI_ARGS = cli_args(SEEDS)


def esper(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "esper_cli", *args],
        cwd=REPO,
        env=subprocess_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def esper_here(*args: str) -> Any:
    """``esper ARGS`` in this process, loading only the plugins ARGS name, as ``esper`` does
    in a subprocess of the tests (autoloading is off): the cells see the same blueprints.
    The cells run in this process too (tests/inline_runner.py, not named in ARGS, so not
    one of the cells' plugins): which cells a rerun skips, resumes or runs is compare's
    choice on every runner, and a pool of fresh interpreters costs seconds of imports."""
    group, pm = build_cli(PluginManager(extra=[INLINE_RUNNER], autoload=False))
    return CliRunner().invoke(group, [*args, "--runner", "inline"], obj={"pm": pm})


def experiment(**changes: Any):  # type: ignore[no-untyped-def]
    data = {
        "policies": POLICIES,
        "tasks": ["tiny"],
        "seeds": SEEDS,
        "baseline": BASELINE,
        "config": SHARED,
        **changes,
    }
    spec = parse_experiment(data)
    return build_experiment(spec, shared_config(spec), plugins=CELL_PLUGINS)


def stable(results: ComparisonResults) -> dict[str, Any]:
    """Results without wall-clock times and paths."""
    data = unstructure(results)
    for row in data["rows"]:
        row["metrics"].pop("wall_time")
    for cell in data["cells"]:
        cell.pop("wall_time")
        cell.pop("run_dir")
    data.pop("missing")
    return data


@pytest.fixture(scope="module")
def cells_pm() -> PluginManager:
    """Exactly the plugins of the experiments' cells (no first-party blueprints)."""
    return PluginManager(extra=list(CELL_PLUGINS), autoload=False)


@pytest.fixture(scope="module")
def clean(cells_pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> ComparisonResults:
    out = tmp_path_factory.mktemp("clean")
    report = compare(experiment(), cells_pm, out, jobs=1, notify=lambda _m: None)
    assert not report.failed and not report.results.missing
    assert {o.status for o in report.outcomes} == {"completed"}
    return report.results


# ---------------------------------------------------------------- validation before any cell


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("nope", "unknown policies component 'nope'; available:"),
        ("ppo:missing/checkpoint.pt", "PPO checkpoint missing/checkpoint.pt not found"),
    ],
)
def test_bad_policy_fails_before_any_cell(
    invoke, policy: str, expected: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "exp"
    result = invoke(*CLI_ARGS, "--policy", policy, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (
        result.stderr
    )
    assert not out.exists()


def test_dry_run_checks_and_starts_nothing(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "exp"
    # Four seeds (nothing runs): more than two are shown as a range.
    result = invoke(*cli_args(4), "--out", str(out), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"experiment OK: {4 * len(POLICIES)} runs in {out}" in result.output
    # Grouped by task and arm, with the seeds and the count.
    assert re.search(
        r"^  evaluation   tiny / wait / random seeds \d+-\d+: to run$", result.output, re.M
    )
    assert "no estimate yet" in result.output
    assert not out.exists()


def test_dry_run_imports_neither_the_statistics_nor_the_cell_code(tmp_path: Path) -> None:
    """What keeps the preview of an experiment near a second (no time is asserted): SciPy
    and the cell code load only when cells run (``esper compare --dry-run
    examples/growth-glyphs.toml`` took 2.3 s of CPU with them, 0.8 s without)."""
    argv = [*CLI_ARGS, "--out", str(tmp_path / "exp"), "--dry-run"]
    code = (
        "import sys\n"
        "from esper_cli.main import main\n"
        f"sys.argv = ['esper', *{argv!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('scipy', 'esper_core.compare.cells') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "experiment OK" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_a_fresh_dry_run_estimates_from_the_benchmarks_without_torch(tmp_path: Path) -> None:
    """A fresh experiment gets an estimate from each task's benchmark, priced from the
    configs alone: neither torch nor the data is loaded (``esper compare --dry-run
    examples/growth-glyphs.toml`` takes under a second of CPU; importing torch alone
    takes two). No time is asserted: what the preview imports is."""
    argv = ["compare", "examples/growth-glyphs.toml", "--out", str(tmp_path / "g"), "--dry-run"]
    code = (
        "import sys\n"
        "from esper_cli.main import main\n"
        f"sys.argv = ['esper', *{argv!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('torch', 'numpy', 'scipy') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(autoload=True),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.search(
        r"glyphs / sweep\.large / random seeds 4000-4009: to run, ~.+ per run \(estimated\)",
        done.stdout,
    )
    assert "an estimate from each task's benchmark" in lines[-2], lines[-2]
    assert lines[-1] == "[]", done.stdout


@pytest.mark.slow
def test_progress_lines_off_a_terminal_carry_the_time_left(tmp_path: Path) -> None:
    # CliRunner's stderr is no terminal, as a log's is not. The lines are written as each
    # cell's outcome comes back, whatever the runner: the cells run in this process
    # (tests/inline_runner.py), without a pool of fresh interpreters to start.
    args = [*FAKE_COMPONENTS, "--seeds", "2", "--max-epochs", "2", "--set", "run.telemetry=[]"]
    group, pm = build_cli(PluginManager(extra=[INLINE_RUNNER], autoload=False))
    inline = ["--runner", "inline", "--out", str(tmp_path / "exp")]
    result = CliRunner().invoke(group, ["compare", *args, *inline], obj={"pm": pm})
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("cells ")]
    assert re.fullmatch(r"cells 1/2: \S+ completed; about \d+ (s|min) left", lines[0]), lines
    assert re.fullmatch(r"cells 2/2: \S+ completed; done", lines[1]), lines


def test_mismatching_ppo_checkpoint_fails_validation(pm: PluginManager, tmp_path: Path) -> None:
    from esper_core.compare.plan import validate
    from esper_core.config import load_config
    from esper_core.errors import ConfigError
    from esper_core.run.api import train

    # A policy trained on both slots of the tiny host cannot drive a run with only one.
    overrides = [
        "run.task=tiny",
        "run.reward=acc_delta",
        "run.telemetry=[]",
        "env.max_epochs=2",
        "train.updates=1",
        "run.policy=ppo",
    ]
    train(load_config(overrides=overrides), pm, run_dir=tmp_path / "ppo", quiet=True)
    one_slot = experiment(
        policies=["scripted", f"ppo:{tmp_path / 'ppo' / 'checkpoint.pt'}"],
        baseline="scripted",
        config={**SHARED, "env": {"max_epochs": 3, "slots": ["r0c0"]}},
    )
    with pytest.raises(ConfigError, match="does not match this run"):
        validate(one_slot, pm, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- cells


def test_a_cell_is_resumed_redone_or_skipped(cells_pm: PluginManager, tmp_path: Path) -> None:
    pm = cells_pm
    exp = experiment(
        policies=["scripted"], seeds=1, baseline=None, config={**SHARED, "env": {"max_epochs": 4}}
    )
    (cell,) = plan_cells(exp, pm, threads=1)

    def job(root: Path) -> CellJob:
        return CellJob(
            str(cell.directory(root)),
            str(cell.lock(root)),
            unstructure(cell.config),
            (FAKE_PLUGIN,),
        )

    def summary(root: Path) -> dict[str, Any]:
        data = json.loads((cell.directory(root) / "summary.json").read_text())
        return {k: v for k, v in data.items() if k not in ("wall_time", "run_name")}

    # A cell stopped at epoch 2 (as by Ctrl-C) holds a checkpoint: it is resumed. The
    # interrupting telemetry backend does not count as a different config.
    interrupted = attrs.evolve(
        cell.config,
        run=attrs.evolve(cell.config.run, telemetry=["interrupter"]),
        telemetry={"interrupter": {"at_epoch": 2, "at_outer": 0}},
    )
    with pytest.raises(Interrupted):
        run(interrupted, pm, run_dir=cell.directory(tmp_path / "resumed"), quiet=True)
    assert cell_state(cell.directory(tmp_path / "resumed")) is CellState.RESUMABLE
    resumed = run_cell(job(tmp_path / "resumed"))
    assert (resumed.status, resumed.resumed, resumed.restarted) == ("completed", True, False), (
        resumed.error
    )

    # A directory without a checkpoint is removed and the cell run from scratch.
    broken = cell.directory(tmp_path / "broken")
    broken.mkdir(parents=True)
    (broken / "config.toml").write_text("leftover")
    (broken / "stray.txt").write_text("x")
    fresh = run_cell(job(tmp_path / "broken"))
    assert (fresh.status, fresh.resumed, fresh.restarted) == ("completed", False, True)
    assert not (broken / "stray.txt").exists()
    assert summary(tmp_path / "resumed") == summary(tmp_path / "broken")

    # A checkpoint of another config is not continued: the cell is run again.
    other = cell.directory(tmp_path / "other")
    changed = attrs.evolve(interrupted, training=attrs.evolve(cell.config.training, lr=0.07))
    with pytest.raises(Interrupted):
        run(changed, pm, run_dir=other, quiet=True)
    again = run_cell(job(tmp_path / "other"))
    assert (again.status, again.resumed, again.restarted) == ("completed", False, True)
    assert summary(tmp_path / "other") == summary(tmp_path / "broken")

    mtime = (broken / "summary.json").stat().st_mtime_ns
    assert run_cell(job(tmp_path / "broken")).status == "skipped"
    assert (broken / "summary.json").stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_a_cell_made_with_another_blueprint_set_is_run_again_saying_why(tmp_path: Path) -> None:
    """Finished cells used to be reused whatever blueprints were installed when they ran.
    The cells run in this process (tests/inline_runner.py): which cells run is compare's
    choice on every runner."""
    pm = PluginManager(extra=[*CELL_PLUGINS, INLINE_RUNNER], autoload=False)
    exp = experiment(policies=["scripted"], seeds=1, baseline=None)
    first = compare(exp, pm, tmp_path, notify=lambda _m: None, runner="inline")
    assert [o.status for o in first.outcomes] == ["completed"]
    (config_path,) = tmp_path.glob("cells/*/*/*/config.toml")
    text = config_path.read_text()
    assert "blueprints = [" in text  # the resolved set is stored with the run
    config_path.write_text(text.replace("blueprints = [", 'blueprints = [ "tiny/gone",', 1))
    messages: list[str] = []
    again = compare(exp, pm, tmp_path, notify=messages.append, runner="inline")
    assert [o.status for o in again.outcomes] == ["completed"]  # run again, not "skipped"
    (message,) = messages
    assert "made with another config (env.blueprints: " in message and "running it again" in message
    assert stable(again.results) == stable(first.results)
    unchanged = compare(exp, pm, tmp_path, notify=messages.append, runner="inline")
    assert [o.status for o in unchanged.outcomes] == [] and len(messages) == 1


def test_a_failing_cell_reports_the_plugin_in_one_line(tmp_path: Path) -> None:
    plugin = write_broken_plugin(
        tmp_path / "broken_policy.py", "policies", "scripted", "act", "broken policy"
    )
    plugins = (*CELL_PLUGINS, str(plugin))
    pm = PluginManager(extra=list(plugins), autoload=False)
    spec = parse_experiment(
        {"policies": ["broken"], "tasks": ["tiny"], "seeds": 1, "config": SHARED}
    )
    (cell,) = plan_cells(build_experiment(spec, shared_config(spec), plugins), pm, threads=1)
    root = tmp_path / "exp"
    outcome = run_cell(
        CellJob(str(cell.directory(root)), str(cell.lock(root)), unstructure(cell.config), plugins)
    )
    assert outcome.status == "failed" and outcome.error is not None
    assert "broken_policy.py raised ValueError: broken policy" in outcome.error
    # Running the experiment again retries the cell: no `esper run --resume` advice.
    assert "\n" not in outcome.error and "--resume" not in outcome.error


# ---------------------------------------------------------------- whole experiments


@pytest.mark.slow
def test_jobs_2_gives_the_results_of_jobs_1(
    cells_pm: PluginManager, clean: ComparisonResults, tmp_path: Path
) -> None:
    report = compare(experiment(), cells_pm, tmp_path, jobs=2, notify=lambda _m: None)
    assert stable(report.results) == stable(clean)
    assert load_results(tmp_path / "results.json") == report.results
    assert (tmp_path / "results.md").is_file() and (tmp_path / "intervals.png").is_file()


def _summaries(out: Path) -> list[Path]:
    return sorted(out.glob("cells/*/*/*/summary.json"))


@pytest.mark.slow
def test_sigkill_midway_then_rerun_skips_finished_cells(
    clean: ComparisonResults, tmp_path: Path
) -> None:
    out = tmp_path / "exp"
    total = SEEDS * len(POLICIES)
    proc = esper(*CLI_ARGS, "--out", str(out))
    deadline = time.monotonic() + 300
    while len(_summaries(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    finished = {p: p.stat().st_mtime_ns for p in _summaries(out)}
    assert 2 <= len(finished) < total, "the run ended before it could be killed midway"

    # The rerun is the same command, in this process with its cells: what it skips is the
    # point.
    rerun = esper_here(*CLI_ARGS, "--out", str(out))
    assert rerun.exit_code == 0, rerun.output
    assert len(_summaries(out)) == total
    assert {
        p: p.stat().st_mtime_ns for p in finished
    } == finished  # finished cells were not run again
    assert stable(load_results(out / "results.json")) == stable(clean)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_rerun_completes(
    clean: ComparisonResults, tmp_path: Path
) -> None:
    out = tmp_path / "exp"
    proc = esper(*CLI_ARGS, "--out", str(out), "--jobs", "2")
    deadline = time.monotonic() + 300
    while len(_summaries(out)) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    if proc.returncode == 0:
        pytest.skip("every cell finished before the interrupt arrived")
    assert proc.returncode == 130, stderr
    assert (
        "interrupted" in stderr
        and "run the same command again" in stderr
        and "Traceback" not in stderr
    ), stderr
    assert (out / "results.json").is_file()  # what finished so far
    # The rerun is the same command, in this process with its cells: what it completes is
    # the point.
    rerun = esper_here(*CLI_ARGS, "--out", str(out), "--jobs", "2")
    assert rerun.exit_code == 0, rerun.output
    assert stable(load_results(out / "results.json")) == stable(clean)
