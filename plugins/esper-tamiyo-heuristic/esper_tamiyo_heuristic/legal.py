"""Legal choices under the action masks, as Python lists.

The masks (``esper_core.lifecycle.actions.compute_masks``) are the one authority on legality;
this module only reads them. Imported lazily by the policies because it needs torch.
"""

from __future__ import annotations

import random

from attrs import frozen

from esper_core.lifecycle.actions import (
    OPS,
    Action,
    ActionMasks,
    ActionSpace,
    LifecycleOp,
    refusal_reason,
)


def _indices(row: object) -> list[int]:
    return [i for i, ok in enumerate(row.tolist()) if ok]  # type: ignore[attr-defined]


@frozen
class LegalChoices:
    """Every legal value of every head. ``slots[op]`` lists the slots legal for ``op``;
    ``blueprints[slot]`` the blueprints that can grow in that slot; ``alpha_targets[slot]``
    the targets legal for SET_ALPHA_TARGET on that slot."""

    ops: tuple[LifecycleOp, ...]
    slots: dict[LifecycleOp, tuple[int, ...]]
    blueprints: dict[int, tuple[int, ...]]
    styles: tuple[int, ...]
    tempos: tuple[int, ...]
    alpha_targets: dict[int, tuple[int, ...]]


def legal_choices(masks: ActionMasks, space: ActionSpace) -> LegalChoices:
    """The legal values of each head, dropping ops that some head they use cannot fill
    (e.g. GERMINATE when the run configures no style): an op is listed only if at
    least one complete legal action exists for it."""
    n_slots = len(space.slot_ids)
    blueprints = {i: tuple(_indices(masks.blueprint[i])) for i in range(n_slots)}
    styles = tuple(_indices(masks.style))
    tempos = tuple(_indices(masks.tempo))
    alpha = {i: tuple(_indices(masks.alpha_target[i])) for i in range(n_slots)}
    op_legal = masks.op.tolist()
    ops: list[LifecycleOp] = []
    slots: dict[LifecycleOp, tuple[int, ...]] = {}
    for op in OPS:
        if not op_legal[op]:
            continue
        if op == LifecycleOp.WAIT:
            ops.append(op)
            slots[op] = ()
            continue
        legal_slots = tuple(_indices(masks.slot[op]))
        if op == LifecycleOp.GERMINATE:
            legal_slots = tuple(i for i in legal_slots if blueprints[i] and styles and tempos)
        if op == LifecycleOp.SET_ALPHA_TARGET:
            legal_slots = tuple(i for i in legal_slots if alpha[i])
        if legal_slots:
            ops.append(op)
            slots[op] = legal_slots
    return LegalChoices(tuple(ops), slots, blueprints, styles, tempos, alpha)


def is_legal(action: Action, masks: ActionMasks, space: ActionSpace) -> bool:
    return refusal_reason(action, masks, space) is None


def sample_legal(rng: random.Random, masks: ActionMasks, space: ActionSpace) -> Action:
    """Uniform over legal ops, then a legal slot for it, then legal values of the
    heads that op reads (the other heads stay 0: the env ignores them)."""
    choices = legal_choices(masks, space)
    op = rng.choice(choices.ops)  # WAIT is always legal, so this is never empty
    if op == LifecycleOp.WAIT:
        return Action()
    slot = rng.choice(choices.slots[op])
    if op == LifecycleOp.GERMINATE:
        return Action(
            op,
            slot=slot,
            blueprint=rng.choice(choices.blueprints[slot]),
            style=rng.choice(choices.styles),
            tempo=rng.choice(choices.tempos),
        )
    if op == LifecycleOp.SET_ALPHA_TARGET:
        return Action(op, slot=slot, alpha_target=rng.choice(choices.alpha_targets[slot]))
    return Action(op, slot=slot)
