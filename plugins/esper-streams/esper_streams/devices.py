"""Device lists of a run, parsed once into ``torch.device`` values and checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from esper_core import ExecutorContext
from esper_core.errors import ConfigError


def run_devices(context: ExecutorContext | None) -> list[Any]:
    """``run.devices`` (or ``[run.device]`` when it is empty) as checked ``torch.device`` values."""
    context = context or ExecutorContext()
    names: Sequence[str] = context.devices or [context.device]
    field = "run.devices" if context.devices else "run.device"
    return [parse_device(name, field) for name in names]


def parse_device(name: Any, field: str) -> Any:
    """A ``torch.device`` that exists on this machine; ``cuda`` means the current CUDA device."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError([f"{field}: {name!r} is not a device ({exc})"]) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                [
                    f"{field}: {name!r} needs CUDA, but this machine (or this torch build) has no CUDA "
                    "device; use --device cpu"
                ]
            )
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= count:
            raise ConfigError(
                [f"{field}: {name!r} does not exist; this machine has {count} CUDA device(s)"]
            )
        device = torch.device("cuda", index)
    elif device.type != "cpu":
        raise ConfigError(
            [f"{field}: {name!r}: the streams and distributed executors run on cpu or cuda devices"]
        )
    return device


def check_one_type(devices: Sequence[Any], field: str) -> None:
    """Envs of one run share a device type: CUDA streams and CPU work do not mix."""
    types = sorted({d.type for d in devices})
    if len(types) > 1:
        raise ConfigError(
            [
                f"{field}: mixes {' and '.join(types)} devices; place all envs on CUDA devices or all on cpu"
            ]
        )
