"""Every first-party component is built the one way, ``cls(options, context)``, and the
plugin author's API imports from ``esper_core`` alone without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import esper_core
from esper_core.config import load_config
from esper_core.run.resolve import (
    executor_context,
    reward_setup,
    task_context,
    telemetry_context,
)
from tests.plugin_set import plugin_manager

# Joining a process group needs the ranks of a launched job (tested in esper_streams).
NEEDS_A_JOB = {("executors", "distributed")}


def contexts(tmp_path: Path) -> dict[str, Any]:
    config = load_config()
    return {
        "tasks": task_context(config),
        "rewards": reward_setup(config),
        "executors": executor_context(config),
        "telemetry": telemetry_context(config, tmp_path, quiet=True),
    }


@pytest.mark.parametrize("kind", ["tasks", "rewards", "executors", "telemetry"])
def test_every_component_is_built_from_its_options_and_context(kind: str, tmp_path: Path) -> None:
    pm = plugin_manager()
    context = contexts(tmp_path)[kind]
    built = 0
    for name, cls in pm.registry(kind).items():
        if (kind, name) in NEEDS_A_JOB:
            continue
        component = cls(cls.Options(), context)
        assert component.name == name
        close = getattr(component, "close", None)
        if close is not None:
            close()
        built += 1
    assert built >= 2


def test_the_plugin_api_imports_from_esper_core_without_torch() -> None:
    # These import torch by nature: the observation, and the library API.
    with_torch = {"Observation", "Grower", "GrowthDecision", "host_from_module", "widenable_layers"}
    names = ", ".join(n for n in esper_core.__all__ if n not in with_torch)
    code = f"import sys; from esper_core import {names}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    for name in esper_core.__all__:
        assert getattr(esper_core, name) is not None
