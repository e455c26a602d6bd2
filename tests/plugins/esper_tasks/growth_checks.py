"""The checks every host growth's tests share: the optimizer state carried across a
growth, and a run interrupted mid-ramp resumed to the last bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from esper_operators.depth import OPERATORS as DEPTH_OPERATORS
from esper_operators.width import OPERATORS as WIDTH_OPERATORS

from esper_core.config import load_config
from esper_core.env.optimizers import carry_state
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from esper_core.run.interrupts import Interrupted
from tests.integration.test_run import stable

# The operators an env's cost meter reads a host's sizes through.
OPERATORS = (*WIDTH_OPERATORS, *DEPTH_OPERATORS)


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


def grown_with_state_carried(
    model: Any, loss: Callable[[Any], torch.Tensor], grow: Callable[[Any], Any]
) -> tuple[Any, torch.optim.Optimizer]:
    """Two AdamW steps, then ``grow(model)`` at alpha 1 (so the new parameters get
    gradients at once) and a new optimizer the old state is carried into: asserts every old
    parameter kept its state exactly; returns the growth and the new optimizer."""
    old_opt = torch.optim.AdamW(model.host.parameters(), lr=0.01)
    for _ in range(2):
        old_opt.zero_grad()
        loss(model).backward()
        old_opt.step()
    saved = {p: {k: v.clone() for k, v in old_opt.state[p].items()} for p in old_opt.state}
    growth = grow(model)
    growth.set_alpha(1.0)
    opt = torch.optim.AdamW(model.host.parameters(), lr=0.01)
    carry_state(old_opt, opt)
    assert saved and all(
        torch.equal(opt.state[p][k], v) for p, state in saved.items() for k, v in state.items()
    )
    return growth, opt
