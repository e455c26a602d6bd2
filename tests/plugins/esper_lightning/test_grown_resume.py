"""The own-model acceptance test under Lightning: a user CNN and a user MLP, each grown by one
callback, trained under a per-step schedule (cosine for the CNN, one-cycle for the MLP)
with clipping over ``self.parameters()``, resumed from Lightning's checkpoint taken
after a seed was born: the resumed fit ends bit-identical to the uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")
import lightning.pytorch as pl
from esper_lightning import EsperGrowth
from lightning.pytorch.callbacks import ModelCheckpoint

from tests.plugin_set import first_party
from tests.plugins.esper_lightning.test_callback import EAGER, SmallNet, _trainer

EPOCHS, BATCHES = 4, 4


def _clip(module: pl.LightningModule) -> None:
    # The user's clipping, over the module's parameters: the seeds are among them.
    torch.nn.utils.clip_grad_norm_(module.parameters(), 0.1)


class CosineCNN(SmallNet):
    """The user's convnet under a per-step cosine schedule, clipping its parameters."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * BATCHES)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cosine, "interval": "step"}}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        _clip(self)


class OneCycleMLP(pl.LightningModule):
    """The user's tabular MLP under a per-step one-cycle schedule, clipping its parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)
        self.example_input_array = torch.zeros(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=EPOCHS * BATCHES)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cycle, "interval": "step"}}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        _clip(self)


def _loaders(shape: tuple[int, ...], classes: int) -> tuple[DataLoader[Any], DataLoader[Any]]:
    g = torch.Generator().manual_seed(0)
    n = 8 * BATCHES
    x, y = (
        torch.randn(n + 16, *shape, generator=g),
        torch.randint(0, classes, (n + 16,), generator=g),
    )
    return (
        DataLoader(TensorDataset(x[:n], y[:n]), batch_size=8),
        DataLoader(TensorDataset(x[n:], y[n:]), batch_size=8),
    )


CASES = {
    "cnn": (CosineCNN, ["features.1", "features.4"], (3, 8, 8), 4),
    "mlp": (OneCycleMLP, ["body.1", "body.3"], (8,), 3),
}


def _fit(
    case: str, root: Path, ckpt: str | None = None
) -> tuple[pl.LightningModule, EsperGrowth, pl.Trainer]:
    make, slots, shape, classes = CASES[case]
    torch.manual_seed(0)
    module = make()
    growth = EsperGrowth(slots, overrides=EAGER, plugins=first_party(), max_epochs=30)
    saver = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)
    trainer = _trainer(EPOCHS, root, [growth, saver])
    trainer.fit(module, *_loaders(shape, classes), ckpt_path=ckpt)
    return module, growth, trainer


def _tensors(module: pl.LightningModule, trainer: pl.Trainer) -> list[torch.Tensor]:
    out = [t for t in module.state_dict().values() if torch.is_tensor(t)]
    opt = trainer.optimizers[0]
    return out + [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_grown_model_under_a_schedule_and_clipping_resumes_bit_identically(
    case: str, tmp_path: Path
) -> None:
    module, growth, trainer = _fit(case, tmp_path / "full")
    full = _tensors(module, trainer)
    assert growth.grower is not None and growth.grower.env.stats.n_germinated >= 1
    ckpt = next((tmp_path / "full" / "ckpt").glob("epoch=1-*.ckpt"))
    saved = torch.load(ckpt, weights_only=False)
    (key,) = [k for k in saved["callbacks"] if k.startswith("EsperGrowth")]
    assert saved["callbacks"][key]["grower"]["env"]["counters"]["n_germinated"] >= 1

    module2, growth2, trainer2 = _fit(case, tmp_path / "resumed", ckpt=str(ckpt))
    resumed = _tensors(module2, trainer2)
    assert growth2.grower is not None and growth2.grower.epoch == EPOCHS
    assert len(full) == len(resumed)
    for a, b in zip(full, resumed, strict=True):
        assert torch.equal(a, b)
