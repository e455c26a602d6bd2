"""``run.threads`` (1 by default) is applied by a run and by the Gymnasium adapter,
whatever torch's thread count was before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api

TINY = {"task": "tiny", "policy": "scripted", "reward": "acc_delta", "telemetry": []}


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _pm() -> PluginManager:
    return PluginManager(extra=["tests.fake_plugin"], autoload=False)


def test_a_run_takes_the_configured_thread_count(two_threads: None, tmp_path: Path) -> None:
    config = load_config(extra={"run": TINY, "env": {"max_epochs": 1}})
    assert config.run.threads == 1
    api.run(config, _pm(), run_dir=tmp_path / "r", quiet=True, notify=lambda _m: None)
    assert torch.get_num_threads() == 1


def test_the_gym_adapter_takes_the_configured_thread_count(two_threads: None) -> None:
    pytest.importorskip("gymnasium")
    from esper_core.env.gym import make_env

    make_env(load_config(extra={"run": TINY}), _pm())
    assert torch.get_num_threads() == 1
