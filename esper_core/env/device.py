"""Devices are ``torch.device`` values, with an index for CUDA, everywhere past the config."""

from __future__ import annotations

from typing import TypeVar

import torch

M = TypeVar("M", bound=torch.nn.Module)


def canonical_device(device: torch.device | str) -> torch.device:
    """``device`` as a ``torch.device``; a bare ``cuda`` becomes the current CUDA device.

    Two names of one GPU (``cuda`` and ``cuda:0``) must compare equal: executors group
    envs, streams and copies by device.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` without a host synchronisation: a CPU tensor bound for a
    GPU is pinned first, so its copy is queued on the current stream (a pageable copy
    waits for the GPU). The caching host allocator keeps the pinned block until the copy
    has run."""
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def module_to(module: M, device: torch.device, dtype: torch.dtype) -> M:
    """``module.to(device, dtype)`` that queues its CPU -> GPU copies on the current stream
    (see :func:`to_device`) instead of synchronising once per tensor: a seed is born
    between batches of an epoch that must not wait on the GPU."""
    if device.type != "cuda" or any(t.device.type != "cpu" for t in _tensors(module)):
        return module.to(device=device, dtype=dtype)
    # Cast on the CPU, pin, then give the module storage on the GPU and fill it.
    # Parameters and every buffer (a non-persistent one is not in the state_dict).
    module.to(dtype=dtype)
    pinned = [t.detach().pin_memory() for t in _tensors(module)]
    module.to_empty(device=device)
    with torch.no_grad():
        for t, source in zip(_tensors(module), pinned, strict=True):
            t.copy_(source, non_blocking=True)
    return module


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]
