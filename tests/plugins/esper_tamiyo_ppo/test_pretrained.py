"""The shipped ``ppo:pretrained``: a small slots checkpoint inside the plugin package,
shipped as package data, that loads and acts legally on hosts of 1, 3 and 4 slots, with
a blueprint package installed after training, through ``esper run`` and through the
Grower on a user's own model."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from esper_example_plugin.blueprints import DILATED
from esper_tamiyo_ppo.compat import pretrained_path, resolve_checkpoint_path
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.policy import PPOPolicy
from esper_tamiyo_ppo.pretrained import KEPT, slim_policy_state

from esper_core.components.blueprint import Blueprint
from esper_core.config import load_config
from esper_core.env.env import MorphogeneticEnv
from esper_core.errors import CheckpointError
from esper_core.grow.grower import Grower
from esper_core.lifecycle.actions import refusal_reason
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.resolve import policy_context
from tests.fakes import BLUEPRINTS, AccuracyDeltaReward, TinyTask, TinyTaskOptions
from tests.integration.own_model_helpers import grower_kwargs, train_one_epoch
from tests.plugin_set import plugin_manager
from tests.plugins.esper_tasks.own_data import small_cnn, splits

PLUGIN = Path(__file__).parents[3] / "plugins" / "esper-tamiyo-ppo"


def test_ppo_pretrained_names_a_small_slots_checkpoint_inside_the_package() -> None:
    path = resolve_checkpoint_path("pretrained")
    assert path == pretrained_path()
    assert path == Path(str(resources.files("esper_tamiyo_ppo"))) / "pretrained" / "checkpoint.pt"
    assert path.stat().st_size < 512 * 1024
    state = load_checkpoint(path)["policy"]
    assert state["options"]["network"] == "slots" and state["options"]["init_from"] == ""
    assert set(state) <= set(KEPT)  # no optimiser, buffer or generators: acting only
    # How it was trained is written down next to it, and an install ships both.
    assert (path.parent / "PRETRAINED.md").is_file()
    pyproject = tomllib.loads((PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))
    data = pyproject["tool"]["setuptools"]["package-data"]["esper_tamiyo_ppo"]
    assert {"pretrained/checkpoint.pt", "pretrained/PRETRAINED.md"} <= set(data)


def test_only_a_slots_state_can_be_shipped() -> None:
    with pytest.raises(CheckpointError, match="only a slots checkpoint"):
        slim_policy_state({"options": {"network": "flat"}})


def _env(blocks: int, blueprints: Sequence[Blueprint]) -> MorphogeneticEnv:
    """A tiny host of ``blocks`` slots under the default lifecycle (the pretrained's)."""
    config = load_config(extra={"run": {"telemetry": []}, "env": {"max_epochs": 6}})
    task = TinyTask(TinyTaskOptions(blocks=blocks))
    return MorphogeneticEnv(task, AccuracyDeltaReward(), blueprints, config, 0, "cpu")


@pytest.mark.parametrize(
    ("blocks", "package"), [(1, False), (3, False), (4, False), (1, True), (3, True), (4, True)]
)
def test_the_pretrained_policy_acts_legally_on_1_3_and_4_slots_and_a_new_package(
    blocks: int, package: bool
) -> None:
    blueprints = (*BLUEPRINTS, DILATED) if package else BLUEPRINTS
    env = _env(blocks, blueprints)
    observation = env.reset(0)
    assert len(env.space.slot_ids) == blocks
    assert ("cnn/dilated" in env.space.blueprints) == package
    context = policy_context(env.config, [env], "tiny", "pretrained")
    policy = PPOPolicy(PPOOptions(), context)  # the checkpoint's network options win
    assert policy.options.network == "slots"
    for _ in range(env.max_epochs):
        (action,) = policy.act([observation])
        assert refusal_reason(action, observation.masks, env.space) is None
        result = env.step(action)
        assert result.refused is None
        observation = result.observation


def test_esper_run_with_ppo_pretrained_on_digits_hosts_of_1_and_3_slots(tmp_path: Path) -> None:
    from esper_cli.main import build_cli

    group, _ = build_cli()
    common = ["run", "--task", "digits", "--policy", "ppo:pretrained", "--max-epochs", "3"]
    common += ["--set", "run.telemetry=[]", "--set", "env.max_batches=2", "--json"]
    for name, sets, extra in (
        ("one", ["--set", "tasks.digits.preset=impaired"], ()),
        ("three", ["--set", "tasks.digits.preset=small"], ("blueprints.example",)),
    ):
        result = CliRunner().invoke(
            group,
            [*common, *sets, "--out", str(tmp_path / name)],
            obj={"pm": plugin_manager(*extra)},
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["episodes_completed"] == 1


def test_the_grower_grows_a_users_model_with_ppo_pretrained() -> None:
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train, val, _ = splits()
    batches = lambda d: [d[i : i + 16] for i in range(0, len(d), 16)]  # noqa: E731
    grower = Grower(
        model,
        ["0", "2"],
        example_input=train[0:16][0],
        policy="ppo:pretrained",
        optimizer=opt,
        **grower_kwargs(max_epochs=4),
    )
    before = sum(p.numel() for p in model.parameters())
    actions = []
    for _ in range(3):
        train_one_epoch(model, opt, batches(train))
        result = grower.end_epoch(batches(val))
        assert result.refused is None  # the policy's every action is legal
        assert grower.decision is not None and "PPO greedy: probability" in grower.decision.reason
        actions.append(grower.decision.action)
    assert grower.epoch == 3
    # The shipped policy widens a host early (docs/results/ppo-suite.md); while the
    # widening ramps its decision says so.
    assert "WIDEN host x2" in actions
    assert sum(p.numel() for p in model.parameters()) > before
