"""Devices are torch.device values everywhere past the config, CUDA ones with an index."""

from __future__ import annotations

import pytest
import torch

from esper_core.env.device import canonical_device
from esper_core.run.executor import SerialExecutor
from esper_core.run.resolve import executor_context
from tests.fakes import make_env
from tests.plugins.esper_streams.helpers import make_config


def test_the_serial_executor_places_envs_on_device_values() -> None:
    placed = SerialExecutor(None, executor_context(make_config("run.device=cpu"))).env_devices(3)
    assert placed == [torch.device("cpu")] * 3
    assert all(isinstance(d, torch.device) for d in placed)
    assert SerialExecutor(None, None).env_devices(1) == [torch.device("cpu")]


def test_a_bare_cuda_names_the_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert canonical_device("cuda") == torch.device("cuda", 1)
    assert canonical_device(torch.device("cuda")) == torch.device("cuda", 1)
    assert canonical_device("cuda:0") == torch.device("cuda", 0)
    assert canonical_device("cpu") == torch.device("cpu")
    # A bare "cuda" and "cuda:1" name one GPU: they must compare equal once canonical.
    assert canonical_device("cuda") == canonical_device("cuda:1")


def test_the_env_holds_a_device_value() -> None:
    env = make_env()
    assert env.device == torch.device("cpu") and isinstance(env.device, torch.device)
