"""Host width growth in the user's own loop: the policy's growth widens the user's layer
pairs (:mod:`~esper_core.grow.layer_pairs`), after a check on a copy of the model that
the widening keeps its function (bit for bit at mask 0) and runs at mask 1."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from esper_core.components.policy import DepthGrowthSpec, GrowsHostOnline, SchedulesHostGrowth
from esper_core.env.host_growth_online import check_declared, where_possible
from esper_core.errors import ConfigError, GrowerError
from esper_core.grow.layer_pairs import LayerPair, WidthReport, find_pairs
from esper_core.grow.layer_widening import LayerWidening
from esper_core.grow.module_checks import check_arguments, copied, dry_run
from esper_core.grow.module_host import ModuleHost, layer_names

if TYPE_CHECKING:
    from esper_core.env.env import MorphogeneticEnv


def _same_draws(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)`` with the random generators seeded the same each time (dropout in
    training mode draws the same masks), and left as they were."""
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        out: torch.Tensor = model(x)
    return out


def _mode_problem(
    model: nn.Module, pairs: list[LayerPair], example_input: torch.Tensor, training: bool
) -> str | None:
    """:func:`widening_problem` in one mode. In training mode the new channels change
    what dropout draws for the old ones, so the output at mask 0 is not compared there."""
    twin = copied(model, "a width growth is checked on a copy").train(training)
    with torch.no_grad():
        before = _same_draws(twin, example_input)
        widening = LayerWidening(
            twin, pairs, [p.width for p in pairs], [p.width + 1 for p in pairs], None, "random"
        )
        widening.install()
        try:
            born = _same_draws(twin, example_input)
            if not training and not torch.equal(born, before):
                return "widening it changes the model's output (an operation between reads across channels)"
            widening.set_mask(1.0)
            after = _same_draws(twin, example_input)
            if after.shape != before.shape:
                return "widening it changes the output's shape"
            widening.fold()
            folded = _same_draws(twin, example_input)
        except Exception as exc:  # whatever the user's forward raises on the masked layers
            first = (str(exc).strip().splitlines() or [""])[0]
            return (
                f"the model's forward fails on the widened layers ({type(exc).__name__}: {first})"
            )
    # The fold sums in another order: a float error, not a function, may differ.
    scale = 1.0 + float(after.abs().max()) if after.numel() else 1.0
    tolerance = (
        max(1e-4, 8 * torch.finfo(after.dtype).eps) * scale if after.is_floating_point() else 0.0
    )
    if folded.shape != after.shape or float((folded - after).abs().max()) > tolerance:
        return (
            "its widened layers compute another function once folded (a hook, or a forward "
            "that reads a layer's weight itself)"
        )
    return None


def widening_problem(
    model: nn.Module, pairs: list[LayerPair], example_input: torch.Tensor
) -> str | None:
    """Why widening ``pairs`` of a copy of ``model`` by one channel each fails, in eval
    and in training mode (a forward may differ between them): its output at mask 0 is not
    bit for bit the model's (a forward the walk misread, such as a mean over channels, or
    a hook of the user's that mixes channels), a forward fails at all (a training-mode
    branch that reads the producer's output), or the folded model computes another
    function than the masked one at mask 1 (a fused fast path that reads a layer's
    ``weight`` itself, as ``nn.TransformerEncoderLayer`` does in eval mode). None: fine."""
    for training in (False, True):
        problem = _mode_problem(model, pairs, example_input, training)
        if problem is not None:
            mode = "training" if training else "eval"
            return f"{problem}, in {mode} mode"
    return None


def verified(model: nn.Module, report: WidthReport, example_input: torch.Tensor) -> WidthReport:
    """``report`` without the pairs whose widening fails on a copy of the model
    (:func:`widening_problem`), each named in ``refused`` with why."""
    pairs = list(report.pairs)
    if not pairs or widening_problem(model, pairs, example_input) is None:
        return report
    problems = {pair: widening_problem(model, [pair], example_input) for pair in pairs}
    kept = tuple(pair for pair in pairs if problems[pair] is None)
    failed = [f"{pair.describe()}: {why}" for pair, why in problems.items() if why is not None]
    return WidthReport(kept, (*report.refused, *failed))


def widenable_layers(model: nn.Module, example_input: torch.Tensor) -> WidthReport:
    """Which layer pairs of ``model`` a Grower can widen (``widen_stages`` index them, in
    the order of ``model.named_modules()``), and which layers it cannot and why: the pairs
    the autograd walk finds (:func:`~esper_core.grow.layer_pairs.find_pairs`), each
    checked on a copy of the model. A model that is no nn.Module, an example input it rejects
    and a model that cannot be copied are one ``HostError`` line each, as a Grower's are."""
    check_arguments(model, example_input)
    dry_run(model, example_input)
    return verified(model, find_pairs(model, example_input), example_input)


def allow_layer_growth(
    env: MorphogeneticEnv, policy: Any, host: ModuleHost, example_input: torch.Tensor
) -> None:
    """Let ``policy``'s host growth widen the user's layer pairs; refuse in one line,
    naming the layers and why, what the user's module cannot take."""
    model = host.module
    name = type(model).__name__
    scheduled = policy.host_growths() if isinstance(policy, SchedulesHostGrowth) else ()
    online = policy.online_host_growths() if isinstance(policy, GrowsHostOnline) else ()
    optional = not scheduled and where_possible(policy)
    # A policy that grows where it can and may also widen (the heuristic's host_growth =
    # auto) widens the user's layers and leaves its depth growth out, as on a host with
    # no depth operator; one that asks for depth alone is told why it cannot have it.
    widens = any(not isinstance(spec, DepthGrowthSpec) for spec in online)
    demanded = scheduled if optional and widens else (*scheduled, *online)
    if any(isinstance(spec, DepthGrowthSpec) for spec in demanded):
        raise GrowerError(
            f"the Grower cannot deepen {name} ({layer_names(model)}): depth growth "
            "(deepen_at, a depth host_growth) rewrites the stack of Esper's own hosts; widen "
            "instead (widen_at), or grow the host with esper run --task glyphs/charlm"
        )
    report = widenable_layers(model, example_input)
    if not report.pairs:
        if optional:  # a policy that widens where it can grows this model with seeds alone
            return
        why = "; ".join(report.refused[:3]) or "it has no Linear or Conv2d layer"
        raise GrowerError(
            f"the Grower cannot widen {name}: no Linear or Conv2d feeds a single other one "
            f"through per-channel operations ({why}); grow it with seeds instead"
        )
    host.enable_width(report.pairs, report.refused)
    try:
        if scheduled:
            env.schedule_host_growth(scheduled)
        if online:
            check_declared([env], online, optional=optional)
    except ConfigError as exc:
        raise GrowerError(
            f"{exc.problems[0]}; the stages {name} can widen are {report.describe()}"
        ) from None
