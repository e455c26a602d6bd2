"""Copies of device tensors to the host that do not stall the device's queue.

The governor snapshots the host every few epochs; blocking ``.to("cpu")`` copies would
make the host wait once per tensor. Here every tensor is copied ``non_blocking`` into
page-locked memory and one event per device marks the end of the copies; the host waits
on it only when it reads the copy (a rollback or a checkpoint), usually long after the
copies have finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class HostCopy:
    """A nested dict of tensors copied to the host; read it through :meth:`get`."""

    def __init__(self, tree: Mapping[str, Any]) -> None:
        devices: set[torch.device] = set()
        self._tree = _copy(tree, devices)
        # One event per source device (a model lives on one) recorded after its copies.
        self._events = [_recorded_event(device) for device in sorted(devices, key=str)]

    def get(self) -> dict[str, Any]:
        """The copied tensors, once their copies have finished (one event wait per device)."""
        for event in self._events:
            event.synchronize()
        self._events = []
        return self._tree


def _copy(tree: Mapping[str, Any], devices: set[torch.device]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out[key] = _copy(value, devices)
        elif isinstance(value, torch.Tensor):
            out[key] = _to_host(value.detach(), devices)
        else:
            out[key] = value
    return out


def _to_host(tensor: torch.Tensor, devices: set[torch.device]) -> torch.Tensor:
    # Pinned memory for a GPU tensor: only from there is a device-to-host copy truly
    # asynchronous. The caching host allocator reuses the blocks of earlier snapshots,
    # and keeps a block from being reused while a copy into it is still queued.
    on_gpu = tensor.device.type == "cuda"
    host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=on_gpu)
    host.copy_(tensor, non_blocking=True)
    if on_gpu:
        devices.add(tensor.device)
    return host


def _recorded_event(device: torch.device) -> torch.cuda.Event:
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event
