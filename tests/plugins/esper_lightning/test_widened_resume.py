"""A Lightning fit interrupted after EsperGrowth widened the module's own layers resumes
from Lightning's own checkpoint and ends bit-identical to the uninterrupted fit: mid-ramp
(the widening's own tensors in the checkpoint) and after the fold (the layers wider than
the module as built). Lightning loads a checkpoint's state_dict into the module as it was
built, before any callback runs; the callback sets the grown layers' entries aside by
parameter name and puts them back once the growth is replayed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning")
import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from esper_core.errors import CheckpointError
from tests.plugins.esper_lightning.test_callback import SmallNet, _widening_fit

EPOCHS = 6
# The widening starts at epoch 1 (round(0.2 x 6)), decided at the end of epoch 0: Lightning's
# checkpoint of epoch 0 is mid-ramp, and the one of epoch 2 is after the fold.
WIDEN = ["policies.static.widen_at=0.2", "policies.static.widen_tempo=2"]


def _fit(root: Path, ckpt: Path | None = None) -> tuple[SmallNet, pl.Trainer]:
    saver = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)
    module, growth, trainer = _widening_fit(
        EPOCHS, root, ckpt=None if ckpt is None else str(ckpt), extra=[saver], overrides=WIDEN
    )
    assert growth.grower is not None and growth.grower.epoch == EPOCHS
    return module, trainer


def _optimizer_tensors(trainer: pl.Trainer) -> list[torch.Tensor]:
    opt = trainer.optimizers[0]
    return [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[Any]]:
    root = tmp_path_factory.mktemp("full")
    module, trainer = _fit(root)
    assert module.head.in_features == 32  # grown and folded
    return root / "ckpt", module.state_dict(), _optimizer_tensors(trainer)


def _checkpoint(ckpt_dir: Path, epoch: int) -> Path:
    return next(ckpt_dir.glob(f"epoch={epoch}-*.ckpt"))


@pytest.mark.parametrize(
    ("epoch", "grown"),
    [(0, "head.esper_widening.cross_weight"), (2, "features.3.weight")],
    ids=["mid-ramp", "folded"],
)
def test_a_fit_interrupted_after_a_widening_resumes_bit_identically(
    epoch: int, grown: str, full: tuple[Path, dict[str, Any], list[Any]], tmp_path: Path
) -> None:
    ckpt_dir, final, optimizer = full
    ckpt = _checkpoint(ckpt_dir, epoch)
    saved = torch.load(ckpt, weights_only=False)["state_dict"]
    # What Lightning could not load into SmallNet as built: a widening's own tensor
    # mid-ramp, a layer of twice its channels once folded.
    assert grown in saved
    assert grown not in SmallNet().state_dict() or saved[grown].shape[1] == 16
    module, trainer = _fit(tmp_path, ckpt)
    resumed = module.state_dict()
    assert resumed.keys() == final.keys()
    for key, value in final.items():
        if torch.is_tensor(value):
            assert torch.equal(resumed[key], value), key
    again = _optimizer_tensors(trainer)
    assert len(again) == len(optimizer) > 0
    assert all(torch.equal(a, b) for a, b in zip(again, optimizer, strict=True))


@pytest.mark.parametrize("edit", ["shape", "name"])
def test_a_grown_layer_that_does_not_fit_the_replayed_growth_is_refused_in_one_line(
    edit: str, full: tuple[Path, dict[str, Any], list[Any]], tmp_path: Path
) -> None:
    checkpoint = torch.load(_checkpoint(full[0], 0), weights_only=False)
    state = checkpoint["state_dict"]
    if edit == "shape":
        state["head.esper_widening.cross_weight"] = torch.zeros(4, 3)
    else:
        state["head.esper_widening.other"] = torch.zeros(4)
    forged = tmp_path / "forged.ckpt"
    torch.save(checkpoint, forged)
    with pytest.raises(CheckpointError) as caught:
        _fit(tmp_path / "resumed", forged)
    message = str(caught.value)
    assert "\n" not in message and "head.esper_widening" in message
    assert "do not fit the module once its growths are replayed" in message
