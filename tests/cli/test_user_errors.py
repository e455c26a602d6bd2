"""Errors a user causes in a run are one line on stderr and exit 2:
fp16 on a CPU, a checkpoint naming a blueprint that is not registered, and a PPO
checkpoint trained on another task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.plugin_set import FAKE_COMPONENTS, REPO, subprocess_env

# The fake components (tiny task, scripted policy, acc_delta reward), one thread, quiet.
TINY = [*FAKE_COMPONENTS, "--set", "run.threads=1", "--quiet"]


def esper(*args: str) -> subprocess.CompletedProcess[str]:
    # From the repository root, where the fake plugin module is importable.
    return subprocess.run(
        [sys.executable, "-m", "esper_cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=subprocess_env(),
    )


def esper_here(invoke: Invoke, *args: str) -> subprocess.CompletedProcess[str]:
    """``esper ARGS`` in this process, as :func:`esper` returns it: the slow tests run
    several commands each, and the error boundary is the same code without an interpreter
    start of seconds."""
    result = invoke(*args)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def one_line_exit_2(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and expected in lines[0], lines[0]


def test_fp16_on_a_cpu(tmp_path: Path) -> None:
    result = esper(
        "run", *TINY, "--max-epochs", "1", "--out", str(tmp_path / "r"),
        "--set", "run.telemetry=[]", "--set", 'training.amp="fp16"',
    )  # fmt: skip
    one_line_exit_2(result, "training.amp: fp16 needs a CUDA device, this env runs on cpu")


def test_train_with_a_policy_that_cannot_learn_leaves_no_run_directory(tmp_path: Path) -> None:
    # Refused from the policy's class, before the task, envs or run directory are built.
    for policy in ("scripted", "heuristic"):
        out = tmp_path / policy
        result = esper(
            "train", *TINY, "--plugin", "policies.heuristic", "--policy", policy,
            "--set", "run.telemetry=[]", "--out", str(out),
        )  # fmt: skip
        one_line_exit_2(result, f"run.policy: {policy!r} is not trainable; try --policy ppo")
        assert not out.exists()


@pytest.mark.slow
def test_resuming_a_checkpoint_whose_blueprint_is_not_registered(
    invoke: Invoke, tmp_path: Path
) -> None:
    from esper_core.run.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    interrupted = esper_here(
        invoke,
        "run", *TINY, "--max-epochs", "6",
        "--set", 'run.telemetry=["interrupter"]', "--set", "telemetry.interrupter.at_epoch=1",
        "--out", str(run),
    )  # fmt: skip
    assert interrupted.returncode == 130, interrupted.stderr
    checkpoint = load_checkpoint(run / "checkpoint.pt")
    del checkpoint["format"]  # save_checkpoint writes it (and a fresh content digest)
    renamed = 0
    for key, value in checkpoint["envs"][0]["model"].items():
        if key.endswith("_extra_state") and value["state"]["stage"] != "DORMANT":
            value["state"]["blueprint"] = "cnn/uninstalled"
            renamed += 1
    assert renamed, "the scripted policy germinated in epoch 0"
    metadata = json.loads((run / "checkpoint.json").read_text())
    save_checkpoint(run / "checkpoint.pt", checkpoint, metadata)
    result = esper_here(
        invoke, "run", "--plugin", FAKE_COMPONENTS[1], "--quiet", "--resume", str(run)
    )
    one_line_exit_2(result, "blueprint 'cnn/uninstalled' is not registered for cnn hosts")


@pytest.mark.slow
@pytest.mark.parametrize("other", ["faulty"])
def test_a_ppo_checkpoint_of_another_task(invoke: Invoke, tmp_path: Path, other: str) -> None:
    ppo = ["--plugin", "policies.ppo", "--policy", "ppo"]
    trained = esper_here(
        invoke,
        "train", *TINY, *ppo, "--set", "run.telemetry=[]", "--max-epochs", "2",
        "--updates", "1", "--out", str(tmp_path / "ppo"),
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    # The faulty task has the tiny task's host, so the action vocabulary and the feature
    # layout match: only the task name tells the policy's observations apart.
    result = esper_here(
        invoke,
        "run", *TINY, "--plugin", "policies.ppo", "--task", other,
        "--policy", f"ppo:{tmp_path / 'ppo'}", "--set", "run.telemetry=[]",
        "--max-epochs", "2", "--out", str(tmp_path / "eval"),
    )  # fmt: skip
    one_line_exit_2(result, f"trained on task 'tiny', this run's task is '{other}'")
    assert not (tmp_path / "eval" / "summary.json").exists()
