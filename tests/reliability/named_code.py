"""Functions a tampered run directory names, recording that they were called (they must not be)."""

from __future__ import annotations

from typing import Any

CALLED: list[str] = []


def model_it_must_not_build() -> Any:
    CALLED.append("model")
    raise RuntimeError("the code a config.toml named was run")


def data_it_must_not_load() -> Any:
    CALLED.append("data")
    raise RuntimeError("the code a config.toml named was run")
