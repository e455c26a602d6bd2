"""EsperGrowth resumed past its planned epochs, or from a checkpoint
whose grower state is another model's or forged: growth goes on, or one clear
exception, never an internal AssertionError."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")
from esper_lightning import EsperGrowth
from lightning.pytorch.callbacks import ModelCheckpoint

from esper_core.errors import CheckpointError
from tests.plugin_set import first_party
from tests.plugins.esper_lightning.test_callback import EAGER, SmallNet, _loaders, _trainer


def _fit(
    epochs: int,
    root: Path,
    ckpt: str | None = None,
    slots: tuple[str, ...] = ("features.1", "features.4"),
    **options: object,
) -> EsperGrowth:
    torch.manual_seed(0)
    growth = EsperGrowth(list(slots), overrides=EAGER, plugins=first_party(), **options)
    saver = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)
    train, val = _loaders()
    _trainer(epochs, root, [growth, saver]).fit(SmallNet(), train, val, ckpt_path=ckpt)
    return growth


def test_a_fit_extended_past_its_planned_epochs_keeps_growing(tmp_path: Path) -> None:
    # The grower plans the trainer's 2 epochs; resumed by a trainer of 4 it goes on
    # (before: AssertionError "end_epoch() follows apply_action()" from the env).
    _fit(2, tmp_path / "a")
    last = max((tmp_path / "a" / "ckpt").glob("*.ckpt"))
    growth = _fit(4, tmp_path / "b", ckpt=str(last))
    assert growth.grower is not None and growth.grower.epoch == 4


def test_a_forged_grower_state_in_lightnings_checkpoint_is_one_line(tmp_path: Path) -> None:
    _fit(2, tmp_path / "a")
    last = max((tmp_path / "a" / "ckpt").glob("*.ckpt"))
    data = torch.load(last, weights_only=False)
    (key,) = [k for k in data["callbacks"] if k.startswith("EsperGrowth")]
    data["callbacks"][key]["grower"]["env"]["epoch"] = 10**9
    torch.save(data, last)
    with pytest.raises(CheckpointError) as info:
        _fit(4, tmp_path / "b", ckpt=str(last))
    assert "env.epoch = 1000000000" in str(info.value) and "\n" not in str(info.value)


def test_a_checkpoint_grown_at_other_slots_is_refused_in_one_line(tmp_path: Path) -> None:
    # Lightning keys a callback's state by its slots: resumed with fewer slots, the
    # callback found no state and trained on without the checkpoint's seeds.
    _fit(2, tmp_path / "a")
    last = max((tmp_path / "a" / "ckpt").glob("*.ckpt"))
    with pytest.raises(CheckpointError) as info:
        _fit(4, tmp_path / "b", ckpt=str(last), slots=("features.1",))
    message = str(info.value)
    assert "features.4" in message and "\n" not in message


@pytest.mark.parametrize("grown", ["x", 2.7, True, -5, None])
def test_a_forged_grown_epoch_is_one_line(grown: object) -> None:
    """``grown_epoch = "x"`` in a Lightning checkpoint was a raw ValueError from
    int(); 2.7 or True loaded as another epoch in silence."""
    growth = EsperGrowth(["features.1"], overrides=EAGER, plugins=first_party())
    with pytest.raises(CheckpointError, match="grown_epoch") as info:
        growth.load_state_dict({"grower": None, "grown_epoch": grown})
    assert "\n" not in str(info.value)
    growth.load_state_dict({"grower": None, "grown_epoch": 3})  # a saved one loads
