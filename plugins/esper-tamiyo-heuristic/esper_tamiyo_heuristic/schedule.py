"""``policies.schedule``: grow given seeds at a fixed fraction of the run.

The growth literature's baseline (G_stack, bert2BERT, masked structural growth) is "grow
by operator X at a fraction f of the budget", with X and f chosen on tuning seeds. Here X
is a list of seeds (``blueprint@slot[:style]``, as ``policies.static`` names them) and f is
``at``: from epoch ``round(at * max_epochs)`` the policy germinates the seeds in the order
given, one an epoch (one action an epoch), then takes each through the lifecycle as fast as
its gates allow (ADVANCE when a gate passes, FOSSILIZE once its HOLDING gate passes). It
judges nothing and never prunes: a schedule keeps what it grows (the governor may still
roll a seed back, and a seed whose slot is taken or illegal when its turn comes waits).

Priority each epoch: the next germination that is due, then a fossilization, then an
advance; so every seed of the schedule starts as close to ``at`` as one action an epoch
allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define, frozen

from esper_core import hookimpl
from esper_core.converter import each, in_range, options_field
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.rules import ADVANCE_TARGET
from esper_core.lifecycle.seed_spec import DEFAULT_STYLE
from esper_core.lifecycle.stages import Stage
from esper_tamiyo_heuristic.memory import resolve_blueprint_order
from esper_tamiyo_heuristic.static import _seed_spec

if TYPE_CHECKING:
    from esper_core.components.policy import PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action, ActionSpace

MAX_TEMPO = 10_000


def _some_seeds(value: Any) -> str | None:
    return None if value else 'name at least one seed, e.g. ["conv_layer@r0c0"]'


@define
class ScheduleOptions:
    seeds: list[str] = options_field(
        [],
        lambda v: _some_seeds(v) or each(_seed_spec)(v),
        "Seeds to grow, in order: blueprint@slot, with :style for a blend style other than "
        'linear_add (e.g. ["conv_layer@r0c0", "conv_layer@r0c1"]).',
    )
    at: float = options_field(
        0.25,
        in_range(0.0, 1.0),
        "When the first seed germinates, as a fraction of the run's epochs (0: at once).",
    )
    tempo: int = options_field(
        5,
        in_range(1, MAX_TEMPO, integer=True),
        "Alpha ramp length in epochs (one of lifecycle.tempos).",
    )


@frozen
class PlannedSeed:
    """One seed of the schedule as action-space indices."""

    spec: str
    slot: int
    blueprint: int
    style: int


def plan(specs: Sequence[str], space: ActionSpace) -> tuple[PlannedSeed, ...]:
    """The seeds as indices into ``space``; every unknown name in one error."""
    problems: list[str] = []
    planned: list[PlannedSeed] = []
    for spec in specs:
        name, _, rest = spec.partition("@")
        slot_id, _, style = rest.partition(":")
        style = style or DEFAULT_STYLE
        found = [k for k in resolve_blueprint_order([name], space.blueprints) if _named(k, name)]
        where = f"policies.schedule.seeds: {spec!r}"
        if not found:
            problems.append(
                f"{where}: no blueprint {name!r} in this run's env.blueprints "
                f"({', '.join(space.blueprints)}); add it there (opt-in blueprints must be named)"
            )
        if slot_id not in space.slot_ids:
            problems.append(f"{where}: no slot {slot_id!r} (slots: {', '.join(space.slot_ids)})")
        if style not in space.styles:
            problems.append(f"{where}: style {style!r} is not in lifecycle.styles")
        if found and slot_id in space.slot_ids and style in space.styles:
            planned.append(
                PlannedSeed(
                    spec,
                    space.slot_ids.index(slot_id),
                    space.blueprints.index(found[0]),
                    space.styles.index(style),
                )
            )
    slots = [p.slot for p in planned]
    if len(set(slots)) != len(slots):
        problems.append("policies.schedule.seeds: one seed a slot (a slot is named twice)")
    if problems:
        raise ConfigError(problems)
    return tuple(planned)


def _named(key: str, name: str) -> bool:
    return key == name or key.split("/", 1)[-1] == name


class SchedulePolicy:
    """Germinates its seeds from a fixed epoch on and keeps them (module docstring)."""

    name: ClassVar[str] = "schedule"
    description: ClassVar[str] = (
        "Grow given seeds at a fixed fraction of the run and keep them (the literature's "
        "grow-at-f baseline)"
    )
    Options: ClassVar[type] = ScheduleOptions

    def __init__(self, options: ScheduleOptions, context: PolicyContext) -> None:
        if options.tempo not in context.space.tempos:
            tempos = ", ".join(str(t) for t in context.space.tempos)
            raise ConfigError(
                [
                    f"policies.schedule.tempo: {options.tempo} is not one of this run's "
                    f"lifecycle.tempos ({tempos})"
                ]
            )
        self.options = options
        self.context = context
        self.seeds = plan(options.seeds, context.space)
        self.tempo = context.space.tempos.index(options.tempo)
        self.start = round(options.at * context.max_epochs)
        if self.start >= context.max_epochs:
            # Due after the last epoch, nothing would grow: the run would be `wait`'s.
            latest = (context.max_epochs - 1) / context.max_epochs
            raise ConfigError(
                [
                    f"policies.schedule.at: {options.at:g} of {context.max_epochs} epochs is "
                    f"epoch {self.start}, after the run's last epoch ({context.max_epochs - 1}), "
                    f"so nothing would grow; choose at most {latest:g}"
                ]
            )
        # Per env: how many of the schedule's seeds have germinated this episode.
        self.germinated: dict[int, int] = {}

    def reset(self, env_indices: Sequence[int]) -> None:
        for index in env_indices:
            self.germinated.pop(int(index), None)

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        return [self.decide(obs) for obs in observations]

    def decide(self, obs: Observation) -> Action:
        from esper_core.lifecycle.actions import WAIT, Action, LifecycleOp

        env = obs.env_index
        done = self.germinated.get(env, 0)
        if done < len(self.seeds) and obs.epoch >= self.start:
            seed = self.seeds[done]
            if self._may_germinate(obs, seed):
                self.germinated[env] = done + 1
                return Action(
                    LifecycleOp.GERMINATE,
                    slot=seed.slot,
                    blueprint=seed.blueprint,
                    style=seed.style,
                    tempo=self.tempo,
                ).because(f"{seed.spec}: scheduled from epoch {self.start}")
        for op, stages in ((LifecycleOp.FOSSILIZE, {Stage.HOLDING}), (LifecycleOp.ADVANCE, None)):
            for i, report in enumerate(obs.slots):
                gate = obs.gates[i] if i < len(obs.gates) else None
                wanted = report.stage in (stages or ADVANCE_TARGET)
                if wanted and gate is not None and gate.passed and _legal(obs, op, i):
                    return Action(op, slot=i).because(f"{report.slot_id}: {gate.reason}")
        if obs.epoch < self.start:
            return WAIT.because(f"policies.schedule grows from epoch {self.start}")
        return WAIT.because("policies.schedule: every seed scheduled; waiting on their gates")

    def _may_germinate(self, obs: Observation, seed: PlannedSeed) -> bool:
        from esper_core.lifecycle.actions import LifecycleOp

        masks = obs.masks
        return (
            _legal(obs, LifecycleOp.GERMINATE, seed.slot)
            and bool(masks.blueprint[seed.slot, seed.blueprint])
            and obs.slots[seed.slot].stage == Stage.DORMANT
        )

    def observe(self, results: Sequence[StepResult]) -> None:
        """A schedule does not learn from outcomes."""

    def state_dict(self) -> dict[str, Any]:
        return {"germinated": {str(k): v for k, v in self.germinated.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            self.germinated = {int(k): int(v) for k, v in state["germinated"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"policies.schedule: the checkpoint's policy state is not a schedule's ({exc})"
            ) from exc


def _legal(obs: Observation, op: Any, slot: int) -> bool:
    masks = obs.masks
    return bool(masks.op[op]) and bool(masks.slot[op][slot])


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(SchedulePolicy)
