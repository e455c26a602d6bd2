"""Plugin code that ends the process, returns the wrong
type, a non-finite reward or tensors of the wrong dtype ends the run with one line naming
the plugin and what it did, exit code 2, a run recorded as failed and the last checkpoint
intact; `esper blueprints check` reports each as FAIL."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from esper_core.errors import PluginError
from esper_core.plugins import PluginManager
from esper_core.run import api
from tests.conftest import Invoke
from tests.plugin_set import FAKE_PLUGIN
from tests.plugins.esper_telemetry.helpers import tiny_config
from tests.reliability.cli_runs import failed_in_one_line
from tests.reliability.hostile_plugins import hostile_blueprint, hostile_reward
from tests.reliability.test_run_faults import assert_consistent

RUN = [
    "run",
    "--quiet",
    "--plugin",
    FAKE_PLUGIN,
    "--task",
    "tiny",
    "--max-epochs",
    "6",
    "--set",
    'run.telemetry=["jsonl"]',
    "--set",
    "run.checkpoint_every=2",
    "--set",
    "lifecycle.min_training_epochs=2",
]

REWARDS = {
    "sys.exit": ("sys.exit(0)", "called sys.exit(0) in its compute"),
    "str": ('return "1.0"', "returned a str from compute at epoch 3"),
    "nan": ("return RewardBreakdown.of(delta=math.nan)", "non-finite reward (total = nan)"),
    "inf": (
        'return RewardBreakdown(total=1.0, components={"delta": math.inf})',
        "non-finite reward (delta = inf)",
    ),
    "component": (
        'return RewardBreakdown(total=1.0, components={"delta": "high"})',
        "whose delta is a str",
    ),
}


def last_event(run_dir: Path) -> dict:  # type: ignore[type-arg]
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return json.loads(lines[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("fault", sorted(REWARDS))
def test_a_hostile_reward_ends_the_run_in_one_line_naming_it(
    invoke: Invoke, tmp_path: Path, fault: str
) -> None:
    body, expected = REWARDS[fault]
    path = hostile_reward(tmp_path / "hostile_reward.py", body)
    run_dir = tmp_path / "r"
    result = invoke(
        *RUN, "--plugin", path, "--policy", "scripted", "--reward", "hostile", "--out", str(run_dir)
    )
    line = failed_in_one_line(result)
    assert "hostile" in line and expected in line
    assert last_event(run_dir)["status"] == "failed"
    assert_consistent(run_dir, checkpoint_epoch=2)


def test_a_blueprint_ending_the_process_in_training_is_named(
    invoke: Invoke, tmp_path: Path
) -> None:
    # The check at first use runs in eval mode: this forward passes it, then exits in training.
    forward = """
        if self.training:
            sys.exit(3)
        return x + self.conv(x)
    """
    path = hostile_blueprint(tmp_path / "exits.py", forward=forward)
    run_dir = tmp_path / "r"
    result = invoke(
        *RUN, "--plugin", path, "--policy", "germinate_first", "--reward", "acc_delta",
        "--out", str(run_dir),
    )  # fmt: skip
    line = failed_in_one_line(result)
    assert f"plugin file:{Path(path).resolve()} called sys.exit(3) in its forward" in line
    assert last_event(run_dir)["status"] == "failed"


def test_a_float64_blueprint_stops_the_run_naming_the_blueprint(tmp_path: Path) -> None:
    path = hostile_blueprint(tmp_path / "doubles.py", build="return Seed(channels).double()")
    pm = PluginManager(extra=[FAKE_PLUGIN, path], autoload=False)
    config = tiny_config([], "run.policy=germinate_first", "env.max_epochs=3")
    with pytest.raises(PluginError) as info:
        api.run(config, pm, run_dir=tmp_path / "r", quiet=True, notify=lambda _m: None)
    message = str(info.value)
    assert message.startswith("blueprint cnn/aaa_hostile of plugin 'file:"), message
    assert "is float64, but the host computes in float32" in message
    assert "tasks." not in message  # it used to blame the task plugins


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"forward": "sys.exit(0)"},
            "its forward, on an input of shape [2, 64, 5, 5], called sys.exit(0)",
        ),
        ({"build": "sys.exit(0)"}, "its factory called sys.exit(0)"),
        ({"build": "return Seed(channels).double()"}, "is float64"),
        ({"build": "return Seed(channels).double()", "identity": False}, "is float64"),
        ({"forward": "return (x + self.conv(x)).double()"}, "returns float64 for a float32 input"),
    ],
)
def test_blueprints_check_fails_hostile_blueprints(
    invoke: Invoke,
    tmp_path: Path,
    options: dict,
    expected: str,  # type: ignore[type-arg]
) -> None:
    path = hostile_blueprint(tmp_path / "hostile.py", **options)
    result = invoke("blueprints", "check", "aaa_hostile", "--plugin", path)
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith("FAIL cnn/aaa_hostile") and expected in line, line


def test_the_plugins_own_function_is_named_when_a_library_wraps_sys_exit(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some libraries replace sys.exit with a Python wrapper; its frame is then the
    # innermost one, yet the message must name the plugin's function.
    library = {"__name__": "somelib", "real_exit": sys.exit}
    exec("def wrapped_exit(code=None):\n    real_exit(code)\n", library)
    monkeypatch.setattr(sys, "exit", library["wrapped_exit"])
    path = hostile_reward(tmp_path / "hostile_reward.py", "sys.exit(0)")
    run_dir = tmp_path / "r"
    result = invoke(
        *RUN, "--plugin", path, "--policy", "scripted", "--reward", "hostile", "--out", str(run_dir)
    )
    assert "called sys.exit(0) in its compute" in failed_in_one_line(result)
