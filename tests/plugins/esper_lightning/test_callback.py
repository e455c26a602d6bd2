"""EsperGrowth inside Trainer.fit: seed parameter groups in the trainer's
optimizer, and a resume from Lightning's own checkpoint that ends bit-identical."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")
import lightning.pytorch as pl
from esper_lightning import EsperGrowth
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from tests.plugin_set import first_party

# The heuristic germinates at the first epoch end with these (see tests/integration).
EAGER = [
    # The capacity trigger and gain judgement (the expansion trigger has no scores
    # before the first end_epoch): a seed at the first epoch end, as these tests need.
    'policies.heuristic.trigger="capacity"',
    'policies.heuristic.judge="gain"',
    "policies.heuristic.min_epoch=0",
    "policies.heuristic.flat_window=1",
    "policies.heuristic.underfit_loss_ratio=0",
    "policies.heuristic.flat_max_drop=100",
    # Seeds alone (no host widening, no fit gate): these tests exercise seed mechanics.
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
]


class SmallNet(pl.LightningModule):
    """A user's own convnet, written as any LightningModule is."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(16, 4)
        self.example_input_array = torch.zeros(2, 3, 8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def _loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, 3, 8, 8, generator=g), torch.randint(0, 4, (48,), generator=g)
    train = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=8)
    val = DataLoader(TensorDataset(x[32:], y[32:]), batch_size=8)
    return train, val


class GroupSpy(Callback):
    """Records, at each epoch's start, the slots whose seed parameters the trainer's
    optimizer holds."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        growth = next(c for c in trainer.callbacks if isinstance(c, EsperGrowth))
        assert growth.grower is not None
        held = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
        self.groups.append(
            [
                slot.slot_id
                for slot in growth.grower.model.iter_slots()
                if slot.seed_parameters() and all(id(p) in held for p in slot.seed_parameters())
            ]
        )


def _trainer(epochs: int, root: Path, callbacks: list[Callback]) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        callbacks=callbacks,
        default_root_dir=root,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
    )


def _growth() -> EsperGrowth:
    return EsperGrowth(
        ["features.1", "features.4"],
        policy="heuristic",
        overrides=EAGER,
        plugins=first_party(),
        max_epochs=30,  # the heuristic germinates only when a seed can be judged in time
    )


def _fit(epochs: int, root: Path, ckpt: str | None = None, extra: list[Callback] | None = None):
    torch.manual_seed(0)
    module, growth = SmallNet(), _growth()
    train, val = _loaders()
    trainer = _trainer(epochs, root, [growth, *(extra or [])])
    trainer.fit(module, train, val, ckpt_path=ckpt)
    return module, growth, trainer


def _state(module: pl.LightningModule, growth: EsperGrowth, trainer: pl.Trainer) -> list[Any]:
    assert growth.grower is not None
    tensors = [t for t in growth.grower.model.state_dict().values() if torch.is_tensor(t)]
    opt = trainer.optimizers[0]
    for state in opt.state.values():
        tensors += [v for v in state.values() if torch.is_tensor(v)]
    return tensors


def test_a_germination_mid_fit_adds_the_seed_group_to_the_trainers_optimizer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spy = GroupSpy()
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        _module, growth, trainer = _fit(3, tmp_path, extra=[spy])
    # Each decision is logged with its reason: the germination says why.
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("EsperGrowth")]
    assert len(logged) == 3 and any("GERMINATE" in m and "capacity limit" in m for m in logged)
    assert spy.groups[0] == []  # the first epoch trains the module as it was given
    grown = [groups for groups in spy.groups if groups]
    assert grown, spy.groups  # germinated at an epoch's end, mid-fit
    assert growth.grower is not None
    assert len(trainer.optimizers[0].param_groups) == 1  # the seeds joined the host's group
    assert any(r.contribution is not None for r in growth.grower.reports())


def test_resume_from_lightnings_checkpoint_after_epoch_two_is_bit_identical(
    tmp_path: Path,
) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    full = _state(*_fit(4, tmp_path / "full", extra=[saver]))
    ckpt = next((tmp_path / "ckpt").glob("epoch=1-*.ckpt"))
    spy = GroupSpy()
    module, growth, trainer = _fit(4, tmp_path / "resumed", ckpt=str(ckpt), extra=[spy])
    resumed = _state(module, growth, trainer)
    assert len(spy.groups) == 2 and spy.groups[0]  # epochs 3 and 4 only, with the seed
    assert growth.grower is not None and growth.grower.epoch == 4
    assert len(full) == len(resumed)
    for a, b in zip(full, resumed, strict=True):
        assert torch.equal(a, b)


class ScheduledNet(SmallNet):
    """The same net under a per-step cosine schedule."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cosine, "interval": "step"}}


def test_a_seed_born_mid_fit_moves_with_a_per_step_scheduler_and_its_flops_count(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    module, growth = ScheduledNet(), _growth()
    train, val = _loaders()
    trainer = _trainer(3, tmp_path, [growth])
    trainer.fit(module, train, val)  # CosineAnnealingLR refuses a group added mid-run
    assert growth.grower is not None and growth.grower.env.stats.n_germinated >= 1
    opt = trainer.optimizers[0]
    assert len(opt.param_groups) == 1
    held = {id(p) for p in opt.param_groups[0]["params"]}
    seeds = growth.grower.model.seed_parameters()
    assert seeds and all(id(p) in held for p in seeds)
    assert growth.grower.env.stats.train_flops > 0
    assert growth.grower.env.stats.train_samples == 3 * 32


def test_the_lightning_module_owns_the_seeds_and_its_checkpoint_resumes(tmp_path: Path) -> None:
    """The seeds are the module's parameters; Lightning's checkpoint
    keeps them in the callback state only, since Lightning loads its state_dict into the
    module before any callback can build the slots."""
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    module, growth, _ = _fit(3, tmp_path / "fit", extra=[saver])
    assert growth.grower is not None
    seeds = {id(p) for p in growth.grower.model.seed_parameters()}
    assert seeds and seeds <= {id(p) for p in module.parameters()}
    ckpt = torch.load(next((tmp_path / "ckpt").glob("epoch=2-*.ckpt")), weights_only=False)
    assert not any(key.startswith("esper_slots.") for key in ckpt["state_dict"])
    assert set(ckpt["state_dict"]) == set(SmallNet().state_dict())


sched = torch.optim.lr_scheduler
# Per-step schedulers of a 3-epoch fit (12 steps), as a LightningModule configures them.
SCHEDULERS: dict[str, Any] = {
    "StepLR": lambda o: sched.StepLR(o, step_size=3, gamma=0.5),
    "CosineAnnealingLR": lambda o: sched.CosineAnnealingLR(o, T_max=12),
    "OneCycleLR": lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=13),
    "LambdaLR": lambda o: sched.LambdaLR(o, lambda step: 0.9**step),
    "SequentialLR": lambda o: sched.SequentialLR(
        o,
        [sched.LinearLR(o, start_factor=0.1, total_iters=3), sched.CosineAnnealingLR(o, 9)],
        milestones=[3],
    ),
}


class RateSpy(Callback):
    """At each optimizer step, the rates of the groups holding a host and each seed parameter."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, list[float]]] = []

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        growth = next(c for c in trainer.callbacks if isinstance(c, EsperGrowth))
        assert growth.grower is not None

        def rate(param: torch.Tensor) -> float:
            return next(
                float(g["lr"])
                for g in optimizer.param_groups
                if any(q is param for q in g["params"])
            )

        seeds = growth.grower.model.seed_parameters()
        self.steps.append((rate(pl_module.head.weight), [rate(p) for p in seeds]))


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_seed_born_mid_fit_moves_with_every_scheduler(name: str, tmp_path: Path) -> None:
    """Under Lightning, each torch scheduler of configure_optimizers moves
    a seed born mid-fit with the host, step by step."""

    class Net(SmallNet):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            return {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": SCHEDULERS[name](opt), "interval": "step"},
            }

    torch.manual_seed(0)
    spy = RateSpy()
    trainer = _trainer(3, tmp_path, [_growth(), spy])
    trainer.fit(Net(), *_loaders())
    grown = [(host, seeds) for host, seeds in spy.steps if seeds]
    assert grown, "a seed was born mid-fit"
    assert len({host for host, _ in grown}) > 1, "the schedule moved the rate while it grew"
    for host, seeds in grown:
        assert seeds == [host] * len(seeds)


def test_a_scheduled_widening_of_the_users_layers_inside_fit(tmp_path: Path) -> None:
    """policies.static with widen_at widens SmallNet's layer pairs (conv -> BN -> ReLU ->
    conv, conv -> ReLU -> mean -> head) mid-fit; the trainer's optimizer holds exactly the
    widened module's parameters afterwards."""
    widen = ["policies.static.widen_at=0.34", "policies.static.widen_tempo=1"]
    module, growth, trainer = _widening_fit(3, tmp_path, overrides=widen)
    assert module.features[0].out_channels == 16 and module.features[1].num_features == 16
    assert module.features[3].in_channels == 16 and module.head.in_features == 32
    held = sorted(id(p) for g in trainer.optimizers[0].param_groups for p in g["params"])
    assert held == sorted(id(p) for p in module.parameters())
    assert (
        growth.grower is not None
        and growth.grower.env.model.host_growths[0].stage.value == "FOSSILIZED"
    )


# Started at the end of epoch 1 (before epoch 2 of 4), ramped over two epochs.
MID_RUN = ["policies.static.widen_at=0.5", "policies.static.widen_tempo=2"]


def _widening_fit(
    epochs: int,
    root: Path,
    ckpt: str | None = None,
    extra: list[Callback] | None = None,
    overrides: list[str] = MID_RUN,
) -> tuple[SmallNet, EsperGrowth, pl.Trainer]:
    """SmallNet fit with ``policies.static`` widening its layer pairs as ``overrides`` say."""
    torch.manual_seed(0)
    module = SmallNet()
    growth = EsperGrowth(
        ["features.2"],
        policy="static",
        overrides=overrides,
        plugins=first_party(),
        max_epochs=epochs,
    )
    trainer = _trainer(epochs, root, [growth, *(extra or [])])
    trainer.fit(module, *_loaders(), ckpt_path=ckpt)
    return module, growth, trainer
