"""The benchmarks' configs pass the same validation as a user's (no timing here: the
benchmarks measure, these tests only check that each one can start)."""

from __future__ import annotations

import argparse
from types import ModuleType

from esper_core.plugins import PluginManager
from esper_core.run.resolve import resolve
from tests.scripts import load_script


def _load(name: str) -> ModuleType:
    return load_script(f"benchmarks/{name}.py")


def test_telemetry_overhead_configs_resolve(pm: PluginManager) -> None:
    bench = _load("telemetry_overhead")
    args = argparse.Namespace(envs=2, epochs=2, seed=0, set=[])
    components = {"task": "digits", "policy": "heuristic", "reward": "pbrs"}
    for backends in ([], bench.BACKENDS):
        resolved = resolve(bench._config(components, backends, args), pm)
        assert [c.cls.name for c in resolved.telemetry] == backends
