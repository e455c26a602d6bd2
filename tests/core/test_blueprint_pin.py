"""`env.blueprints` pins the action space's blueprints: an installed blueprint package
changes neither a pinned run nor a resumed one, and a PPO checkpoint trained on another set
says how to pin its set."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.errors import ConfigError
from esper_core.run.resolve import resolve
from esper_core.run.run_dir import load_run_config, prepare_run_dir
from tests.plugin_set import plugin_manager

FIRST_PARTY_CNN = [
    "cnn/attention",
    "cnn/bottleneck",
    "cnn/conv_heavy",
    "cnn/conv_light",
    "cnn/conv_small",
    "cnn/depthwise",
    "cnn/noop",
    "cnn/norm",
]


def test_unset_means_every_installed_blueprint_and_the_resolved_list_is_stored() -> None:
    config = resolve(load_config(), plugin_manager()).config
    assert config.env.blueprints == FIRST_PARTY_CNN
    with_example = resolve(load_config(), plugin_manager("blueprints.example")).config
    assert with_example.env.blueprints == sorted([*FIRST_PARTY_CNN, "cnn/dilated"])


def test_a_pinned_set_ignores_newly_installed_blueprints() -> None:
    pinned = load_config(overrides=['env.blueprints=["conv_heavy", "cnn/conv_light"]'])
    resolved = resolve(pinned, plugin_manager("blueprints.example"))
    assert [bp.key for bp in resolved.blueprints] == ["cnn/conv_heavy", "cnn/conv_light"]
    assert resolved.config.env.blueprints == ["cnn/conv_heavy", "cnn/conv_light"]


def test_an_unknown_pinned_blueprint_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match=r"env\.blueprints: 'cnn/dilated' not installed for cnn"):
        resolve(load_config(overrides=['env.blueprints=["cnn/dilated"]']), plugin_manager())


def test_a_run_directory_keeps_its_blueprints_when_a_package_is_installed(tmp_path: Path) -> None:
    """Resume reads config.toml: the set resolved when the run started, not today's."""
    started = resolve(load_config(), plugin_manager()).config
    prepare_run_dir(tmp_path / "run", started, resume=False)
    stored = load_run_config(tmp_path / "run")
    later = resolve(stored, plugin_manager("blueprints.example"))
    assert [bp.key for bp in later.blueprints] == FIRST_PARTY_CNN


def test_a_ppo_checkpoint_of_another_set_names_the_pin_that_fits() -> None:
    pytest.importorskip("esper_tamiyo_ppo")
    from esper_tamiyo_ppo.compat import check_compatible, space_to_dict

    from esper_core.errors import CheckpointError
    from esper_core.lifecycle.actions import ActionSpace

    trained = ActionSpace(("r0c0",), ("cnn/a", "cnn/b"), ("linear_add",), (3,), (1.0,))
    now = ActionSpace(("r0c0",), ("cnn/a", "cnn/b", "cnn/new"), ("linear_add",), (3,), (1.0,))
    state = {"kind": "esper_tamiyo_ppo", "version": 1, "space": space_to_dict(trained)}
    state |= {"feature_dim": 4, "history_length": 5}
    with pytest.raises(CheckpointError) as info:
        check_compatible(state, now, 4, "checkpoint x.pt", "digits")
    assert 'add --set \'env.blueprints=["cnn/a","cnn/b"]\'' in str(info.value)
