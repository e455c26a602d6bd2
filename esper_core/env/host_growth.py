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
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import torch
from attrs import frozen

from esper_core.components.growth_request import DepthGrowthSpec, HostGrowthSpec, WidthGrowthSpec
from esper_core.config_limits import MAX_HOST_WEIGHTS, MAX_WIDEN_WORK
from esper_core.env.birth import init_seed
from esper_core.errors import ConfigError
from esper_core.lifecycle.alpha import CURVES
from esper_core.lifecycle.host_depth import HostDepthGrowth, check_plan, deepenable
from esper_core.lifecycle.host_growth import GrowthError, HostGrowth
from esper_core.lifecycle.host_width import (
    HostWidthGrowth,
    WidthPlan,
    plan_by_factor,
    widenable,
    widened_weights,
    widening_ratio,
)
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.width import CROSS_INITS
from esper_core.lifecycle.width_fold import FoldedParam

if TYPE_CHECKING:
    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.events import StepEvents

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
    operator: str = HostWidthGrowth.operator  # checkpoints before depth growth: width
    mode: str = ""  # depth: stack or identity, ``factor`` times as deep
    factor: int = 0


def check_specs(
    specs: Sequence[HostGrowthSpec], env: MorphogeneticEnv
) -> tuple[HostGrowthSpec, ...]:
    """The specs, or a ConfigError naming every problem (one line each)."""
    if not specs:
        return ()  # nothing scheduled: any host will do
    problems: list[str] = []
    try:
        if any(isinstance(spec, WidthGrowthSpec) for spec in specs):
            widenable(env.model.host)
        if any(isinstance(spec, DepthGrowthSpec) for spec in specs):
            deepenable(env.model.host)
    except GrowthError as exc:
        raise ConfigError([str(exc)]) from None
    epochs: list[int] = []
    for spec in specs:
        kind = "width" if isinstance(spec, WidthGrowthSpec) else "depth"
        name = f"{kind} growth at {spec.at:g}"
        if not 0 <= spec.at < 1:
            problems.append(f"{name}: `at` is a fraction of the run in [0, 1), got {spec.at}")
        if spec.tempo < 1:
            problems.append(f"{name}: tempo {spec.tempo}: the ramp needs at least 1 epoch")
        if spec.curve not in CURVES:
            problems.append(f"{name}: curve {spec.curve!r}; expected one of {', '.join(CURVES)}")
        if isinstance(spec, DepthGrowthSpec):
            try:
                check_plan(env.model.host, spec.mode, spec.factor, spec.stages)
            except GrowthError as exc:
                problems.append(f"{name}: {exc}")
            # At most factor x the host's weights (each stage or the stack grows that much).
            weights = spec.factor * sum(p.numel() for p in env.model.host.parameters())
            if weights > MAX_HOST_WEIGHTS:
                problems.append(
                    f"{name}: the deepened host would hold up to {weights:,} weights (factor "
                    f"{spec.factor}); at most {MAX_HOST_WEIGHTS:,}: lower the factor"
                )
        else:
            problems += _width_problems(spec, name, env)
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


def _width_problems(spec: WidthGrowthSpec, name: str, env: MorphogeneticEnv) -> list[str]:
    problems = []
    if spec.factor <= 1:
        problems.append(f"{name}: factor {spec.factor} must exceed 1 (it widens)")
    if spec.cross_init not in CROSS_INITS:
        problems.append(
            f"{name}: cross_init {spec.cross_init!r}; expected one of {', '.join(CROSS_INITS)}"
        )
    if spec.factor > 1:
        try:  # the stages, and a transformer's head dimension
            plan = plan_by_factor(env.model.host, spec.factor, spec.stages)
        except GrowthError as exc:
            problems.append(f"{name}: {exc}")
        else:
            weights = widened_weights(env.model.host, plan)
            if weights > MAX_HOST_WEIGHTS:
                problems.append(
                    f"{name}: the widened host would hold up to {weights:,} weights "
                    f"(factor {spec.factor:g}); at most {MAX_HOST_WEIGHTS:,}, as a task "
                    "builds a host: lower the factor or widen fewer stages"
                )
            work = widening_ratio(env.model.host, plan) ** 2
            if work > MAX_WIDEN_WORK:
                # The weights may fit while every later epoch takes minutes, not seconds.
                problems.append(
                    f"{name}: the widened host would train up to {work:g} x the FLOPs per "
                    f"sample of the host as built (factor {spec.factor:g}, squared), so every "
                    f"epoch after it would take that much longer; at most {MAX_WIDEN_WORK:g} x: "
                    f"choose a factor of at most {math.sqrt(MAX_WIDEN_WORK):g}"
                )
    return problems


def start_due(env: MorphogeneticEnv, events: StepEvents) -> None:
    """Start the growth scheduled for the epoch about to train, if any: called where the
    next observation is built, so its masks already keep seeds out of the slots it touches."""
    for spec in env.host_growth_specs:
        if spec.epoch(env.max_epochs) == env.epoch:
            start_spec(env, spec, events, "host growth")


def start_spec(env: MorphogeneticEnv, spec: HostGrowthSpec, events: StepEvents, who: str) -> None:
    """Start ``spec`` now, before the epoch ``env.epoch`` trains (``who`` asked for it)."""
    try:
        if isinstance(spec, DepthGrowthSpec):
            start_depth(env, spec.mode, spec.factor, spec.tempo, spec.curve, spec.stages)
        else:
            plan = plan_by_factor(env.model.host, spec.factor, spec.stages)
            start(env, plan, spec.tempo, spec.curve, spec.cross_init)
    except GrowthError as exc:
        raise ConfigError([f"{who} at epoch {env.epoch}: {exc}"]) from None
    events.host_growth_started(env, env.model.host_growths[-1])
    # Born at alpha 0 (the host's function, bit for bit), the growth trains its
    # first epoch at the ramp's first tick, as a seed blending from germination.
    tick(env, events)


def start(env: MorphogeneticEnv, plan: WidthPlan, tempo: int, curve: str, cross_init: str) -> None:
    """Widen the host as ``plan`` says, at alpha 0; the host optimizer follows."""
    generator = _generator(env)
    _born(
        env,
        lambda: HostWidthGrowth(
            env.model,
            plan,
            tempo=tempo,
            curve=curve,
            cross_init=cross_init,
            generator=generator,
            born_epoch=env.epoch,
        ),
    )


def start_depth(
    env: MorphogeneticEnv,
    mode: str,
    factor: int,
    tempo: int,
    curve: str,
    stages: tuple[int, ...] = (),
) -> None:
    """Deepen the host's stack (a CNN's ``stages``) ``factor`` times (``mode``: stack or
    identity), at alpha 0; the host optimizer follows."""
    generator = _generator(env)
    _born(
        env,
        lambda: HostDepthGrowth(
            env.model,
            mode,
            factor,
            stages=stages,
            tempo=tempo,
            curve=curve,
            generator=generator,
            born_epoch=env.epoch,
        ),
    )


def _generator(env: MorphogeneticEnv) -> torch.Generator:
    return torch.Generator().manual_seed(
        init_seed(env.seed, INIT_OFFSET + len(env.model.host_growths))
    )


def _born(env: MorphogeneticEnv, grow: Callable[[], HostGrowth]) -> None:
    model = env.model
    if model.host_growth is not None:
        raise GrowthError(
            f"a {model.host_growth.operator} growth of the host is still in flight; "
            "fossilize or prune it first"
        )
    model.host_growths.append(grow())
    host_changed(env)


def tick(env: MorphogeneticEnv, events: StepEvents) -> None:
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


def prune(env: MorphogeneticEnv, events: StepEvents | None = None, reason: str = "") -> bool:
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


def host_changed(env: MorphogeneticEnv, folded: Sequence[FoldedParam] = ()) -> None:
    """What follows a change of the host's parameters: its optimizer, its parameter
    count, the table of which blueprint fits which slot."""
    env.trainer.host_changed(folded)
    env.host_params = env.model.host_param_count()
    env.fits = slot_fits(env)


def slot_fits(env: MorphogeneticEnv) -> torch.Tensor:
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


def records(env: MorphogeneticEnv) -> tuple[GrowthRecord, ...]:
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
    )
    if isinstance(g, HostDepthGrowth):
        return attrs.evolve(record, mode=g.mode, factor=g.factor, stages=g.stages)
    assert isinstance(g, HostWidthGrowth)
    return attrs.evolve(
        record, stages=g.plan.stages, channels=g.plan.channels, cross_init=g.cross_init
    )


def replay(env: MorphogeneticEnv, saved: Sequence[GrowthRecord]) -> None:
    """Rebuild a checkpoint's growths on the env's fresh host, before its weights load
    (they overwrite every value set here: new weights, masks, statistics)."""
    for record in saved:
        env.epoch = record.epoch
        if record.operator == HostDepthGrowth.operator:
            start_depth(env, record.mode, record.factor, record.tempo, record.curve, record.stages)
        else:
            plan = WidthPlan(record.stages, record.channels)
            start(env, plan, record.tempo, record.curve, record.cross_init)
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
