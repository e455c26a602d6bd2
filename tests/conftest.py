"""Test-wide settings and the shared fixtures.

Tiny models run fastest on one thread, and with two pytest workers on a 2-core machine
more threads only oversubscribe the CPU. Plugin autoloading is off for the whole session
(and the subprocesses it starts), so no result depends on what else is installed: tests
name the plugins they load (tests/plugin_set.py); a test of entry-point discovery opts
in explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from esper_core.plugins import DISABLE_AUTOLOAD_ENV, PluginManager
from tests.plugin_set import FAKE_PLUGIN, FAKE_PLUGIN_FILE, plugin_manager

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def pytest_configure(config: pytest.Config) -> None:
    os.environ[DISABLE_AUTOLOAD_ENV] = "1"


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def fake_plugin() -> str:
    """The ``--plugin`` value that loads the fake components (tiny task, scripted policy, ...)."""
    return FAKE_PLUGIN


@pytest.fixture(scope="session")
def fake_plugin_file() -> Path:
    """The fake components' module as a file, for ``--plugin path/to/file.py``."""
    return FAKE_PLUGIN_FILE


@pytest.fixture(scope="module")
def pm() -> PluginManager:
    """The first-party plugins and the fake components."""
    return plugin_manager(FAKE_PLUGIN)


Invoke = Callable[..., Any]


@pytest.fixture
def invoke() -> Invoke:
    """Run ``esper ARGS`` in this process (click's CliRunner) with the first-party plugins;
    the fake components are loaded as a user would, with ``--plugin tests.fake_plugin``.
    Each test gets its own plugin manager, so what one test loads cannot leak into another."""
    from click.testing import CliRunner

    from esper_cli.main import build_cli

    group, cli_pm = build_cli(plugin_manager())
    runner = CliRunner()

    def call(*args: str, **kwargs: Any) -> Any:
        return runner.invoke(group, list(args), obj={"pm": cli_pm}, **kwargs)

    return call
