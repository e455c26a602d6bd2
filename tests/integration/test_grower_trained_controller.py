"""A controller for your own model: a PPO policy trained with
``esper train --task dataset`` on the user's model, data and slots is accepted by the
Grower in the user's loop; a policy of another task is refused with a command that
trains one for the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from esper_core.config import load_config
from esper_core.errors import CheckpointError
from esper_core.grow.grower import Grower
from esper_core.plugins import PluginManager
from esper_core.run import api
from tests.integration.own_model_helpers import grower_kwargs, train_one_epoch
from tests.plugin_set import plugin_manager
from tests.plugins.esper_tasks.own_data import small_cnn, splits

MODULE = "tests.plugins.esper_tasks.own_data"
SLOTS = ["0", "2"]


def _train_ppo(pm: PluginManager, run_dir: Path, task: list[str]) -> Path:
    config = load_config(
        overrides=[
            *task,
            "run.policy=ppo",
            "run.telemetry=[]",
            "run.quiet=true",
            "env.max_epochs=3",
            "train.updates=1",
            "train.eval_every=0",
            "policies.ppo.hidden_size=8",
            "policies.ppo.rollout_episodes=1",
        ]
    )
    api.train(config, pm, run_dir=run_dir, quiet=True, notify=lambda _m: None)
    return run_dir


DATASET = [
    "run.task=dataset",
    f"tasks.dataset.model={MODULE}:small_cnn",
    f"tasks.dataset.data={MODULE}:splits",
    f"tasks.dataset.slots={SLOTS!r}".replace("'", '"'),
    "tasks.dataset.batch_size=16",
]


def _loaders() -> tuple[
    list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]
]:
    train, val, _ = splits()
    batch = lambda d: [d[i : i + 16] for i in range(0, len(d), 16)]  # noqa: E731
    return batch(train), batch(val)


def test_a_policy_trained_on_the_users_model_through_tasks_dataset_grows_it_in_the_loop(
    tmp_path: Path,
) -> None:
    # The plugins the Grower loads too (the fake plugin's blueprints would widen the CLI's
    # vocabulary, and the Grower would rightly refuse the policy).
    run_dir = _train_ppo(plugin_manager(), tmp_path / "ppo", DATASET)
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train, val = _loaders()
    grower = Grower(
        model,
        SLOTS,
        example_input=train[0][0],
        policy=f"ppo:{run_dir}",
        optimizer=opt,
        **grower_kwargs(max_epochs=3),
    )
    for _ in range(2):
        train_one_epoch(model, opt, train)
        grower.end_epoch(val)
    assert grower.decision is not None and grower.epoch == 2


def test_a_policy_of_another_task_is_refused_with_a_command_for_the_users_model(
    pm: PluginManager, tmp_path: Path
) -> None:
    run_dir = _train_ppo(pm, tmp_path / "ppo", ["run.task=tiny"])
    train, _ = _loaders()
    with pytest.raises(CheckpointError) as info:
        Grower(
            small_cnn(),
            SLOTS,
            example_input=train[0][0],
            policy=f"ppo:{run_dir}",
            **grower_kwargs(max_epochs=3),
        )
    message = str(info.value)
    assert "\n" not in message and "trained on task 'tiny'" in message
    assert "--task dataset" in message and "--task loop" not in message
    assert 'tasks.dataset.slots=["0", "2"]' in message
