"""Plugin code that never returns (a reward stuck in a loop, a
blueprint's forward asleep forever) is stopped by the run's watchdog after
``run.epoch_timeout`` seconds: one line naming the epoch, the phase and the plugin,
exit code 2, the run recorded as failed, the last checkpoint intact and resumable."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.watchdog import RunTimeoutError, Watchdog
from tests.conftest import Invoke
from tests.plugin_set import FAKE_PLUGIN
from tests.plugins.esper_telemetry.helpers import tiny_config
from tests.reliability.cli_runs import failed_in_one_line
from tests.reliability.hostile_plugins import hostile_blueprint, hostile_reward
from tests.reliability.test_hostile_plugins import RUN, last_event
from tests.reliability.test_run_faults import assert_consistent

# From epoch 3 on, while the file HANG exists: spin (or sleep) forever.
SPIN = """
import os
while os.path.exists({hang!r}):
    pass
return super().compute(ctx)
"""
# Swallows every Exception, as careless plugin code does: the watchdog's is not one.
SWALLOW = """
import os, time
while os.path.exists({hang!r}):
    try:
        time.sleep(1000)
    except Exception:
        pass
return super().compute(ctx)
"""
LIMIT = ["--set", "run.epoch_timeout=0.5"]


@pytest.mark.parametrize("body", [SPIN, SWALLOW], ids=["spins", "sleeps-and-swallows"])
def test_a_reward_that_never_returns_is_stopped_and_the_run_resumes(
    invoke: Invoke, tmp_path: Path, body: str
) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    path = hostile_reward(tmp_path / "stuck_reward.py", body.format(hang=str(hang)))
    run_dir = tmp_path / "r"
    plugins = ["--plugin", path, "--policy", "scripted", "--reward", "hostile"]
    started = time.monotonic()
    result = invoke(*RUN, *LIMIT, *plugins, "--out", str(run_dir))
    took = time.monotonic() - started
    line = failed_in_one_line(result)
    assert took < 20, took
    assert "epoch 3 of episode 0, in the envs' epoch" in line, line
    assert "ran longer than run.epoch_timeout = 0.5 s" in line, line
    assert f"plugin file:{Path(path).resolve()} was running its compute" in line, line
    assert f"esper run --resume {run_dir}" in line, line
    assert last_event(run_dir)["status"] == "failed"
    assert_consistent(run_dir, checkpoint_epoch=2)

    hang.unlink()  # the plugin is fixed; the run continues from epoch 2
    resumed = invoke(
        "run", "--quiet", "--plugin", FAKE_PLUGIN, "--plugin", path, "--resume", str(run_dir)
    )
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and len(summary["episodes"]) == 1


def test_a_blueprint_asleep_in_its_forward_is_named(invoke: Invoke, tmp_path: Path) -> None:
    # Asleep in training only (the check at first use runs in eval mode): a blocking call,
    # which the watchdog's signal wakes.
    forward = """
        import time
        if self.training:
            time.sleep(1000)
        return x + self.conv(x)
    """
    path = hostile_blueprint(tmp_path / "asleep.py", forward=forward)
    run_dir = tmp_path / "r"
    result = invoke(
        *RUN, *LIMIT, "--plugin", path, "--policy", "germinate_first", "--reward", "acc_delta",
        "--out", str(run_dir),
    )  # fmt: skip
    line = failed_in_one_line(result)
    assert f"plugin file:{Path(path).resolve()} was running its forward" in line, line
    assert "No checkpoint was written yet" in line or "--resume" in line, line
    assert last_event(run_dir)["status"] == "failed"


def test_the_library_api_in_a_worker_thread_is_stopped_too(tmp_path: Path) -> None:
    # Not the main thread: no signal handler can be installed, the exception is set on
    # the run's thread instead.
    hang = tmp_path / "hang"
    hang.touch()
    path = hostile_reward(tmp_path / "stuck.py", SPIN.format(hang=str(hang)))
    pm = PluginManager(extra=[FAKE_PLUGIN, path], autoload=False)
    config = tiny_config([], "run.reward=hostile", "env.max_epochs=6", "run.epoch_timeout=0.5")
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            api.run(config, pm, run_dir=tmp_path / "r", quiet=True, notify=lambda _m: None)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(30)
    hang.unlink()  # let a run the watchdog missed end
    worker.join(30)
    (error,) = outcome
    assert isinstance(error, RunTimeoutError), error
    assert "was running its compute" in str(error)


def test_a_resumed_run_may_raise_its_timeout(invoke: Invoke, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    plugins = ["--policy", "scripted", "--reward", "acc_delta"]
    first = invoke(*RUN, *plugins, "--episodes", "1", "--out", str(run_dir))
    assert first.exit_code == 0, first.output
    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace("epoch_timeout = 3600.0", "epoch_timeout = 7200"))
    assert "epoch_timeout = 7200" in config.read_text()
    resumed = invoke(
        "run", "--quiet", "--plugin", FAKE_PLUGIN, "--resume", str(run_dir), "--episodes", "2"
    )
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)


@pytest.mark.parametrize("value", ["-1", "1e9", "nan", "inf"])
def test_the_timeout_is_bounded(value: str) -> None:
    with pytest.raises(ConfigError, match=r"run\.epoch_timeout"):
        load_config(None, [f"run.epoch_timeout={value}"])


def test_the_watchdog_is_quiet_when_units_end_in_time() -> None:
    with Watchdog(0.2) as watchdog:
        for _ in range(5):
            with watchdog.watching("unit"):
                time.sleep(0.01)
        time.sleep(0.4)  # disarmed between units: nothing fires
    assert watchdog.fired is None


def test_an_unarmed_watchdog_starts_no_thread() -> None:
    before = threading.active_count()
    with Watchdog(0) as watchdog, watchdog.watching("unit"):
        assert threading.active_count() == before
