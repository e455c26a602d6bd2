"""Host growth in an env: the width and depth growths a policy schedules
(``SchedulesHostGrowth``).

Each growth is born just before the epoch its spec names (at alpha 0: the host computes
bit for bit what it did), takes its ramp's first tick at once, as a seed blending from
germination does, ticks once per epoch alongside the slots' alphas, and is fossilized
(its masks folded into plain layers of the new width or plain blocks of the deeper
stack) at the end of the epoch its ramp
reaches 1. The host optimizer follows every
change of the host's parameter set (:meth:`EpochTrainer.host_changed`). A governor
rollback prunes a growth in flight, like a live seed, and no snapshot is taken while one
is in flight, so the snapshot always fits the host a rollback restores.

Every growth of the episode is recorded (:class:`GrowthRecord`) so a checkpoint replays
them onto a freshly built host before it loads the weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import torch
from attrs import frozen
from torch import nn

from esper_core.components.growth_operator import GrowthOperator
from esper_core.components.growth_request import DepthGrowthSpec, HostGrowthSpec, WidthGrowthSpec
from esper_core.env.init_seeds import init_seed
from esper_core.errors import ConfigError
from esper_core.lifecycle.alpha import CURVES
from esper_core.lifecycle.host_growth import DepthError, GrowthError, HostGrowth, WidthError
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.width_fold import FoldedParam

if TYPE_CHECKING:
    from esper_core.env.growing import Checking, Growing, GrowthEvents, HostCount

# Growth k of an episode initialises its new weights from init_seed(seed, OFFSET + k): far
# from the seeds' germination counts, so growing the host never shifts a seed's init.
INIT_OFFSET = 1_000_000


@frozen
class GrowthRecord:
    """A growth of this episode, enough to rebuild it: its plan, ramp and where it is."""

    stages: tuple[int, ...]  # the stages widened (to ``channels``) or deepened
    channels: tuple[int, ...]
    tempo: int
    curve: str
    cross_init: str
    stage: str  # Stage value: blending, holding, fossilized or pruned
    step: int  # ticks of the ramp taken
    epoch: int  # the epoch it started at
    operator: str = "width"  # the kind (checkpoints before depth growth: width)
    mode: str = ""  # depth: stack or identity, ``factor`` times as deep
    factor: int = 0
    # The registered operator (checkpoints before operators were plugins: none, the one
    # of its kind the host declares sites for).
    name: str = ""


_ERRORS: dict[str, type[GrowthError]] = {"width": WidthError, "depth": DepthError}


def operator_for(
    operators: Mapping[str, GrowthOperator], host: nn.Module, kind: str, name: str = ""
) -> GrowthOperator:
    """The operator that grows ``host`` in ``kind`` (``name``: that one), or a one-line
    error saying why none can: the dispatch asks each operator for the host's sites."""
    error = _ERRORS.get(kind, GrowthError)
    if name:
        operator = operators.get(name)
        if operator is None or operator.kind != kind:
            known = ", ".join(k for k, op in operators.items() if op.kind == kind) or "none"
            raise error(
                f"{kind} growth operator {name!r} is not installed; installed: {known} "
                "(an operator comes from a plugin: esper plugins lists them)"
            )
        if not operator.sites(host):
            raise error(f"{type(host).__name__} cannot grow by {name}: it needs {operator.needs}")
        candidates = [operator]
    else:
        # An operator that narrows another (one submodule's widths) grows only where a
        # request names it: installing it never changes what an unnamed request grows.
        candidates = [
            op
            for op in operators.values()
            if op.kind == kind and not getattr(op, "by_name_only", False) and op.sites(host)
        ]
    if not candidates:
        # An operator of the kind whose host declares no site (a user's module with no
        # layer pair) says why; else the hosts each operator needs.
        refusals = [op.refusal(host) for op in operators.values() if op.kind == kind]
        refusal = next((r for r in refusals if r is not None), None)
        if refusal is not None:
            raise error(refusal)
        needs = " or ".join(op.needs for op in operators.values() if op.kind == kind)
        raise error(
            f"{type(host).__name__} cannot grow in {kind}: host {kind} growth needs "
            f"{needs or 'a growth operator of that kind (pip install -e plugins/esper-operators)'}"
        )
    operator = candidates[0]
    refusal = operator.refusal(host)
    if refusal is not None:
        raise error(refusal)
    return operator


def check_specs(specs: Sequence[HostGrowthSpec], env: Checking) -> tuple[HostGrowthSpec, ...]:
    """The specs, or a ConfigError naming every problem (one line each)."""
    if not specs:
        return ()  # nothing scheduled: any host will do
    problems: list[str] = []
    host = env.model.host
    try:
        operators = [operator_for(env.operators, host, spec.kind, spec.operator) for spec in specs]
    except GrowthError as exc:
        raise ConfigError([str(exc)]) from None
    epochs: list[int] = []
    for spec, operator in zip(specs, operators):
        name = f"{spec.kind} growth at {spec.at:g}"
        if not 0 <= spec.at < 1:
            problems.append(f"{name}: `at` is a fraction of the run in [0, 1), got {spec.at}")
        if spec.tempo < 1:
            problems.append(f"{name}: tempo {spec.tempo}: the ramp needs at least 1 epoch")
        if spec.curve not in CURVES:
            problems.append(f"{name}: curve {spec.curve!r}; expected one of {', '.join(CURVES)}")
        problems += [f"{name}: {problem}" for problem in operator.problems(host, spec)]
        epoch = spec.epoch(env.max_epochs)
        if epoch >= env.max_epochs:
            # It would grow after the last epoch: a growth that never trains, reported
            # as kept.
            latest = (env.max_epochs - 1) / env.max_epochs
            problems.append(
                f"{name}: starts at epoch round({spec.at:g} x {env.max_epochs}) = {epoch}, "
                f"after the run's last epoch ({env.max_epochs - 1}); choose at most {latest:g}"
            )
        epochs.append(epoch)
    timeline = sorted(zip(epochs, (spec.tempo for spec in specs)))
    for (earlier, tempo), (later, _) in itertools.pairwise(timeline):
        # Started (and ticked once) before epoch e, a growth trains at alpha below 1
        # through epoch e + tempo - 2 and is folded at its end.
        if later < earlier + max(tempo - 1, 1):
            problems.append(
                f"host growths at epochs {earlier} and {later} overlap: the first ramps "
                f"until epoch {earlier + tempo - 2}; start the second at epoch "
                f"{earlier + max(tempo - 1, 1)} or later"
            )
    if problems:
        raise ConfigError(problems)
    return tuple(specs)


def start_due(env: Growing, events: GrowthEvents) -> None:
    """Start the growth scheduled for the epoch about to train, if any: called where the
    next observation is built, so its masks already keep seeds out of the slots it touches."""
    for spec in env.host_growth_specs:
        if spec.epoch(env.max_epochs) == env.epoch:
            start_spec(env, spec, events, "host growth")


def folds_at_birth(env: Checking) -> bool:
    """Whether a growth scheduled at epoch 0 folds before the first epoch (a one-epoch
    ramp: born at alpha 0, its first tick reaches 1 and it fossilizes at once)."""
    return any(
        spec.epoch(env.max_epochs) == 0 and spec.tempo == 1 for spec in env.host_growth_specs
    )


def start_at_birth(env: Growing, events: GrowthEvents) -> bool:
    """Start the growth scheduled at epoch 0 now, before seeds are installed at birth, if
    it folds before the first epoch (:mod:`esper_core.env.birth`); whether it did."""
    if not folds_at_birth(env):
        return False
    start_due(env, events)
    return True


def start_spec(env: Growing, spec: HostGrowthSpec, events: GrowthEvents, who: str) -> None:
    """Start ``spec`` now, before the epoch ``env.epoch`` trains (``who`` asked for it)."""
    try:
        start(env, spec)
    except GrowthError as exc:
        raise ConfigError([f"{who} at epoch {env.epoch}: {exc}"]) from None
    events.host_growth_started(env, env.model.host_growths[-1])
    # Born at alpha 0 (the host's function, bit for bit), the growth trains its
    # first epoch at the ramp's first tick, as a seed blending from germination.
    tick(env, events)


def start(env: Growing, spec: HostGrowthSpec, replayed: GrowthRecord | None = None) -> None:
    """Grow the host as ``spec`` asks (``replayed``: as a checkpoint's record says), at
    alpha 0, by the operator that grows this host; the host optimizer follows."""
    host = env.model.host
    kind = replayed.operator if replayed is not None else spec.kind
    name = replayed.name if replayed is not None else spec.operator
    operator = operator_for(env.operators, host, kind, name)
    generator = _generator(env)

    def grow() -> HostGrowth:
        growth = operator.start(
            env.model, spec, generator=generator, born_epoch=env.epoch, replayed=replayed
        )
        growth.operator_name = operator.name
        return growth

    _born(env, grow)


def _generator(env: Growing) -> torch.Generator:
    return torch.Generator().manual_seed(
        init_seed(env.seed, INIT_OFFSET + len(env.model.host_growths))
    )


def _born(env: Growing, grow: Callable[[], HostGrowth]) -> None:
    model = env.model
    if model.host_growth is not None:
        raise GrowthError(
            f"a {model.host_growth.operator} growth of the host is still in flight; "
            "fossilize or prune it first"
        )
    model.host_growths.append(grow())
    host_changed(env)


def tick(env: Growing, events: GrowthEvents) -> None:
    """One tick of the ramp; fossilize the growth once it holds at alpha 1."""
    growth = env.model.host_growth
    if growth is None:
        return
    before, params_before = growth.stage, env.host_params - growth.new_param_count()
    growth.tick()
    events.host_growth_stage(env, growth, before)
    if growth.stage == Stage.HOLDING:
        folded = growth.fossilize()
        host_changed(env, folded)
        events.host_growth_fossilized(env, growth, params_before)
        events.host_growth_stage(env, growth, Stage.HOLDING)
        env.governor.take_snapshot(env.model, env.epoch)


def prune(env: Growing, events: GrowthEvents | None = None, reason: str = "") -> bool:
    """Prune the growth in flight (a rollback: ``reason``); whether there was one. A
    checkpoint's replay passes no ``events``: it rebuilds what was already told."""
    growth = env.model.host_growth
    if growth is None:
        return False
    before, params_before = growth.stage, env.host_params
    growth.prune()
    host_changed(env)
    if events is not None:
        events.host_growth_pruned(env, growth, before, params_before, reason)
        events.host_growth_stage(env, growth, before)
    return True


def host_changed(env: Growing, folded: Sequence[FoldedParam] = ()) -> None:
    """What follows a change of the host's parameters: its optimizer, its parameter
    count, the table of which blueprint fits which slot."""
    env.trainer.host_changed(folded)
    env.host_params = env.model.host_param_count()
    env.fits = slot_fits(env)


def slot_fits(env: Growing) -> torch.Tensor:
    """Which blueprint can grow in which slot (the env's action masks): a branch only
    where a segment follows, and nothing where a host growth in flight is changing the
    activations' width (or is putting gated blocks on top of the stack)."""
    keys = env.space.blueprints
    growth = env.model.host_growth
    busy = set(growth.affected_slots()) if growth is not None else set()
    return torch.tensor(
        [
            [
                sid not in busy and env.blueprints[key].fits(env.model.slot(sid).spec) is None
                for key in keys
            ]
            for sid in env.space.slot_ids
        ],
        dtype=torch.bool,
    ).reshape(len(env.space.slot_ids), len(env.space.blueprints))


def records(env: HostCount) -> tuple[GrowthRecord, ...]:
    return tuple(_record(g) for g in env.model.host_growths)


def _record(g: HostGrowth) -> GrowthRecord:
    record = GrowthRecord(
        stages=(),
        channels=(),
        tempo=g.schedule.ticks,
        curve=g.schedule.curve,
        cross_init="",
        stage=g.stage.value,
        step=g.schedule.step,
        epoch=g.born_epoch,
        operator=g.operator,
        name=g.operator_name,
    )
    return attrs.evolve(record, **g.record())


def replay(env: Growing, saved: Sequence[GrowthRecord]) -> None:
    """Rebuild a checkpoint's growths on the env's fresh host, before its weights load
    (they overwrite every value set here: new weights, masks, statistics)."""
    for record in saved:
        env.epoch = record.epoch
        start(env, record_spec(record), record)
        growth = env.model.host_growths[-1]
        if record.stage == Stage.PRUNED.value:
            prune(env)
            continue
        growth.schedule.step = record.step
        growth.set_alpha(growth.alpha)
        if growth.schedule.done:
            growth.stage = Stage.HOLDING
        if record.stage == Stage.FOSSILIZED.value:
            growth.set_alpha(1.0)
            host_changed(env, growth.fossilize())


def record_spec(record: GrowthRecord) -> HostGrowthSpec:
    """The request a record's growth answered, at its ramp (its plan is the record's)."""
    if record.operator == "depth":
        return DepthGrowthSpec(
            at=0.0,
            mode=record.mode,
            factor=record.factor,
            tempo=record.tempo,
            curve=record.curve,
            stages=record.stages,
            operator=record.name,
        )
    return WidthGrowthSpec(
        at=0.0,
        stages=record.stages,
        tempo=record.tempo,
        curve=record.curve,
        cross_init=record.cross_init,
        operator=record.name,
    )
