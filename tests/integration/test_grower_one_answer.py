"""One model, one answer: the same user model, data and recipe give
the same run through the Grower in a plain loop and through ``esper run --task dataset``.

The user's module lives in the current directory, as a user's ``mymodel.py`` would (not
on ``sys.path``: the ``esper`` console script does not put the current directory there),
and the CLI finds it. The loop is written as docs/own-model.md writes it: the recipe's
optimizer over decayed and undecayed groups, its schedule as a ``LambdaLR`` over the
run's optimizer steps, the run's data order, ``clip_grad_norm_(model.parameters(), c)``
and validation in the CLI's evaluation batches. The two paths then run the same
arithmetic, so every epoch's validation numbers, every action and the final weights,
seeds included, are equal exactly, with clipping active and a seed grown by a fixed
schedule or by the heuristic.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from esper_core.config import load_config
from esper_core.grow.grower import Grower
from esper_core.recipe import Recipe, lr_factor
from esper_core.run.api import run
from esper_core.run.checkpoint import load_checkpoint
from tests.plugin_set import first_party, plugin_manager

SCHEDULE_PLUGIN = "esper_tamiyo_heuristic.schedule"
SEED, EPOCHS, BATCH, CLIP = 3, 6, 16, 0.5
EVAL_BATCH = 256  # tasks.dataset's evaluation batch size

USER_MODULE = """
import torch
from torch import nn
from torch.utils.data import TensorDataset


def build():
    return nn.Sequential(
        nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5)
    )


def splits():
    g = torch.Generator().manual_seed(0)
    centres = 0.6 * torch.randn(5, 12, generator=g)

    def split(n):
        y = torch.randint(0, 5, (n,), generator=g)
        return TensorDataset(centres[y] + torch.randn(n, 12, generator=g), y)

    return split(200), split(100), split(100)
"""

SGD = Recipe(
    optimizer="sgd", lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4, schedule="cosine"
)
ADAMW = Recipe(
    optimizer="adamw", lr=0.01, betas=(0.9, 0.95), weight_decay=0.1, schedule="cosine", warmup=0.1
)
# A fixed growth schedule: a residual MLP seed (the identity at birth, so it blends at
# once) germinates a quarter into the run, ramps over 3 epochs and is fossilized.
GROWS = [
    'policies.schedule.seeds=["residual@1"]',
    "policies.schedule.at=0.25",
    "policies.schedule.tempo=3",
]


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The user's ``mymodel.py`` in the current directory, which is not on sys.path."""
    name = f"mymodel_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield name
    sys.modules.pop(name, None)


def _cli(name: str, recipe: Recipe, policy: str, growth: list[str], out: Path) -> Any:
    training = [
        f'training.optimizer="{recipe.optimizer}"',
        f"training.lr={recipe.lr}",
        f"training.momentum={recipe.momentum}",
        f"training.nesterov={str(recipe.nesterov).lower()}",
        f"training.betas={list(recipe.betas)}",
        f"training.weight_decay={recipe.weight_decay}",
        f'training.schedule="{recipe.schedule}"',
        f"training.warmup={recipe.warmup}",
        f"training.grad_clip={CLIP}",
    ]
    config = load_config(
        overrides=[
            "run.task=dataset",
            f"tasks.dataset.model={name}:build",
            f"tasks.dataset.data={name}:splits",
            'tasks.dataset.slots=["1", "3"]',
            "tasks.dataset.topology=mlp",
            f"tasks.dataset.batch_size={BATCH}",
            f"run.policy={policy}",
            f"run.seed={SEED}",
            'run.telemetry=["jsonl"]',
            f"env.max_epochs={EPOCHS}",
            *training,
            *growth,
        ]
    )
    run(config, plugin_manager(SCHEDULE_PLUGIN), run_dir=out, quiet=True)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    epochs = [
        (e["val_loss"], e["val_acc"], e["action"]) for e in events if e["kind"] == "epoch_completed"
    ]
    weights = load_checkpoint(out / "checkpoint.pt")["envs"][0]["model"]
    return epochs, weights


def _optimizer(model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """The recipe's optimizer: weight decay on matrices, not on biases and norms."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    plain = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]
    if recipe.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas)
    return torch.optim.SGD(groups, lr=recipe.lr, momentum=recipe.momentum, nesterov=True)


def _loop(name: str, recipe: Recipe, policy: str, growth: list[str]) -> Any:
    mymodel = importlib.import_module(name)
    torch.manual_seed(SEED)  # the run seeds the factory's initialisation
    model = mymodel.build()
    train, val, _ = mymodel.splits()
    x, y = train.tensors
    opt = _optimizer(model, recipe)
    grower = Grower(
        model,
        ["1", "3"],
        example_input=x[:2],
        policy=policy,
        optimizer=opt,
        max_epochs=EPOCHS,
        seed=SEED,
        val_data=DataLoader(val, batch_size=EVAL_BATCH),  # the run measures the untrained model
        overrides=growth,
        plugins=[*first_party(), SCHEDULE_PLUGIN],
    )
    steps = EPOCHS * math.ceil(len(x) / BATCH)  # the schedule's horizon: the whole run
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(recipe, s, steps))
    order = torch.Generator().manual_seed(SEED)  # the run's data order
    epochs = []
    for _ in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(x), generator=order)
        for i in range(0, len(x), BATCH):
            idx = perm[i : i + BATCH]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            schedule.step()
        action = grower.action  # the epoch's action, described as the run's events do
        result = grower.end_epoch(DataLoader(val, batch_size=EVAL_BATCH))
        epochs.append((result.metrics.val_loss, result.metrics.val_acc, action))
    return epochs, grower.model.state_dict()


# The heuristic, eager: it decides from the validation history, the untrained model's
# included, so its germination lands where the run's does.
EAGER = [
    # The capacity trigger and the gain judgement (the tests pin a lifecycle, not a trigger).
    'policies.heuristic.trigger="capacity"',
    'policies.heuristic.judge="gain"',
    "policies.heuristic.min_epoch=0",
    "policies.heuristic.flat_window=1",
    "policies.heuristic.underfit_loss_ratio=0",
    "policies.heuristic.flat_max_drop=100",
    # Seeds alone (no host widening, no fit gate): these tests exercise seed mechanics.
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
    "policies.heuristic.tempo=3",  # a seed can blend and be judged within the 6 epochs
    "policies.heuristic.min_holding_epochs=1",
]


@pytest.mark.parametrize(
    ("recipe", "policy", "growth"),
    [
        (SGD, "wait", []),
        (ADAMW, "schedule", GROWS),
        (SGD, "schedule", GROWS),
        (SGD, "heuristic", EAGER),
    ],
    ids=["sgd-wait", "adamw-grows", "sgd-grows", "sgd-heuristic"],
)
def test_the_grower_and_esper_run_give_one_answer(
    user_module: str, tmp_path: Path, recipe: Recipe, policy: str, growth: list[str]
) -> None:
    cli_epochs, cli_weights = _cli(user_module, recipe, policy, growth, tmp_path / "run")
    loop_epochs, loop_weights = _loop(user_module, recipe, policy, growth)
    assert loop_epochs == cli_epochs
    tensors = {k: v for k, v in cli_weights.items() if torch.is_tensor(v)}
    assert tensors.keys() == {k for k, v in loop_weights.items() if torch.is_tensor(v)}
    assert all(torch.equal(tensors[k], loop_weights[k]) for k in tensors)
    kinds = {action.split()[0] for _, _, action in cli_epochs}
    assert ("GERMINATE" in kinds) == bool(growth)
    assert cli_epochs[-1][1] > 40.0  # it learns: chance is 20 %
