"""The library API attacked: a Grower given a forged, truncated or
mismatched state, slot names that do not exist, a non-torch optimizer, a wrong input, a
model with 1-D output, a model another Grower grows, or used after close(): each is one
clear exception (HostError, GrowerError, CheckpointError) in one line, and a state that
does not load leaves the grower, its model and its optimizer as they were."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from esper_core.errors import CheckpointError, EsperError, GrowerError, HostError
from esper_core.grow.grower import Grower
from tests.plugin_set import first_party


class Net(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.c2(self.c1(x)).mean(dim=(2, 3)))
        return out


class Scalar(Net):
    """One number per example: a regression head, no class dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).sum(dim=1)


X = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 1, 2, 3])
EAGER = [
    "policies.heuristic.min_epoch=0",
    "policies.heuristic.flat_window=1",
    'policies.heuristic.host_growth="off"',
    "policies.heuristic.fit_loss_ratio=0",
]


def grower(model: nn.Module | None = None, **options: Any) -> Grower:
    torch.manual_seed(0)
    model = model or Net()
    options.setdefault("optimizer", torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    options.setdefault("example_input", X)
    slots = options.pop("slots", ["c1", "c2"])
    return Grower(model, slots, plugins=first_party(), max_epochs=8, overrides=EAGER, **options)


def epoch(g: Grower) -> None:
    assert g.optimizer is not None
    g.module.train()
    g.optimizer.zero_grad()
    nn.functional.cross_entropy(g.module(X), Y).backward()
    g.optimizer.step()
    g.end_epoch([(X, Y)])


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize(
    ("options", "error", "expected"),
    [
        ({"slots": ["c3"]}, HostError, "has no submodule of that name"),
        ({"slots": ["c1", "c1"]}, HostError, "names a submodule twice"),
        ({"optimizer": object()}, GrowerError, "expected a torch.optim.Optimizer, got object"),
        ({"example_input": torch.randn(4, 5, 8, 8)}, HostError, "Net rejects it"),
        ({"example_input": [[1.0]]}, HostError, "expected a torch.Tensor"),
        ({"model": Scalar()}, GrowerError, "returns no [batch, classes]"),
    ],
)
def test_a_grower_built_wrongly_says_so_in_one_line(
    options: dict[str, Any], error: type[EsperError], expected: str
) -> None:
    with pytest.raises(error) as info:
        grower(**options)
    assert expected in one_line(info.value)


def test_a_non_torch_optimizer_attached_later_is_refused() -> None:
    g = grower(optimizer=None)
    with pytest.raises(GrowerError, match=r"expected a torch\.optim\.Optimizer"):
        g.attach_optimizer("adam")  # type: ignore[arg-type]


def test_two_growers_on_one_model_are_refused_until_the_first_closes() -> None:
    model = Net()
    first = grower(model)
    with pytest.raises(GrowerError, match="already grown by another Grower"):
        grower(model)
    first.close()
    second = grower(model)  # the first's hooks are gone: nothing stacks
    epoch(second)
    copy.deepcopy(model)  # the mark on the module neither breaks nor follows a copy
    assert not copy.deepcopy(model)._esper_grower_host.grows()


@pytest.mark.parametrize("method", ["end_epoch", "load_state_dict", "attach_optimizer"])
def test_a_closed_grower_refuses_to_go_on(method: str) -> None:
    g = grower()
    state = g.state_dict()
    g.close()
    calls: dict[str, Callable[[], Any]] = {
        "end_epoch": lambda: g.end_epoch([(X, Y)]),
        "load_state_dict": lambda: g.load_state_dict(state),
        "attach_optimizer": lambda: g.attach_optimizer(torch.optim.SGD(g.model.parameters())),
    }
    with pytest.raises(GrowerError, match=rf"{method}\(\) after close\(\)"):
        calls[method]()


def _saved() -> dict[str, Any]:
    g = grower()
    for _ in range(3):
        epoch(g)
    return g.state_dict()


FORGERIES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "not a dict": (lambda s: list(s), "a grower state is a dict"),
    "format": (lambda s: {**s, "format": 99}, "grower state of format 99"),
    "no env": (lambda s: {k: v for k, v in s.items() if k != "env"}, "lacks env"),
    "no step": (lambda s: {k: v for k, v in s.items() if k != "step"}, "lacks step"),
    "env truncated": (
        lambda s: {**s, "env": dict(list(s["env"].items())[:3])},
        "holds env.",
    ),
    "epoch huge": (lambda s: {**s, "env": {**s["env"], "epoch": 10**9}}, "env.epoch = 1000000000"),
    "epoch negative": (lambda s: {**s, "env": {**s["env"], "epoch": -5}}, "env.epoch = -5"),
    "counter negative": (
        lambda s: {**s, "env": {**s["env"], "counters": {**s["env"]["counters"], "n_pruned": -1}}},
        "env.counters.n_pruned = -1",
    ),
    "reward nan": (
        lambda s: {
            **s,
            "env": {**s["env"], "counters": {**s["env"]["counters"], "reward_total": float("nan")}},
        },
        "reward_total = nan",
    ),
    "step not a table": (lambda s: {**s, "step": 1}, "holds step = int"),
    "step garbage": (lambda s: {**s, "step": {"action": 1}}, "does not fit this grower"),
    "policy garbage": (lambda s: {**s, "policy": "x"}, "policy's saved state is not one it wrote"),
    "optimizer of another model": (
        lambda s: {**s, "optimizer": torch.optim.SGD([nn.Parameter(torch.ones(1))]).state_dict()},
        "does not fit this grower",
    ),
    "model weights truncated": (
        lambda s: {**s, "env": {**s["env"], "model": dict(list(s["env"]["model"].items())[:2])}},
        "does not fit this grower",
    ),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_bad_state_is_refused_in_one_line_and_loses_nothing(forgery: str) -> None:
    saved = _saved()
    mutate, expected = FORGERIES[forgery]
    g = grower()
    epoch(g)
    before = copy.deepcopy(g.state_dict())
    with pytest.raises(EsperError) as info:
        g.load_state_dict(mutate(copy.deepcopy(saved)))
    assert isinstance(info.value, CheckpointError | GrowerError), info.value
    assert expected in one_line(info.value), info.value
    after = g.state_dict()
    assert after["env"]["epoch"] == before["env"]["epoch"] == 1
    for name, tensor in before["env"]["model"].items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(tensor, after["env"]["model"][name]), name
    assert len(after["optimizer"]["param_groups"]) == len(before["optimizer"]["param_groups"])
    epoch(g)  # and it goes on training
    assert g.epoch == 2


def test_another_models_state_is_refused_and_the_grower_is_unchanged() -> None:
    saved = _saved()
    model = Net(classes=6)
    g = grower(model, slots=["c2"])
    weight = model.head.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"does not fit this grower.*The grower is unchanged"):
        g.load_state_dict(saved)
    assert torch.equal(model.head.weight, weight)
    epoch(g)


def test_a_state_saved_after_the_last_epoch_continues_in_a_longer_grower() -> None:
    # A Lightning run extended past its planned epochs: the saved grower was done.
    g = grower()
    g.env.max_epochs = 2  # as if planned for 2 epochs
    epoch(g)
    epoch(g)
    assert g.action == "DONE"  # no action follows the last planned epoch
    done = g.state_dict()
    longer = grower()  # plans 8
    longer.load_state_dict(done)
    assert longer.epoch == 2 and longer.action != "DONE"
    epoch(longer)
    assert longer.epoch == 3
