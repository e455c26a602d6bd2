"""Mixed precision: the autocast dtype of each ``training.amp`` setting and where it runs."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from esper_core.errors import ConfigError

_DTYPES: dict[str, torch.dtype | None] = {
    "off": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``amp`` on ``device``; fp16 runs on CUDA only."""
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError(
            [
                f"training.amp: fp16 needs a CUDA device, this env runs on {device}; "
                "set training.amp to bf16 or off, or run on a CUDA device"
            ]
        )
    return _DTYPES[amp]


def autocast(
    dtype: torch.dtype | None, device: torch.device
) -> contextlib.AbstractContextManager[Any]:
    """Autocast to ``dtype`` on ``device``; nothing when ``dtype`` is None (amp off)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
