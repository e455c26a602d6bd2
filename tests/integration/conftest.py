"""Fixtures of the integration tests."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable

import pytest
import torch

from esper_core.plugins import DISABLE_AUTOLOAD_ENV
from tests.plugin_set import REPO


@pytest.fixture
def run_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """``python PATH ARGS`` (PATH from the repository root) in this process, as a user runs
    it: autoloading on (the installed plugins found), as ``__main__``; what it printed. The
    script's work is what the tests check; a fresh interpreter importing torch and every
    plugin again took seconds a run. Torch's global generator, which the scripts seed, is
    left as it was."""

    def run(path: str, *args: str) -> str:
        script = REPO / path
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
        capsys.readouterr()
        with torch.random.fork_rng():
            runpy.run_path(str(script), run_name="__main__")
        return capsys.readouterr().out

    return run
