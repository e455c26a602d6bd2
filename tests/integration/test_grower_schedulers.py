"""Seed parameter groups follow the user's optimizer and scheduler: a
seed group copies its host group's hyper-parameters and moves with it at every step,
under every torch scheduler, with the weight-decay rule of the host's groups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as sched

from esper_core.grow.grower import Grower
from esper_core.grow.loop_trainer import GROUP_KEY
from tests.integration.own_model_helpers import grower_kwargs

SLOTS = ["block1", "block2"]
STEPS_PER_EPOCH = 4
EPOCHS = 4


class TinyNet(nn.Module):
    """A user's own small convnet."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.block2(self.block1(x)).mean(dim=(2, 3)))
        return out


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g))
        for _ in range(STEPS_PER_EPOCH)
    ]


Make = Callable[[torch.optim.Optimizer], Any]
TOTAL = STEPS_PER_EPOCH * EPOCHS
SCHEDULERS: dict[str, Make] = {
    "StepLR": lambda o: sched.StepLR(o, step_size=3, gamma=0.5),
    "CosineAnnealingLR": lambda o: sched.CosineAnnealingLR(o, T_max=TOTAL),
    "OneCycleLR": lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=TOTAL + 1),
    "LambdaLR": lambda o: sched.LambdaLR(o, lambda step: 0.9**step),
    "SequentialLR": lambda o: sched.SequentialLR(
        o,
        [sched.LinearLR(o, start_factor=0.1, total_iters=3), sched.CosineAnnealingLR(o, TOTAL)],
        milestones=[3],
    ),
}


def group_of(opt: torch.optim.Optimizer, param: torch.Tensor) -> dict[str, Any]:
    return next(g for g in opt.param_groups if any(p is param for p in g["params"]))


class StepSpy:
    """At each optimizer step, the hyper-parameters that the group of a host parameter and
    the group of a seed parameter hold (recorded after the grower's own pre-hook)."""

    KEYS = ("lr", "momentum", "betas", "weight_decay")

    def __init__(self, opt: torch.optim.Optimizer, host: torch.Tensor, seed: torch.Tensor) -> None:
        self.steps: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.host, self.seed = host, seed
        opt.register_step_pre_hook(self._record)

    def _record(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        host, seed = group_of(opt, self.host), group_of(opt, self.seed)
        pick = lambda g: {k: g[k] for k in self.KEYS if k in g}  # noqa: E731
        self.steps.append((pick(host), pick(seed)))


def _spy(opt: torch.optim.Optimizer, model: TinyNet, grower: Grower, slot: str) -> StepSpy:
    seed = grower.model.slot(slot).seed_parameters()[0]
    return StepSpy(opt, getattr(model, slot)[0].weight, seed)


def _grower(opt: torch.optim.Optimizer, model: nn.Module, **extra: Any) -> Grower:
    kwargs = grower_kwargs(policy="wait", optimizer=opt, max_epochs=EPOCHS, **extra)
    return Grower(model, SLOTS, example_input=_batches(0)[0][0], **kwargs)


def _germinate(grower: Grower, slot_id: str, blueprint: str) -> None:
    """What the policy's GERMINATE does, mid-run (the scheduler has stepped already)."""
    grower.model.slot(slot_id).germinate("s1", grower.env.blueprints[blueprint], "linear_add")
    grower.env.trainer.sync_optimizers()


def _loop(
    model: nn.Module, opt: torch.optim.Optimizer, scheduler: Any, grower: Grower, epochs: int
) -> None:
    for epoch in range(epochs):
        model.train()
        for x, y in _batches(1 + epoch):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            scheduler.step()
        grower.end_epoch(_batches(99))


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_seed_born_mid_run_moves_with_the_hosts_schedule(name: str) -> None:
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = SCHEDULERS[name](opt)
    grower = _grower(opt, model)
    _loop(model, opt, scheduler, grower, 1)
    _germinate(grower, "block2", "cnn/conv_small")
    spy = _spy(opt, model, grower, "block2")
    _loop(model, opt, scheduler, grower, 2)
    assert len(spy.steps) == 2 * STEPS_PER_EPOCH
    assert len({host["lr"] for host, _ in spy.steps}) > 1, "the schedule moves the host's rate"
    for host, seed in spy.steps:
        assert seed == host


def test_one_cycles_betas_and_rate_reach_a_seed_under_adamw() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    scheduler = sched.OneCycleLR(opt, max_lr=0.01, total_steps=TOTAL + 1)
    grower = _grower(opt, model)
    _loop(model, opt, scheduler, grower, 1)
    _germinate(grower, "block1", "cnn/norm")
    scheduler.step()  # before any optimizer step: OneCycleLR reads the seed's group
    spy = _spy(opt, model, grower, "block1")
    _loop(model, opt, scheduler, grower, 1)
    assert len({host["betas"] for host, _ in spy.steps}) > 1  # the cycle moves beta1
    for host, seed in spy.steps:
        assert seed == host


def test_seed_parameters_take_the_weight_decay_of_the_host_group_of_their_kind() -> None:
    """nanoGPT-style groups: kernels decay, norms and biases do not; a seed's kernels
    join a copy of the kernels' group, its norm scales and biases a copy of the other."""
    torch.manual_seed(0)
    model = TinyNet()
    kernels = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": kernels, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=1e-3,
    )
    grower = _grower(opt, model)
    _germinate(grower, "block1", "cnn/conv_light")
    params = grower.model.slot("block1").seed_parameters()
    assert {p.ndim >= 2 for p in params} == {True, False}
    for p in params:
        assert group_of(opt, p)["weight_decay"] == (0.1 if p.ndim >= 2 else 0.0)
    grower.model.slot("block1").prune()
    grower.env.trainer.sync_optimizers()
    assert len(opt.param_groups) == 2
    assert [len(g["params"]) for g in opt.param_groups] == [len(kernels), len(vectors)]


def test_a_seed_follows_the_group_of_its_own_slot_module() -> None:
    """Layer-wise rates: the seed at block2 learns at block2's rate, not block1's."""
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(
        [
            {"params": model.block1.parameters(), "lr": 0.01},
            {"params": [*model.block2.parameters(), *model.head.parameters()], "lr": 0.2},
        ],
        lr=0.05,
    )
    grower = _grower(opt, model)
    _germinate(grower, "block2", "cnn/conv_small")
    seed = grower.model.slot("block2").seed_parameters()[0]
    assert group_of(opt, seed)["lr"] == 0.2


def test_a_seed_groups_own_lr_scales_with_the_schedule() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = sched.OneCycleLR(opt, max_lr=0.1, total_steps=TOTAL + 1)
    grower = _grower(opt, model, seed_group={"lr": 0.008})  # twice the initial_lr, 0.1 / 25
    _germinate(grower, "block2", "cnn/conv_small")
    assert opt.param_groups[-1][GROUP_KEY] == "block2"
    spy = _spy(opt, model, grower, "block2")
    _loop(model, opt, scheduler, grower, 1)
    for host, seed in spy.steps:
        assert seed["lr"] == pytest.approx(2 * host["lr"])
        assert seed["momentum"] == host["momentum"]  # the cycle moves it for both


def test_resume_under_one_cycle_with_clipping_is_bit_identical(tmp_path: Path) -> None:
    def build() -> tuple[nn.Module, torch.optim.Optimizer, Any, Grower]:
        torch.manual_seed(0)
        model = TinyNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = sched.OneCycleLR(opt, max_lr=0.1, total_steps=TOTAL + 1)
        return model, opt, scheduler, _grower(opt, model)

    model, opt, scheduler, grower = build()
    _loop(model, opt, scheduler, grower, 1)
    _germinate(grower, "block2", "cnn/conv_small")
    grower.env.begin_epoch()
    _loop(model, opt, scheduler, grower, 1)
    state = {"grower": grower.state_dict(), "scheduler": scheduler.state_dict()}
    torch.save(state, tmp_path / "ckpt.pt")
    _loop(model, opt, scheduler, grower, 2)
    expected = [t.clone() for t in grower.model.state_dict().values() if torch.is_tensor(t)]

    model2, opt2, scheduler2, grower2 = build()
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    grower2.load_state_dict(saved["grower"])
    scheduler2.load_state_dict(saved["scheduler"])
    _loop(model2, opt2, scheduler2, grower2, 2)
    tensors = [t for t in grower2.model.state_dict().values() if torch.is_tensor(t)]
    for a, b in zip(tensors, expected, strict=True):
        assert torch.equal(a, b)
