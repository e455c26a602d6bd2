"""Devices a run names must exist on this machine, checked before anything is built.

The config only knows device *names* (``cuda:1``, ``mps``); whether this machine and this
torch build have such a device is known at run time, so it is checked here, once, for
``run.device`` and every entry of ``run.devices``. Without the check a missing device
fails later, inside torch, with a traceback.
"""

from __future__ import annotations

from typing import Any

from esper_core.config import RunConfig
from esper_core.errors import ConfigError


def check_devices(config: RunConfig) -> None:
    problems = [
        problem
        for field, name in [("run.device", config.run.device)]
        + [(f"run.devices[{i}]", d) for i, d in enumerate(config.run.devices)]
        if (problem := device_problem(name, field))
    ]
    if problems:
        raise ConfigError(problems)


def device_problem(name: str, field: str) -> str | None:
    """Why device ``name`` cannot be used here, or None."""
    import torch

    kind, _, index_text = str(name).partition(":")
    if kind == "cpu":
        return None
    count = _count(torch, kind)
    if count == 0:
        return (
            f"{field}: {name!r} needs a {kind.upper()} device, but this machine (or this torch "
            "build) has none; use --device cpu"
        )
    index = int(index_text) if index_text.isdigit() else 0
    if index >= count:
        return f"{field}: {name!r} does not exist; this machine has {count} {kind} device(s)"
    return None


def _count(torch: Any, kind: str) -> int:
    if kind == "cuda":
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return 1 if backend is not None and backend.is_available() else 0
    if kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0
    return 0  # a device type the config does not know is never available
