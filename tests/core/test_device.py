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


def test_module_to_on_the_cpu_is_module_to() -> None:
    from esper_core.env.device import module_to

    module = torch.nn.BatchNorm1d(3)
    moved = module_to(module, torch.device("cpu"), torch.float64)
    assert moved is module and module.weight.dtype == torch.float64


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_module_to_a_gpu_copies_parameters_and_every_buffer_without_a_sync() -> None:
    from esper_core.env.device import module_to

    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    module[1].register_buffer("extra", torch.arange(3.0), persistent=False)
    module[1].running_mean.add_(2.0)
    expected = [t.clone() for t in (*module.parameters(), *module.buffers())]
    torch.cuda.set_sync_debug_mode("error")
    try:
        module_to(module, torch.device("cuda", 0), torch.float32)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    got = [*module.parameters(), *module.buffers()]
    assert all(t.is_cuda for t in got)
    assert all(torch.equal(a, b.cpu()) for a, b in zip(expected, got, strict=True))
