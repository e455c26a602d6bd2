"""Width growth of a user's model through ``tasks.dataset`` (the
documented way to train a widening controller for one's own model) widens its layer
pairs, as a Grower does; a model with no pair that can widen is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper_core.errors import ConfigError
from esper_core.plugins import PluginManager
from tests.plugins.esper_tasks.test_dataset_task import MODULE, _run

STATIC = ["run.policy=static", "env.max_epochs=4", "policies.static.widen_at=0.25"]


def test_a_static_widening_widens_the_users_layers(pm: PluginManager, tmp_path: Path) -> None:
    _run(pm, tmp_path, *STATIC)
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    (growth,) = written["host_growths"]
    assert growth["params_after"] > growth["params_before"]


def test_a_ppo_controller_may_widen_the_users_layers(pm: PluginManager, tmp_path: Path) -> None:
    from esper_core.config import load_config
    from esper_core.run.api import train
    from tests.plugins.esper_tasks.test_dataset_task import BASE

    overrides = [
        *BASE,
        f"tasks.dataset.data={MODULE}:splits",
        "run.policy=ppo",
        "policies.ppo.host_growth=widen",
        "train.updates=1",
    ]
    summary = train(load_config(overrides=overrides), pm, run_dir=tmp_path / "t", quiet=True)
    assert summary["episodes_completed"] >= 1


def test_a_model_without_a_layer_pair_is_refused_in_one_line(
    pm: PluginManager, tmp_path: Path
) -> None:
    model = [
        f"tasks.dataset.model={MODULE}:one_layer",
        'tasks.dataset.slots=["0"]',
        'tasks.dataset.topology="mlp"',
    ]
    with pytest.raises(ConfigError) as info:
        _run(pm, tmp_path, *STATIC, *model)
    message = str(info.value)
    assert "cannot grow in width" in message and "seeds instead" in message, message
    assert "\n" not in message
    assert not (tmp_path / "r").exists()
