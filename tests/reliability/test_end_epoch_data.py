"""``Grower.end_epoch`` given labels the model has no output for, bare
tensors instead of ``(inputs, targets)`` batches, or no validation sample raised torch's
errors from inside the loss (``Target 7 is out of bounds``, a batch-size mismatch) or
measured a loss over nothing. Each is one ``GrowerError`` line now, and the grower goes
on with the right data."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from esper_core.errors import GrowerError
from esper_core.grow.grower import Grower
from tests.plugin_set import first_party

X = torch.randn(16, 4)


def _grower() -> Grower:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Grower(
        model, ["1"], example_input=X[:2], optimizer=opt, max_epochs=4, plugins=first_party()
    )


def _labels(value: int) -> DataLoader[Any]:
    return DataLoader(TensorDataset(X, torch.full((16,), value)), batch_size=8)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (_labels(7), "validation batch 0 holds label 7, but the model has 3 outputs"),
        (_labels(-1), "validation batch 0 holds label -1"),
        (DataLoader(X, batch_size=8), "validation batch 0 is a Tensor, not (inputs, targets)"),
        (DataLoader(TensorDataset(X, X[:, 0]), batch_size=8), "targets are torch.float32"),
        ([], "the validation data held no sample"),
        (DataLoader(TensorDataset(X[:0], X[:0, 0].long())), "the validation data held no sample"),
    ],
)
def test_wrong_validation_data_is_one_line_and_the_grower_goes_on(data: Any, says: str) -> None:
    grower = _grower()
    with pytest.raises(GrowerError) as info:
        grower.end_epoch(data)
    assert says in str(info.value) and "\n" not in str(info.value), info.value
    good = DataLoader(TensorDataset(X, torch.randint(0, 3, (16,))), batch_size=8)
    grower.end_epoch(good)
    assert grower.epoch == 1
    grower.close()


def test_labels_cross_entropy_ignores_are_not_refused() -> None:
    grower = _grower()
    y = torch.randint(0, 3, (16,))
    y[:4] = -100  # F.cross_entropy's ignore_index (a sequence's padding)
    grower.end_epoch(DataLoader(TensorDataset(X, y), batch_size=8))
    grower.close()
