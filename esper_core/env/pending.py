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
    flat = torch.cat([p.tensor.reshape(-1).to(torch.float64) for p in pendings])
    values = flat.tolist()  # the one device -> host synchronisation
    out, start = [], 0
    for p in pendings:
        n = p.tensor.numel()
        out.append(p.build(values[start : start + n]))
        start += n
    return out
