"""The attack on a user's own model and data, replayed: ``tasks.dataset`` on the
command line (width growth, NaN and huge inputs, a data function that never returns, a
widening of 64 x the work) and the library API in a process of its own (``python -m
tests.reliability.replay_own_model NAME DIR``: a model that cannot be copied, slots that
are no list of names, wrong validation data), judged as the rest of the replay."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.reliability.replay_case import Case, Check, Setup, esper_args, nothing_lost
from tests.reliability.replay_cli import DATASET, OWN, STATIC


def _dataset(*sets: str, data: str = "splits") -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        flags = [x for s in (f"tasks.dataset.data={OWN}:{data}", *sets) for x in ("--set", s)]
        return esper_args(*DATASET, *flags, "--out", str(d / "r")), nothing_lost

    return setup


def _cli(*args: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        return esper_args(*(a.replace("{d}", str(d)) for a in args)), nothing_lost

    return setup


WIDEN = ("--policy", "static", "--set", "policies.static.widen_at=0.25", "--max-epochs", "4")


def _widen(d: Path) -> tuple[list[str], Check]:
    args, _ = _dataset()(d)
    run_dir = d / "r"

    def check() -> str | None:
        return None if (run_dir / "summary.json").is_file() else "the run wrote no summary"

    return [*args, *WIDEN], check


# ---- The library cases, each run in a process of its own.


def _mlp() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def _grower(model: Any, slots: Any = ("1",), **options: Any) -> Any:
    import torch

    import esper_core
    from tests.plugin_set import first_party

    return esper_core.Grower(
        model, slots, example_input=torch.randn(2, 4), plugins=first_party(), **options
    )


def _locked(_d: Path) -> None:
    model = _mlp()
    model.lock = threading.Lock()
    _grower(model, policy="static", max_epochs=8, overrides=["policies.static.widen_at=0.25"])


def _old_weight_norm(_d: Path) -> None:
    import torch

    import esper_core

    model = _mlp()
    with warnings.catch_warnings():  # torch's deprecation of it, the user's own call
        warnings.simplefilter("ignore")
        torch.nn.utils.weight_norm(model[2])
    esper_core.widenable_layers(model, torch.randn(2, 4))


def _function_model(_d: Path) -> None:
    import torch

    import esper_core

    esper_core.widenable_layers(lambda x: x, torch.randn(2, 4))


def _end_epoch(labels: int | None) -> Callable[[Path], None]:
    def case(_d: Path) -> None:
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        grower = _grower(model, optimizer=opt, max_epochs=4)
        x = torch.randn(16, 4)
        data = x if labels is None else TensorDataset(x, torch.full((16,), labels))
        grower.end_epoch(DataLoader(data, batch_size=8))

    return case


FUNCTIONS: dict[str, Callable[[Path], None]] = {
    "locked-model": _locked,
    "old-weight-norm": _old_weight_norm,
    "function-model": _function_model,
    "integer-slot": lambda _d: _grower(_mlp(), [1]),
    "labels-past-outputs": _end_epoch(7),
    "bare-tensors": _end_epoch(None),
}


def _case(name: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        return ["-m", "tests.reliability.replay_own_model", name, str(d)], nothing_lost

    return setup


CASES = (
    Case("53.1 tasks.dataset: static widen_at (works)", _widen, code=0),
    Case(
        "53.1 tasks.dataset: widen_at on a model without a layer pair",
        _dataset(
            f"tasks.dataset.model={OWN}:one_layer",
            'tasks.dataset.slots=["0"]',
            'tasks.dataset.topology="mlp"',
            "policies.static.widen_at=0.25",
            "run.policy=static",
            "env.max_epochs=4",
        ),
        says="cannot grow in width",
    ),
    Case("53.2 tasks.dataset: all NaN", _dataset(data="all_nan"), says="train[0]"),
    Case("53.2 tasks.dataset: one NaN", _dataset(data="one_nan"), says="train[7]"),
    Case("53.2 tasks.dataset: +inf", _dataset(data="one_inf"), says="train[3]"),
    Case("53.2 tasks.dataset: 1e38", _dataset(data="huge_input"), says="holds 1e+38"),
    Case("53.2 tasks.dataset: NaN in val only", _dataset(data="nan_in_validation"), says="val[4]"),
    Case("53.3 Grower widening a model holding a lock", _case("locked-model"), says="copied"),
    Case("53.3 widenable_layers: old weight_norm", _case("old-weight-norm"), says="parametriz"),
    Case("53.3 widenable_layers: a function", _case("function-model"), says="nn.Module"),
    Case(
        "53.4 widen_factor=64 (64 x the work)",
        _cli(
            *STATIC,
            "--set",
            "policies.static.widen_at=0.5",
            "--set",
            "policies.static.widen_factor=64",
        ),
        says="FLOPs per sample",
    ),
    Case(
        "53.5 tasks.dataset: a data function that never returns",
        _dataset("run.epoch_timeout=5", data="hangs"),
        says="run.epoch_timeout = 5 s",
    ),
    Case("53.5 Grower: an integer slot", _case("integer-slot"), says="not a submodule's name"),
    Case("53.5 end_epoch: label 7 of 3 outputs", _case("labels-past-outputs"), says="label 7"),
    Case("53.5 end_epoch: bare tensors", _case("bare-tensors"), says="not (inputs, targets)"),
)


def main(name: str, directory: str) -> int:
    from esper_core.errors import EsperError

    try:
        FUNCTIONS[name](Path(directory))
    except EsperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
