"""The attack on width growth through the Grower, replayed as a library user meets
it (cases named ``53 Grower ...``, run by :mod:`tests.reliability.replay_library`): a
refusal is one ``error:`` line, a case that must work raises ``Wrong`` when it does not."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from tests.reliability.replay_case import Case, Setup


class Wrong(Exception):
    """The library accepted the input but did the wrong thing."""


def _hooked_layers_kept(_d: Path) -> None:
    import torch

    from esper_core.grow.layer_growth import widenable_layers
    from esper_core.grow.layer_widening import LayerWidening
    from tests.integration.test_grower_own_layers import Tagged, _hooked

    model = _hooked()
    x = torch.randn(4, 8)
    pairs = list(widenable_layers(model, x).pairs)
    layers = list(model)
    widening = LayerWidening(model, pairs, [16, 16], [19, 19], None, "random")
    widening.install()
    with torch.no_grad():
        widening.set_mask(1.0)
        masked = model(x)
        widening.fold()
        folded = model(x)
    if any(a is not b for a, b in zip(model, layers)) or type(model[2]) is not Tagged:
        raise Wrong("the fold replaced the user's layer objects")
    if not hasattr(model[2], "tag"):
        raise Wrong("the fold dropped an attribute of the user's layer")
    if not torch.allclose(folded, masked, atol=1e-5):
        raise Wrong(f"folded differs from masked by {float((folded - masked).abs().max()):.3g}")


def _own_forward(_d: Path) -> None:
    from tests.integration.test_grower_own_layers import OwnForwardMLP, ScaledLinear, _grower

    _grower(OwnForwardMLP(ScaledLinear(8, 16)), "act")
    raise Wrong("a layer with a forward of its own was widened")


def _training_only_branch(_d: Path) -> None:
    from tests.integration.test_grower_own_layers import AuxInTraining, _grower

    _grower(AuxInTraining(), "act")
    raise Wrong("a pair that a training forward breaks was accepted")


def _close_mid_ramp(_d: Path) -> None:
    import torch

    from tests.integration.own_model_helpers import mlp
    from tests.integration.test_grower_growth_edges import _epochs, _grower

    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grower = _grower(model, opt)
    _epochs(grower, opt, 3)
    if grower.close() != "pruned":
        raise Wrong("close() found no growth in flight to prune")
    try:
        mlp().load_state_dict(model.state_dict())
    except RuntimeError as exc:
        raise Wrong(f"the closed model's state_dict does not load into its class: {exc}") from None


def _left_out_of_the_optimizer(_d: Path) -> None:
    import torch

    from tests.integration.own_model_helpers import mlp
    from tests.integration.test_grower_growth_edges import _epochs, _grower

    model = mlp()
    opt = torch.optim.AdamW(model.head.parameters(), lr=1e-2)
    grower = _grower(model, opt)
    _epochs(grower, opt, 5)
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    if not {id(p) for p in model.body.parameters()}.isdisjoint(held):
        raise Wrong("layers the user left out of the optimizer joined it")


def _lbfgs(_d: Path) -> None:
    import torch

    from tests.integration.own_model_helpers import mlp
    from tests.integration.test_grower_growth_edges import _grower

    model = mlp()
    _grower(model, torch.optim.LBFGS(model.parameters()))
    raise Wrong("LBFGS was accepted")


def _other_widen_factor(_d: Path) -> None:
    import torch

    from tests.integration.own_model_helpers import mlp
    from tests.integration.test_grower_growth_edges import _epochs, _grower

    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grower = _grower(model, opt, "policies.static.widen_factor=2")
    _epochs(grower, opt, 3)
    saved = copy.deepcopy(grower.state_dict())
    other = mlp()
    three = _grower(other, torch.optim.AdamW(other.parameters()), "policies.static.widen_factor=3")
    three.load_state_dict(saved)
    raise Wrong("a state of widen_factor=2 loaded into a grower of widen_factor=3")


def _pretrained_asked_to_widen(_d: Path) -> None:
    from esper_core.grow.grower import Grower
    from tests.integration.own_model_helpers import MLP_SLOTS, grower_kwargs, mlp
    from tests.integration.test_grower_growth_edges import TRAIN

    overrides = ['policies.ppo.host_growth="widen"']
    Grower(
        mlp(), MLP_SLOTS, example_input=TRAIN[0][0], policy="ppo:docs/results/checkpoints/ppo-pretrained-run-1.pt",
        **grower_kwargs(overrides=overrides, max_epochs=8),
    )  # fmt: skip
    raise Wrong("a checkpoint without a growth head took host_growth=widen")


FUNCTIONS: dict[str, Callable[[Path], None]] = {
    "growth-hooked-layers": _hooked_layers_kept,
    "growth-own-forward": _own_forward,
    "growth-training-only-branch": _training_only_branch,
    "growth-close-mid-ramp": _close_mid_ramp,
    "growth-left-out-of-optimizer": _left_out_of_the_optimizer,
    "growth-lbfgs": _lbfgs,
    "growth-other-widen-factor": _other_widen_factor,
    "growth-pretrained-widen": _pretrained_asked_to_widen,
}


def cases(case: Callable[[str], Setup]) -> tuple[Case, ...]:
    """The cases, each set up by ``case(name)`` (replay_library's process runner)."""
    return (
        Case(
            "53 Grower: hooks and attributes on widened layers (kept at the fold)",
            case("growth-hooked-layers"),
            code=0,
        ),
        Case(
            "53 Grower: a Linear subclass with its own forward (refused)",
            case("growth-own-forward"),
            says="has a forward of its own",
        ),
        Case(
            "53 Grower: a pair that only a training forward breaks (refused)",
            case("growth-training-only-branch"),
            says="in training mode",
        ),
        Case(
            "53 Grower.close() mid-ramp (pruned; loads into the user's class)",
            case("growth-close-mid-ramp"),
            code=0,
        ),
        Case(
            "53 Grower: layers left out of the optimizer (stay out)",
            case("growth-left-out-of-optimizer"),
            code=0,
        ),
        Case(
            "53 Grower: torch.optim.LBFGS (refused)",
            case("growth-lbfgs"),
            says="LBFGS keeps its own list",
        ),
        Case(
            "53 Grower.load_state_dict: widen_factor 2 into 3 (refused)",
            case("growth-other-widen-factor"),
            says="policies.static.widen_factor=2.0",
        ),
        Case(
            "53 Grower: a PPO checkpoint without a growth head asked to widen (refused)",
            case("growth-pretrained-widen"),
            says="no host-growth head",
        ),
    )
