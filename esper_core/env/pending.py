"""Device-side results read in one host synchronisation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from attrs import frozen


@frozen
class Pending:
    """Device-side numbers plus how to read them once they reach the host.

    :func:`fetch` moves the tensors of several pending results to the host in ONE
    transfer, which is how an epoch keeps to a single synchronisation.
    """

    tensor: torch.Tensor
    build: Callable[[list[float]], Any]


def fetch(*pendings: Pending) -> list[Any]:
    """Every pending result, read with one device -> host transfer per device.

    Envs on one device (the usual case) cost exactly one synchronisation, whatever
    their number; an executor that spreads envs over several GPUs pays one per GPU.
    """
    by_device: dict[torch.device, list[int]] = {}
    for i, p in enumerate(pendings):
        by_device.setdefault(p.tensor.device, []).append(i)
    values: list[list[float]] = [[] for _ in pendings]
    for indices in by_device.values():
        flat = torch.cat([pendings[i].tensor.reshape(-1).to(torch.float64) for i in indices])
        read = flat.tolist()  # the device -> host synchronisation
        start = 0
        for i in indices:
            n = pendings[i].tensor.numel()
            values[i] = read[start : start + n]
            start += n
    return [p.build(v) for p, v in zip(pendings, values)]
