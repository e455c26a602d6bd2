"""The user's optimizer and the seeds' group, checked when the optimizer is attached:
an optimizer over another model's parameters, and a ``seed_group`` with a key the
optimizer does not know or a negative learning rate, are one GrowerError line each
(before: accepted; the seeds joined groups that trained the wrong model or ignored the
key, and lr=-1 climbed the loss)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from esper_core.errors import GrowerError
from tests.reliability.test_grower_attack import Net, epoch, grower, one_line


def test_an_optimizer_over_another_models_parameters_is_refused() -> None:
    other = Net()
    with pytest.raises(GrowerError) as info:
        grower(optimizer=torch.optim.SGD(other.parameters(), lr=0.05))
    assert "none of the optimizer's 6 parameters belongs to the model" in one_line(info.value)


def test_an_optimizer_that_also_trains_something_else_is_kept() -> None:
    model = Net()
    temperature = torch.nn.Parameter(torch.ones(()))
    opt = torch.optim.SGD([*model.parameters(), temperature], lr=0.05)
    epoch(grower(model, optimizer=opt))


@pytest.mark.parametrize(
    ("seed_group", "expected"),
    [
        ({"lr": -1.0}, "seed_group lr = -1.0, but it must be a finite number >= 0"),
        ({"lr": float("nan")}, "seed_group lr = nan"),
        ({"weight_decay": "0.1"}, "seed_group weight_decay = '0.1'"),
        ({"learning_rate": 0.01}, "seed_group key 'learning_rate' is not a hyper-parameter of SGD"),
        ({"params": []}, "seed_group key 'params'"),
    ],
)
def test_a_wrong_seed_group_is_one_line(seed_group: dict[str, Any], expected: str) -> None:
    with pytest.raises(GrowerError) as info:
        grower(seed_group=seed_group)
    assert expected in one_line(info.value)


def test_a_right_seed_group_is_taken() -> None:
    epoch(grower(seed_group={"lr": 0.01, "weight_decay": 0.0}))
