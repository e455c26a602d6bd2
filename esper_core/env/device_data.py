"""A task's data kept once per device: loaded on CPU once, copied once to each device.

The cache belongs to the task instance, so every env on one device shares the same
tensors and nothing is global.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from esper_core.components.task import TaskData
from esper_core.env.data import Split, TensorSplit, canonical_device


def move_task_data(data: TaskData, device: torch.device | str) -> TaskData:
    """``data`` with every :class:`TensorSplit` on ``device``; other datasets stay as they are."""

    def move(split: Split) -> Split:
        return split.to(device) if isinstance(split, TensorSplit) else split

    return TaskData(train=move(data.train), val=move(data.val), test=move(data.test))


def cached_on_device(
    cache: dict[str, TaskData], device: torch.device | str, load_cpu: Callable[[], TaskData]
) -> TaskData:
    """Load a task's data once on CPU and copy it once per device (``cache`` is the
    task's own)."""
    key = str(canonical_device(device))
    if key not in cache:
        if "cpu" not in cache:
            cache["cpu"] = move_task_data(load_cpu(), "cpu")
        cache[key] = move_task_data(cache["cpu"], key)
    return cache[key]
