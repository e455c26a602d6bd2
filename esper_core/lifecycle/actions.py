"""The factored action, its vocabulary and the action masks (DOMAIN §5), in one place."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attrs import evolve, field, frozen

# A value class with no dependency of its own: cattrs resolves the annotation at run time.
from esper_core.components.growth_request import HostGrowthSpec
from esper_core.lifecycle import rules

if TYPE_CHECKING:
    # torch is imported where masks are built, so plugins that only name ops and
    # actions (rewards, policies) load without it.
    import torch

    from esper_core.config import EnvSection
    from esper_core.config_lifecycle import LifecycleSection
    from esper_core.lifecycle.gates import GateResult
    from esper_core.lifecycle.slot import SlotReport


class LifecycleOp(enum.IntEnum):
    WAIT = 0
    GERMINATE = 1
    ADVANCE = 2
    SET_ALPHA_TARGET = 3
    PRUNE = 4
    FOSSILIZE = 5


OPS: tuple[LifecycleOp, ...] = tuple(LifecycleOp)
HEADS = ("op", "slot", "blueprint", "style", "tempo", "alpha_target")
# The heads each op reads; the others are irrelevant to it (PPO excludes their log-probs).
OP_HEADS: dict[LifecycleOp, tuple[str, ...]] = {
    LifecycleOp.WAIT: ("op",),
    LifecycleOp.GERMINATE: ("op", "slot", "blueprint", "style", "tempo"),
    LifecycleOp.ADVANCE: ("op", "slot"),
    LifecycleOp.SET_ALPHA_TARGET: ("op", "slot", "alpha_target"),
    LifecycleOp.PRUNE: ("op", "slot"),
    LifecycleOp.FOSSILIZE: ("op", "slot"),
}


@frozen
class Action:
    """One controller decision; every part is an index into the :class:`ActionSpace`.

    ``reason``: why the policy chose it, in the user's terms (``"r0c1: gain +0.041 >=
    0.020"``, ``"no capacity limit: training loss 0.31 < 0.8 x chance 2.30"``). It
    travels with the action to the step result and the epoch event; it is not part of
    the decision itself, so two actions that differ only in their reasons are equal and
    a policy that gives none still works (``""``)."""

    op: LifecycleOp = LifecycleOp.WAIT
    slot: int = 0
    blueprint: int = 0
    style: int = 0
    tempo: int = 0
    alpha_target: int = 0
    # A policy that grows the host when it chooses (GrowsHostOnline) asks here: the
    # growth starts before the epoch this action trains. Part of the decision, so compared.
    host_growth: HostGrowthSpec | None = field(default=None, kw_only=True)
    # Neither compared nor in the repr: it explains the decision and is not part of it.
    reason: str = field(default="", eq=False, repr=False, kw_only=True)

    def because(self, reason: str) -> Action:
        """This action with ``reason`` as its why."""
        return evolve(self, reason=reason)

    def as_indices(self) -> tuple[int, int, int, int, int, int]:
        return (int(self.op), self.slot, self.blueprint, self.style, self.tempo, self.alpha_target)

    @classmethod
    def from_indices(cls, values: Sequence[int]) -> Action:
        if len(values) != len(HEADS):  # was: "not enough values to unpack (expected 6, got 3)"
            raise ValueError(
                f"an action is {len(HEADS)} indices, one per head ({', '.join(HEADS)}); "
                f"got {len(values)}"
            )
        try:
            op, slot, blueprint, style, tempo, alpha_target = (_index(v) for v in values)
        except (TypeError, ValueError):  # was numpy's "cannot convert float NaN to integer"
            raise ValueError(
                f"an action is {len(HEADS)} integer indices, one per head; got {list(values)!r}"
            ) from None
        return cls(LifecycleOp(op), slot, blueprint, style, tempo, alpha_target)


WAIT = Action()


def _index(value: object) -> int:
    number = int(value)  # type: ignore[call-overload]
    if number != value:  # 1.5 is no index
        raise ValueError(value)
    return number


def _named(entries: Sequence[object], index: int) -> str:
    return str(entries[index]) if 0 <= index < len(entries) else f"#{index}"


@frozen
class ActionSpace:
    """The vocabulary of each action head for one task and host."""

    slot_ids: tuple[str, ...]
    blueprints: tuple[str, ...]  # blueprint keys of the host's topology, stable order
    styles: tuple[str, ...]
    tempos: tuple[int, ...]
    alpha_targets: tuple[float, ...]

    @property
    def head_sizes(self) -> dict[str, int]:
        return {
            "op": len(OPS),
            "slot": len(self.slot_ids),
            "blueprint": len(self.blueprints),
            "style": len(self.styles),
            "tempo": len(self.tempos),
            "alpha_target": len(self.alpha_targets),
        }

    def describe(self, action: Action) -> str:
        """The action in words; an index outside its head (an action the env refuses) is
        shown as ``#i``: it raised IndexError after the epoch had trained, and -1 named
        the last entry."""
        op = action.op
        if op == LifecycleOp.WAIT:
            return "WAIT"
        slot = _named(self.slot_ids, action.slot)
        if op == LifecycleOp.GERMINATE:
            return (
                f"GERMINATE {slot} {_named(self.blueprints, action.blueprint)} "
                f"{_named(self.styles, action.style)} "
                f"tempo={_named(self.tempos, action.tempo)}"
            )
        if op == LifecycleOp.SET_ALPHA_TARGET:
            return f"SET_ALPHA_TARGET {slot} {_named(self.alpha_targets, action.alpha_target)}"
        return f"{op.name} {slot}"

    def germinate(
        self, slot_id: str, blueprint: str, style: str | None = None, tempo: int | None = None
    ) -> Action:
        """Build a GERMINATE action from names (``blueprint`` may omit the topology prefix)."""
        keys = [b for b in self.blueprints if b == blueprint or b.split("/", 1)[-1] == blueprint]
        if not keys:
            raise ValueError(
                f"unknown blueprint {blueprint!r}; available: {', '.join(self.blueprints)}"
            )
        return Action(
            LifecycleOp.GERMINATE,
            slot=self.slot_ids.index(slot_id),
            blueprint=self.blueprints.index(keys[0]),
            style=self.styles.index(style) if style is not None else 0,
            tempo=self.tempos.index(tempo) if tempo is not None else len(self.tempos) // 2,
        )

    def on_slot(self, op: LifecycleOp, slot_id: str, alpha_target: float | None = None) -> Action:
        target = self.alpha_targets.index(alpha_target) if alpha_target is not None else 0
        return Action(op, slot=self.slot_ids.index(slot_id), alpha_target=target)


@frozen
class MaskRules:
    max_seeds: int = 3
    min_prune_age: int = 1
    protect_healthy: bool = False  # see rules.may_prune
    min_training_epochs: int = 0
    min_gradient_health: float = 0.0
    # ADVANCE and FOSSILIZE legal only when the gate they lead through passes now (when
    # the caller hands compute_masks the gates): a refused try changes nothing anyway.
    gated_advance: bool = False

    @classmethod
    def from_config(cls, env: EnvSection, lifecycle: LifecycleSection) -> MaskRules:
        """The rules a run's ``[env]`` and ``[lifecycle]`` sections set."""
        return cls(
            max_seeds=env.max_seeds,
            min_prune_age=env.min_prune_age,
            protect_healthy=env.protect_healthy_seeds,
            gated_advance=env.gated_advance,
            min_training_epochs=lifecycle.min_training_epochs,
            min_gradient_health=lifecycle.min_gradient_health,
        )


@frozen(eq=False)
class ActionMasks:
    """Boolean masks (True = legal). ``slot[op]`` is the slots legal for that op;
    ``blueprint[slot]`` the blueprints that can grow in that slot (a branch blueprint
    only where a segment follows); ``alpha_target[slot]`` the targets legal for
    SET_ALPHA_TARGET on that slot."""

    op: torch.Tensor  # [n_ops]
    slot: torch.Tensor  # [n_ops, n_slots]
    blueprint: torch.Tensor  # [n_slots, n_blueprints]
    style: torch.Tensor  # [n_styles]
    tempo: torch.Tensor  # [n_tempos]
    alpha_target: torch.Tensor  # [n_slots, n_targets]

    def __eq__(self, other: object) -> bool:
        import torch

        if not isinstance(other, ActionMasks):
            return NotImplemented
        return all(torch.equal(getattr(self, h), getattr(other, h)) for h in HEADS)

    __hash__ = None  # type: ignore[assignment]


def compute_masks(
    reports: Sequence[SlotReport],
    space: ActionSpace,
    limits: MaskRules,
    gates: Sequence[GateResult | None] | None = None,
    fits: torch.Tensor | None = None,
) -> ActionMasks:
    """The one place that decides which actions are legal; ``gates``: each slot's next
    gate, evaluated now (used with ``limits.gated_advance``); ``fits``: ``[n_slots,
    n_blueprints]``, whether each blueprint can grow in each slot (``Blueprint.fits``;
    None: everywhere). GERMINATE is legal only in a slot where some blueprint fits."""
    import torch

    n_slots = len(space.slot_ids)
    if fits is None:
        fits = torch.ones(n_slots, len(space.blueprints), dtype=torch.bool)
    slot = torch.zeros(len(OPS), n_slots, dtype=torch.bool)
    alpha = torch.zeros(n_slots, len(space.alpha_targets), dtype=torch.bool)
    can_germinate = (
        rules.may_germinate((r.stage for r in reports), limits.max_seeds)
        and len(space.blueprints) > 0
    )
    for i, r in enumerate(reports):
        slot[LifecycleOp.GERMINATE, i] = (
            can_germinate and rules.may_germinate_in(r.stage) and bool(fits[i].any())
        )
        gate_open = not limits.gated_advance or gates is None or _passes(gates[i])
        slot[LifecycleOp.ADVANCE, i] = rules.may_advance(r.stage) and gate_open
        targets = rules.alpha_targets_legal(r.stage, r.alpha_target, space.alpha_targets)
        alpha[i] = torch.tensor(targets, dtype=torch.bool)
        slot[LifecycleOp.SET_ALPHA_TARGET, i] = any(targets)
        slot[LifecycleOp.PRUNE, i] = rules.may_prune(
            r,
            limits.min_prune_age,
            limits.protect_healthy,
            limits.min_training_epochs,
            limits.min_gradient_health,
        )
        slot[LifecycleOp.FOSSILIZE, i] = rules.may_fossilize(r.stage) and gate_open
    op = slot.any(dim=1)
    op[LifecycleOp.WAIT] = True
    slot[LifecycleOp.WAIT] = True  # the slot head is irrelevant to WAIT; any value is fine
    return ActionMasks(
        op=op,
        slot=slot,
        blueprint=fits.clone(),
        style=torch.ones(len(space.styles), dtype=torch.bool),
        tempo=torch.ones(len(space.tempos), dtype=torch.bool),
        alpha_target=alpha,
    )


def _passes(gate: GateResult | None) -> bool:
    return gate is not None and gate.passed


def refusal_reason(action: Action, masks: ActionMasks, space: ActionSpace) -> str | None:
    """Why ``action`` is illegal under ``masks``, or None if it is legal."""
    sizes = space.head_sizes
    # The op first: a raw int out of range would index the masks (-1 silently meaning FOSSILIZE).
    if not 0 <= int(action.op) < sizes["op"]:
        return f"op index {int(action.op)} out of range [0, {sizes['op']})"
    for head, value in zip(HEADS, action.as_indices()):
        if head in OP_HEADS.get(action.op, ()) and not 0 <= value < sizes[head]:
            return f"{head} index {value} out of range [0, {sizes[head]})"
    if not bool(masks.op[action.op]):
        return f"{action.op.name} is not legal in any slot now"
    if action.op == LifecycleOp.WAIT:
        return None
    if not bool(masks.slot[action.op, action.slot]):
        return f"{action.op.name} is not legal in slot {space.slot_ids[action.slot]} now"
    if action.op == LifecycleOp.GERMINATE and not bool(
        masks.blueprint[action.slot, action.blueprint]
    ):
        return f"blueprint {space.blueprints[action.blueprint]} cannot grow in slot {space.slot_ids[action.slot]}"
    if action.op == LifecycleOp.SET_ALPHA_TARGET and not bool(
        masks.alpha_target[action.slot, action.alpha_target]
    ):
        return f"alpha target {space.alpha_targets[action.alpha_target]} is not legal for slot {space.slot_ids[action.slot]}"
    return None
