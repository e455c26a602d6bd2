"""A comparison in which no arm grew says so, and why.

A table of a growing policy that kept no seed reads like a result about growth, when the
runs never tested it: episodes too short for the controller's trigger, or a trigger that
never fired. When no run of an arm that can grow (any policy but ``wait`` and ``static``)
kept a seed, :func:`no_growth` gives one sentence: whether seeds were tried and pruned,
or none was germinated and the reason the policy gave most often (its optional
``why_no_growth``, recorded in each episode's ``growth_note``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from esper_core.compare.result_key import FIXED_ARCHITECTURE

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.experiment import Experiment


def can_grow(experiment: Experiment) -> list[str]:
    """Labels of the arms that can germinate (the sweep's sizes are static)."""
    return [p.label for p in experiment.policies if p.name not in FIXED_ARCHITECTURE]


def no_growth(arms: Sequence[str], cells: Sequence[CellResult]) -> str | None:
    """The sentence for the cells of ``arms``, or None when one grew or there are none."""
    runs = [c for c in cells if c.policy in arms]
    if not runs or any(c.seeds_fossilized or c.params_added for c in runs):
        return None
    names = ", ".join(dict.fromkeys(c.policy for c in runs))
    tried = sum(c.seeds_germinated for c in runs)
    if tried:
        return (
            f"No arm grew: {names} germinated {tried} seed(s) in {len(runs)} run(s) and "
            "pruned every one (none paid for itself), so every run ended as its host."
        )
    notes = Counter(c.growth_note for c in runs if c.growth_note)
    if notes:
        note, count = notes.most_common(1)[0]
        why = f"in {count} of {len(runs)} run(s), {note}"
    else:
        why = "the policy gave no reason (compare env.max_epochs with what its trigger needs)"
    return f"No arm grew: {names} germinated no seed in {len(runs)} run(s); {why}."
