"""Runs survive faults: bad losses roll back, resource failures end with advice (one line
from the CLI's error boundary) and a consistent run directory, plugin exceptions name the
plugin."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from esper_core.config import load_config
from esper_core.errors import PluginError
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.checkpoint import load_checkpoint
from tests.plugin_set import FAKE_PLUGIN, plugin_manager, write_broken_plugin

BASE = [
    "run.task=faulty",
    "run.policy=scripted",
    "run.reward=acc_delta",
    "run.telemetry=[]",
    "lifecycle.min_training_epochs=2",
    "env.max_epochs=10",
    "run.checkpoint_every=2",
    "governor.min_history=2",
]


def run_cli(invoke: Any, run_dir: Path | None, *sets: str, plugins: tuple[str, ...] = ()) -> Any:
    """``esper run`` of the faulty task with BASE and ``sets``; ``run_dir`` None: the default."""
    args = ["run", "--quiet", "--plugin", FAKE_PLUGIN]
    for plugin in plugins:
        args += ["--plugin", plugin]
    for assignment in (*BASE, *sets):
        args += ["--set", assignment]
    if run_dir is not None:
        args += ["--out", str(run_dir)]
    return invoke(*args)


def one_line_error(result: Any) -> str:
    """The single stderr line of a run that failed with exit code 2 and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    message: str = lines[0]
    return message


def assert_consistent(run_dir: Path, checkpoint_epoch: int | None) -> None:
    """config.toml present, no temporary files, the checkpoint (if any) loads at a boundary."""
    names = {p.name for p in run_dir.iterdir()}
    assert "config.toml" in names
    assert not [n for n in names if n.endswith(".tmp")], names
    assert "summary.json" not in names
    if checkpoint_epoch is not None:
        assert load_checkpoint(run_dir / "checkpoint.pt")["epoch"] == checkpoint_epoch


@pytest.mark.parametrize("fault", ["nan", "inf", "explode"])
def test_bad_losses_roll_back_and_the_run_finishes(
    pm: PluginManager, tmp_path: Path, fault: str
) -> None:
    epochs = 3 if fault == "explode" else 1  # the statistical check needs 3 consecutive epochs
    config = load_config(
        overrides=[
            *BASE,
            f"tasks.faulty.fault={fault!r}".replace("'", '"'),
            "tasks.faulty.at_epoch=5",
            f"tasks.faulty.epochs={epochs}",
        ]
    )
    summary = run(config, pm, run_dir=tmp_path / "r", quiet=True)
    assert summary["status"] == "completed" and summary["rollbacks"] >= 1
    episode = summary["episodes"][0]
    assert episode["reward_components"]["governor_penalty"] <= -10.0
    assert episode["final_val_acc"] > 30.0, "the restored model should still work"


def test_out_of_memory_ends_with_advice_and_a_checkpoint(invoke: Any, tmp_path: Path) -> None:
    result = run_cli(invoke, tmp_path / "r", 'tasks.faulty.fault="oom"', "tasks.faulty.at_epoch=6")
    message = one_line_error(result)
    assert "out of device memory" in message and "env.batch_size" in message
    assert f"esper run --resume {tmp_path / 'r'}" in message
    assert_consistent(tmp_path / "r", checkpoint_epoch=4)


def test_dataloader_worker_crash_ends_with_advice(invoke: Any, tmp_path: Path) -> None:
    result = run_cli(
        invoke,
        tmp_path / "r",
        'tasks.faulty.fault="worker_crash"',
        "tasks.faulty.at_epoch=3",
        "env.num_workers=1",
    )
    message = one_line_error(result)
    assert "data-loading worker process died" in message and "env.num_workers=0" in message
    assert_consistent(tmp_path / "r", checkpoint_epoch=2)


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(
    invoke: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > 3:  # config.toml, checkpoint 1 (.pt, .json), then the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    result = run_cli(invoke, tmp_path / "r")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert "no space left" in one_line_error(result)
    assert_consistent(tmp_path / "r", checkpoint_epoch=2)


BROKEN_COMPONENTS = {
    "policy": ("act", "policies", "scripted"),
    "reward": ("compute", "rewards", "acc_delta"),
    "task": ("loss", "tasks", "faulty"),
}


@pytest.mark.parametrize("component", sorted(BROKEN_COMPONENTS))
def test_a_plugin_raising_at_run_time_is_named(invoke: Any, tmp_path: Path, component: str) -> None:
    method, kind, name = BROKEN_COMPONENTS[component]
    plugin = write_broken_plugin(
        tmp_path / f"broken_{component}.py", kind, name, method, f"broken {component}"
    )
    field = {"policies": "policy", "rewards": "reward", "tasks": "task"}[kind]
    # No --out: the CLI computes the default run directory, and the advice names it.
    sets = [f"run.{field}=broken", f"run.out_dir={str(tmp_path)!r}", 'run.name="r"']
    message = one_line_error(run_cli(invoke, None, *sets, plugins=(str(plugin),)))
    assert f"broken_{component}.py" in message and f"broken {component}" in message
    assert f"No checkpoint was written yet in {tmp_path / 'r'}" in message
    assert_consistent(tmp_path / "r", checkpoint_epoch=None)


HOOKS = ["tasks", "blueprints", "rewards", "policies", "telemetry", "executors"]


@pytest.mark.parametrize("kind", [*HOOKS, "commands"])
def test_a_plugin_raising_in_each_hook_is_named(tmp_path: Path, kind: str) -> None:
    arg = "cli" if kind == "commands" else "register"
    plugin = tmp_path / f"raising_{kind}.py"
    plugin.write_text(
        "from esper_core import hookimpl\n"
        f"@hookimpl\ndef esper_register_{kind}({arg}):\n    raise KeyError('oops')\n"
    )
    if kind == "commands":
        pm = PluginManager(autoload=False, extra=[str(plugin)])
        from esper_cli.main import cli

        with pytest.raises(
            PluginError, match=r"raising_commands\.py.*esper_register_commands.*KeyError"
        ):
            pm.add_commands(cli)
        return
    with pytest.raises(PluginError, match=rf"raising_{kind}\.py.*esper_register_{kind}.*KeyError"):
        PluginManager(autoload=False, extra=[str(plugin)])


def test_telemetry_backend_raising_is_disabled_and_the_run_finishes(tmp_path: Path) -> None:
    plugin = tmp_path / "bad_backend.py"
    plugin.write_text(
        "from attrs import define\nfrom esper_core import hookimpl\n"
        "@define\nclass O:\n    pass\n"
        "class Bad:\n    name = 'bad'\n    description = 'raises'\n    Options = O\n"
        "    def __init__(self, options, run_dir=None, quiet=False):\n        pass\n"
        "    def handle(self, events):\n        raise RuntimeError('a bug in the backend')\n"
        "@hookimpl\ndef esper_register_telemetry(register):\n    register(Bad)\n"
    )
    pm = plugin_manager(FAKE_PLUGIN, str(plugin))
    summary: dict[str, Any] = run(
        load_config(overrides=[*BASE, 'run.telemetry=["bad"]']),
        pm,
        run_dir=tmp_path / "r",
        quiet=True,
    )
    assert summary["status"] == "completed"
    # A bug disables the backend (an OSError, a failed write, would stop the run: see
    # test_records_kept.py); the summary names it.
    assert "a bug in the backend" in summary["telemetry_disabled"]["bad"]


def test_the_cpu_allocator_running_out_is_named_as_memory_not_a_plugin() -> None:
    # torch's CPU allocator raises a plain RuntimeError; it was blamed on every task plugin
    # of the package whose host ran out ("plugin tasks.charlm / tasks.cifar10 / ...").
    from esper_core.run.failures import ResourceError, explain

    try:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough memory: "
            "you tried to allocate 17179869184 bytes."
        )
    except RuntimeError as exc:
        explained = explain(exc, {"tasks.glyphs": __name__, "tasks.digits": __name__}, None, "run")
    assert isinstance(explained, ResourceError)
    assert str(explained).startswith("out of memory (") and "env.batch_size" in str(explained)
    assert "plugin" not in str(explained)
