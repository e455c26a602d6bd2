"""``widenable_layers`` and the Grower's width growth on a model that
cannot be copied (a lock, an open file, the old ``weight_norm`` / ``spectral_norm``), and
the public ``widenable_layers`` given a non-tensor input, a wrong dtype or a function:
each one ``HostError`` line naming the problem, not a torch error from a copy or a forward."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import esper_core
from esper_core.errors import HostError
from tests.plugin_set import first_party


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def with_lock(_d: Path) -> nn.Module:
    model = mlp()
    model.lock = threading.Lock()  # type: ignore[assignment]
    return model


def with_file(d: Path) -> nn.Module:
    model = mlp()
    model.log = open(d / "log.txt", "w")  # type: ignore[assignment]  # noqa: SIM115
    return model


def with_old_norm(norm: Callable[..., Any]) -> Callable[[Path], nn.Module]:
    def build(_d: Path) -> nn.Module:
        model = mlp()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch deprecates them: still in use
            norm(model[2])
        return model

    return build


UNCOPYABLE = {
    "a lock": (with_lock, "cannot pickle '_thread.lock'"),
    "an open file": (with_file, "cannot pickle '_io.TextIOWrapper'"),
    "weight_norm": (with_old_norm(torch.nn.utils.weight_norm), "parametrizations.weight_norm"),
    "spectral_norm": (with_old_norm(torch.nn.utils.spectral_norm), "parametrizations"),
}


def _one_line(error: pytest.ExceptionInfo[HostError], *phrases: str) -> None:
    message = str(error.value)
    assert "\n" not in message and all(p in message for p in phrases), message


@pytest.mark.parametrize("case", list(UNCOPYABLE))
def test_widenable_layers_on_a_model_that_cannot_be_copied(case: str, tmp_path: Path) -> None:
    build, says = UNCOPYABLE[case]
    with pytest.raises(HostError) as info:
        esper_core.widenable_layers(build(tmp_path), torch.randn(2, 4))
    _one_line(info, "Sequential cannot be copied", says)


@pytest.mark.parametrize("case", list(UNCOPYABLE))
def test_a_widening_grower_on_a_model_that_cannot_be_copied(case: str, tmp_path: Path) -> None:
    build, says = UNCOPYABLE[case]
    model = build(tmp_path)
    with pytest.raises(HostError) as info:
        esper_core.Grower(
            model,
            ["1"],
            example_input=torch.randn(2, 4),
            policy="static",
            max_epochs=8,
            overrides=["policies.static.widen_at=0.25"],
            plugins=first_party(),
        )
    _one_line(info, "cannot be copied", says)
    assert not hasattr(model, "esper_slots")  # refused, the model is as given


@pytest.mark.parametrize(
    ("model", "example", "says"),
    [
        (mlp, [[1.0] * 4], "expected a torch.Tensor"),
        (mlp, torch.ones(2, 4, dtype=torch.int64), "this one is torch.int64"),
        (lambda: lambda x: x, torch.randn(2, 4), "expected a torch.nn.Module, got function"),
    ],
)
def test_widenable_layers_checks_its_arguments_as_the_grower_does(
    model: Callable[[], Any], example: Any, says: str
) -> None:
    with pytest.raises(HostError) as info:
        esper_core.widenable_layers(model(), example)
    _one_line(info, says)
    with pytest.raises(HostError) as info:
        esper_core.Grower(model(), ["1"], example_input=example, plugins=first_party())
    _one_line(info, says)


@pytest.mark.parametrize(
    ("slots", "says"),
    [
        ([1], "slots: 1 (int) is not a submodule's name"),
        (1, "slots: expected a list of submodule names, got int"),
        ("1", "got the string '1'; write slots=['1']"),
    ],
)
def test_slots_that_are_not_a_list_of_names_are_one_line(slots: Any, says: str) -> None:
    with pytest.raises(HostError) as info:
        esper_core.Grower(mlp(), slots, example_input=torch.randn(2, 4), plugins=first_party())
    _one_line(info, says)


def test_a_generator_of_slot_names_is_read_once() -> None:
    grower = esper_core.Grower(
        mlp(), (name for name in ["1", "3"]), example_input=torch.randn(2, 4), plugins=first_party()
    )
    assert list(grower.model.slot_ids) == ["1", "3"]
    grower.close()
