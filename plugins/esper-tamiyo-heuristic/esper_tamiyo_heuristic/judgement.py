"""``judge = contribution``: a HOLDING seed is kept when the model is measurably better
with it than with it switched off (its counterfactual contribution, in validation
accuracy points), pruned when it is not by ``max_holding_epochs``.

The ``gain`` judgement compares the validation loss with where the host alone was
heading, a straight line through the epochs before the seed blended. Early in a run that
line falls steeply, and extrapolated over the blend it promises the host a loss it would
never reach (zero, on digits after four epochs), so a seed that carries the model is
pruned. The contribution is measured, not extrapolated; it also counts what the host
came to rely on while the seed blended, which is why it pairs with a trigger that only
grows where the host's gradients say new capacity pays (``trigger = expansion``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from esper_tamiyo_heuristic.memory import Decision

if TYPE_CHECKING:
    from collections.abc import Callable

    from esper_core.lifecycle.gates import GateResult
    from esper_core.lifecycle.slot_state import SlotReport
    from esper_tamiyo_heuristic.options import HeuristicOptions


def by_contribution(
    o: HeuristicOptions,
    i: int,
    r: SlotReport,
    gate: GateResult | None,
    on_slot: Callable[[str, int, str, str], Decision],
) -> Decision | str:
    """The verdict on the HOLDING seed ``r`` in slot ``i``, or why it waits."""
    c = r.contribution
    shown = "contribution not measured" if c is None else f"contribution {c:+.2f} points"
    if c is None or c < o.min_contribution:
        short = f"{r.slot_id}: {shown} < {o.min_contribution:g} needed"
        if r.epochs_in_stage < o.max_holding_epochs:
            return f"{short} ({r.epochs_in_stage} of {o.max_holding_epochs} epochs in HOLDING)"
        return on_slot("PRUNE", i, "prune_contribution", short)
    if gate is None or gate.passed:
        return on_slot(
            "FOSSILIZE", i, "fossilize", f"{r.slot_id}: {shown} >= {o.min_contribution:g}"
        )
    if r.epochs_in_stage >= o.max_holding_epochs:
        return on_slot(
            "PRUNE", i, "prune_gate", f"{r.slot_id}: {gate.reason} after {r.epochs_in_stage} epochs"
        )
    return f"{r.slot_id}: {shown}, waiting for its gate ({gate.reason})"
