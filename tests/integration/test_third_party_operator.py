"""A third party's growth operator end to end: examples/third-party-operator
(``inner/width``: only the layer pairs inside one submodule) is installed in the test
environment (requirements-test.txt), listed and checked by ``esper operators``, chosen by
name by ``policies.static``, bit for bit the host at birth, folded, and resumed exactly;
an unnamed request still grows what it grew before the operator was installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.env import host_growth
from esper_core.errors import GrowerError
from esper_core.grow.grower import Grower
from esper_core.lifecycle.operator_check import check_operator
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.telemetry import HostGrowthStarted
from tests.integration.own_model_helpers import (
    MLP_SLOTS,
    grower_kwargs,
    mlp,
    tabular_batches,
    train_one_epoch,
)
from tests.plugin_set import first_party

EXAMPLE = "operators.example"  # the example package's entry point


def test_the_installed_operator_is_listed_and_passes_the_check() -> None:
    group, pm = build_cli(PluginManager(autoload=True))
    runner = CliRunner()
    listing = json.loads(runner.invoke(group, ["plugins", "--json"], obj={"pm": pm}).output)
    example = next(p for p in listing if p["name"] == EXAMPLE)
    assert example["distribution"] == "esper-example-operator"
    assert example["components"] == ["operators.inner/width"]
    listed = runner.invoke(group, ["operators", "--kind", "width", "--json"], obj={"pm": pm})
    rows = {r["name"]: r for r in json.loads(listed.output)}
    assert {"cnn/width", "transformer/width", "layers/width", "inner/width"} <= set(rows)
    assert rows["inner/width"]["plugin"] == EXAMPLE
    # Of its sample model's three pairs, only the MLP block's hidden width.
    assert rows["inner/width"]["sites"] == [{"name": "mlp.0 -> mlp.2", "size": 16}]
    checked = runner.invoke(group, ["operators", "check", "inner/width"], obj={"pm": pm})
    assert checked.exit_code == 0, checked.output
    assert checked.output == "ok   inner/width (plugin operators.example)\n"


class _Shifted:
    """The example operator, but its growth moves a weight of the host as it is born."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.kind = "broken/width", "width"
        self.description, self.needs = inner.description, inner.needs

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def start(self, model: Any, spec: Any, **kwargs: Any) -> Any:
        growth = self.inner.start(model, spec, **kwargs)
        with torch.no_grad():
            next(model.host.parameters()).add_(0.5)
        return growth


def test_the_check_fails_an_operator_that_changes_the_host_at_birth() -> None:
    inner = PluginManager(extra=[*first_party(), EXAMPLE], autoload=False)
    operator = inner.registry("operators").get("inner/width")
    assert check_operator(operator) == []
    problems = check_operator(_Shifted(operator))
    assert "born at alpha 0, the host does not compute its old function bit for bit" in problems
    assert "pruned, the host is not the one it was before the growth" in problems


def _grower(operator: str = "inner/width", **extra: Any) -> tuple[Grower, Any, Any, Any]:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train, val = tabular_batches(3, 1, size=16), tabular_batches(2, 2, size=16)
    overrides = [
        "policies.static.widen_at=0.25",  # epoch 2 of 8
        "policies.static.widen_tempo=3",
        f"policies.static.widen_operator={operator}",
        *extra.pop("overrides", []),
    ]
    kwargs = grower_kwargs(overrides=overrides, max_epochs=8, **extra)
    kwargs["plugins"] = (*kwargs["plugins"], EXAMPLE)
    grower = Grower(
        model, MLP_SLOTS, example_input=train[0][0], policy="static", optimizer=opt, **kwargs
    )
    return grower, opt, train, val


def _epochs(grower: Grower, opt: Any, train: Any, val: Any, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        train_one_epoch(grower.module, opt, train)
        out.append(grower.end_epoch(val))
    return out


def _output(grower: Grower, x: torch.Tensor) -> torch.Tensor:
    grower.module.eval()
    with torch.no_grad():
        out: torch.Tensor = grower.module(x)
    return out


def test_static_grows_by_the_named_operator_bit_for_bit_at_birth_then_folds() -> None:
    grower, opt, train, val = _grower()
    x = val[0][0]
    _epochs(grower, opt, train, val, 1)
    train_one_epoch(grower.module, opt, train)
    before = _output(grower, x)
    result = grower.end_epoch(val)  # starts the growth before epoch 2
    (started,) = [e for e in result.events if isinstance(e, HostGrowthStarted)]
    # Only the pair inside the submodule `body`; `body.2 -> head` keeps its width.
    assert started.plan == "body.0 -> body.2: 32 -> 64"
    growth = grower.env.model.host_growth
    assert growth is not None and growth.operator_name == "inner/width"
    ramped = growth.alpha
    assert 0 < ramped < 1
    growth.set_alpha(0.0)
    assert torch.equal(_output(grower, x), before)  # bit for bit at birth
    growth.set_alpha(ramped)
    _epochs(grower, opt, train, val, 2)  # the third tick: alpha 1, folded
    assert growth.stage == Stage.FOSSILIZED
    model: Any = grower.module
    body, head = model.body, model.head
    assert (body[0].out_features, body[2].in_features) == (64, 64)
    assert (body[2].out_features, head.in_features) == (32, 32)
    assert not any("Masked" in type(m).__name__ for m in grower.module.modules())
    held = sorted(id(p) for g in opt.param_groups for p in g["params"])
    assert held == sorted(id(p) for p in grower.module.parameters())
    (record,) = host_growth.records(grower.env)
    assert (record.name, record.stages, record.channels) == ("inner/width", (0,), (64,))


def test_a_resume_mid_ramp_by_the_named_operator_is_exact(tmp_path: Path) -> None:
    grower, opt, train, val = _grower()
    _epochs(grower, opt, train, val, 3)
    assert grower.env.model.host_growth is not None
    torch.save(grower.state_dict(), tmp_path / "grower.pt")
    _epochs(grower, opt, train, val, 3)
    resumed, opt2, *_ = _grower()
    resumed.load_state_dict(torch.load(tmp_path / "grower.pt", weights_only=True))
    assert resumed.env.model.host_growths[0].operator_name == "inner/width"
    _epochs(resumed, opt2, train, val, 3)
    model: Any = resumed.module
    assert model.body[2].out_features == 32
    theirs = resumed.module.state_dict()
    tensors = {k: v for k, v in grower.module.state_dict().items() if torch.is_tensor(v)}
    assert "body.0.weight" in tensors
    for key, value in tensors.items():
        assert torch.equal(value, theirs[key]), key
    moments = [s["exp_avg_sq"] for s in opt.state.values()]
    assert all(
        torch.equal(a, b)
        for a, b in zip([s["exp_avg_sq"] for s in opt2.state.values()], moments, strict=True)
    )


def test_an_unnamed_request_still_grows_every_pair() -> None:
    grower, opt, train, val = _grower(operator="")
    results = _epochs(grower, opt, train, val, 2)
    (started,) = [e for e in results[1].events if isinstance(e, HostGrowthStarted)]
    assert started.plan == "body.0 -> body.2: 32 -> 64, body.2 -> head: 32 -> 64"
    assert grower.env.model.host_growth.operator_name == "layers/width"  # type: ignore[union-attr]


def test_a_stage_outside_a_submodule_is_refused_in_one_line() -> None:
    with pytest.raises(GrowerError, match=r"inner/width widens pairs inside a submodule only"):
        _grower(overrides=["policies.static.widen_stages=[1]"])


def test_an_operator_not_installed_is_refused_in_one_line() -> None:
    with pytest.raises(GrowerError, match=r"width growth operator 'mlp/width' is not installed"):
        _grower(operator="mlp/width")
