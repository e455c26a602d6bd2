"""``widen_factor=64`` of a small host stayed under the weights bound,
and every epoch after the growth then took minutes. The work a widened host does per
sample (at most the widening ratio squared times the host's as built) is bounded too:
``MAX_WIDEN_WORK``, refused before training in one line, on the CLI and in a Grower."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from esper_core.config_limits import MAX_WIDEN_WORK
from esper_core.errors import GrowerError
from esper_core.grow.grower import Grower
from tests.conftest import Invoke
from tests.plugin_set import first_party
from tests.reliability.cli_runs import failed_in_one_line
from tests.reliability.test_newer_surfaces_attack import _cnn, _problems, _specs_env


def test_a_widening_that_multiplies_the_work_past_the_bound_is_refused() -> None:
    from esper_core.components.policy import WidthGrowthSpec
    from esper_core.env.host_growth import check_specs

    host = _cnn()  # a small host: 64 x its weights is far under MAX_HOST_WEIGHTS
    (problem,) = _problems(host, at=0.5, factor=64.0)
    assert "up to 4096 x the FLOPs per sample" in problem, problem
    assert f"at most {MAX_WIDEN_WORK:g} x: choose a factor of at most 8" in problem
    check_specs([WidthGrowthSpec(at=0.5, factor=8.0)], _specs_env(host))  # 64 x: fine


def test_the_cli_refuses_it_before_training(invoke: Invoke, tmp_path: Path) -> None:
    line = failed_in_one_line(
        invoke(
            "run", "--policy", "static", "--quiet", "--max-epochs", "4",
            "--set", "run.telemetry=[]", "--out", f"{tmp_path}/r",
            "--set", "policies.static.widen_at=0.5", "--set", "policies.static.widen_factor=64",
        )
    )  # fmt: skip
    assert "the FLOPs per sample" in line, line


def test_a_grower_refuses_it_too() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with pytest.raises(GrowerError) as info:
        Grower(
            model,
            ["1"],
            example_input=torch.randn(2, 4),
            policy="static",
            max_epochs=8,
            overrides=["policies.static.widen_at=0.25", "policies.static.widen_factor=64"],
            plugins=first_party(),
        )
    assert "the FLOPs per sample" in str(info.value) and "\n" not in str(info.value)
