"""Devices are ``torch.device`` values, with an index for CUDA, everywhere past the config."""

from __future__ import annotations

import torch


def canonical_device(device: torch.device | str) -> torch.device:
    """``device`` as a ``torch.device``; a bare ``cuda`` becomes the current CUDA device.

    Two names of one GPU (``cuda`` and ``cuda:0``) must compare equal: executors group
    envs, streams and copies by device.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
