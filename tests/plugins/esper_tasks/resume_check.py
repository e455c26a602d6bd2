"""The resume check every host growth's tests share: a run interrupted mid-ramp and
resumed ends as the uninterrupted one did, to the last bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.interrupts import Interrupted
from tests.integration.test_run import stable


def assert_resumes_identically(
    pm: PluginManager, tmp_path: Path, base: list[str], reference: dict[str, Any], at_epoch: int = 2
) -> None:
    """``base`` (with ``run.checkpoint_every=1``) stopped after epoch ``at_epoch`` and resumed
    ends with ``reference``'s summary (the same run uninterrupted)."""
    cut = [*base, 'run.telemetry=["interrupter"]', f"telemetry.interrupter.at_epoch={at_epoch}"]
    with pytest.raises(Interrupted):
        run(load_config(overrides=cut), pm, run_dir=tmp_path / "cut", quiet=True)
    config = load_config(tmp_path / "cut" / "config.toml", ["run.telemetry=[]"])
    resumed = run(config, pm, run_dir=tmp_path / "cut", resume=True, quiet=True)
    assert stable(resumed) == stable(reference)
