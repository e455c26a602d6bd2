"""`esper compare` end to end on the tiny task: validation before any cell, skip/resume/redo
of cells, SIGKILL and Ctrl-C in the middle, and --jobs 2 equal to --jobs 1."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from esper_core.compare.cells import CellJob, CellState, cell_state, run_cell
from esper_core.compare.comparison import ComparisonResults, compare, load_results
from esper_core.compare.experiment import (
    build_experiment,
    parse_experiment,
    plan_cells,
    shared_config,
)
from esper_core.converter import unstructure
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.interrupts import Interrupted

REPO = Path(__file__).parents[2]
FAKE = str(REPO / "tests" / "fake_plugin.py")
INSTALLED = {ep.name for ep in importlib.metadata.entry_points(group="esper")}
POLICIES = ["scripted"] + [p for p in ("wait", "random") if f"policies.{p}" in INSTALLED]
BASELINE = "wait" if "wait" in POLICIES else "scripted"
SEEDS = 4
SHARED = {
    "run": {"reward": "acc_delta", "telemetry": [], "checkpoint_every": 1},
    "lifecycle": {"min_training_epochs": 1},
    "env": {"max_epochs": 3},
}
CLI_ARGS = [
    "compare",
    "--plugin",
    "tests/fake_plugin.py",
    "--task",
    "tiny",
    *[a for p in POLICIES for a in ("--policy", p)],
    "--seeds",
    str(SEEDS),
    "--max-epochs",
    "3",
    "--baseline",
    BASELINE,
    "--set",
    "run.reward=acc_delta",
    "--set",
    "run.telemetry=[]",
    "--set",
    "run.checkpoint_every=1",
    "--set",
    "lifecycle.min_training_epochs=1",
    "--quiet",
]


def esper(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "esper_cli", *args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


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
    return build_experiment(spec, shared_config(spec), plugins=[FAKE])


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
def pm() -> PluginManager:
    return PluginManager(extra=[FAKE])


@pytest.fixture(scope="module")
def clean(pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> ComparisonResults:
    out = tmp_path_factory.mktemp("clean")
    report = compare(experiment(), pm, out, jobs=1, notify=lambda _m: None)
    assert not report.failed and not report.results.missing
    assert {o.status for o in report.outcomes} == {"completed"}
    return report.results


# ---------------------------------------------------------------- validation before any cell


@pytest.fixture(scope="module")
def invoke():  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from esper_cli.main import build_cli

    group, pm = build_cli()

    def call(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(group, list(args), obj={"pm": pm})

    return call


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
    if policy.startswith("ppo") and "policies.ppo" not in INSTALLED:
        pytest.skip("esper-tamiyo-ppo is not installed")
    out = tmp_path / "exp"
    args = [FAKE if a == "tests/fake_plugin.py" else a for a in CLI_ARGS]
    result = invoke(*args, "--policy", policy, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (
        result.stderr
    )
    assert not out.exists()


def test_dry_run_checks_and_starts_nothing(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "exp"
    args = [FAKE if a == "tests/fake_plugin.py" else a for a in CLI_ARGS]
    result = invoke(*args, "--out", str(out), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"experiment OK: {SEEDS * len(POLICIES)} runs in {out}" in result.output
    assert not out.exists()


def test_mismatching_ppo_checkpoint_fails_validation(pm: PluginManager, tmp_path: Path) -> None:
    if "policies.ppo" not in INSTALLED:
        pytest.skip("esper-tamiyo-ppo is not installed")
    from esper_core.compare.experiment import validate
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


def test_a_cell_is_resumed_redone_or_skipped(pm: PluginManager, tmp_path: Path) -> None:
    exp = experiment(
        policies=["scripted"], seeds=1, baseline=None, config={**SHARED, "env": {"max_epochs": 4}}
    )
    (cell,) = plan_cells(exp, pm, threads=1)

    def job(root: Path) -> CellJob:
        return CellJob(
            str(cell.directory(root)), str(cell.lock(root)), unstructure(cell.config), (FAKE,)
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
    assert (resumed.status, resumed.resumed, resumed.restarted) == ("completed", True, False)

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
    changed = attrs.evolve(interrupted, training=attrs.evolve(cell.config.training, host_lr=0.05))
    with pytest.raises(Interrupted):
        run(changed, pm, run_dir=other, quiet=True)
    again = run_cell(job(tmp_path / "other"))
    assert (again.status, again.resumed, again.restarted) == ("completed", False, True)
    assert summary(tmp_path / "other") == summary(tmp_path / "broken")

    mtime = (broken / "summary.json").stat().st_mtime_ns
    assert run_cell(job(tmp_path / "broken")).status == "skipped"
    assert (broken / "summary.json").stat().st_mtime_ns == mtime


# ---------------------------------------------------------------- whole experiments


@pytest.mark.slow
def test_jobs_2_gives_the_results_of_jobs_1(
    pm: PluginManager, clean: ComparisonResults, tmp_path: Path
) -> None:
    report = compare(experiment(), pm, tmp_path, jobs=2, notify=lambda _m: None)
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

    rerun = esper(*CLI_ARGS, "--out", str(out))
    _, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
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
    rerun = esper(*CLI_ARGS, "--out", str(out), "--jobs", "2")
    _, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    assert stable(load_results(out / "results.json")) == stable(clean)
