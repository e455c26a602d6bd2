"""The bounds every numeric config field is checked against, and the device check."""

from __future__ import annotations

import os
from typing import Any


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# Upper bounds of the numeric fields: far beyond any sensible setting, low enough that
# no value runs forever, allocates without bound or overflows where torch takes it.
MAX_SEED = 2**32 - 1  # derived seeds (seed + env, seed x 1_000_003 + n) stay in int64
MAX_EPOCHS = 100_000  # any count or interval of epochs, updates or episodes
MAX_BATCH = 1_000_000
MAX_ENVS = 1024
MAX_THREADS = min(1024, 4 * _usable_cpus())  # beyond, threads only thrash; huge counts segfault
MAX_HISTORY = 1000  # history entries become observation features and buffers
MAX_LR = 100.0
MAX_FACTOR = 1000.0  # multipliers, ratios and steepness
MAX_POINTS = 100.0  # accuracy is in points, 0..100


def check_device(value: Any) -> str | None:
    if value is None:
        return None
    kind, _, index = str(value).partition(":")
    if kind not in ("cpu", "cuda", "mps", "xpu") or (index and not index.isdigit()):
        return f'expected a device such as "cpu", "cuda" or "cuda:1", got "{value}"'
    return None
