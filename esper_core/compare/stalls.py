"""Which runs of an arm did not train: diverged, or stalled far behind the arm's others.

Why: a baseline that trains on most seeds at its tuned rate and stalls on a plateau
on a few (charlm's `wide` at lr 0.006: final validation loss 1.75-1.78 on 3 of 10 seeds
where the others reach about 1.38) makes any policy look good against it. A claim against
such an arm is no claim, so every comparison checks each arm's runs and says so.

A run *did not train* when its final validation value is not finite (it diverged), or is
worse than the median of the same arm's runs by more than the rule's margin: more than
``acc_points`` accuracy points below it, or a loss more than ``loss_ratio`` above it (a
ratio, since losses of different tasks live on different scales). The median of the
arm's own runs is the reference because a run-by-run threshold would need to know what
each task can reach; with five runs it stays put while two of them fail. Of two runs
either may be the odd one, so with fewer than three finite runs only a diverged run
counts. The same rule
picks the tuning rate (:mod:`esper_core.compare.tuning_results`): a grid point on which
any tuning seed did not train is never chosen, so the next rate down is.

A seed can be hard for every arm: glyphs' 8-channel host at random seed 106 ends 6.6-8
points below the median at every rate of its grid. Measured against its own arm alone,
such a run reads as a stall, and the pair lost its baseline for a seed no rate could fix.
So where other arms ran on the same seeds (the grid's other rates, the menu's other
entries, the other policies of a comparison), a run is excused by as much as the other
arms fell behind their own medians on that seed (the median over them): it did not
train only when it is behind by the margin *beyond* what the seed cost everyone. A seed
that is easy for the others excuses nothing, so the rule only ever flags fewer runs than
its own-arm form.

Validation values, not test values: whether a run trained is a fact about its training,
and the rule must not look at the evaluation metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from attrs import frozen

from esper_core.compare.cell_result import CellResult
from esper_core.compare.metric import VALIDATION, higher_is_better
from esper_core.compare.stall_rule import StallRule

# Runs needed to say one is behind the others: of two apart, either may be the odd one.
MIN_RUNS = 3


@frozen
class ArmFailure:
    """The runs of one arm on one task that did not train, by seed."""

    task: str
    arm: str
    metric: str  # the validation field judged: final_val_acc | final_val_loss
    seeds: list[int]
    median: float | None  # None: no run of the arm has a finite value
    # The failed runs' validation values in ``seeds`` order (None: not finite).
    values: list[float | None]

    def sentence(self) -> str:
        shown = ", ".join(
            f"{s} ({'not finite' if v is None else f'{v:.4g}'})"
            for s, v in zip(self.seeds, self.values)
        )
        median = "none finite" if self.median is None else f"{self.median:.4g}"
        return (
            f"{self.arm} on {self.task} did not train on {len(self.seeds)} seed"
            f"{'s' if len(self.seeds) > 1 else ''}: {shown} against a median {self.metric} "
            f"of {median}; a verdict against it is unresolved (tune it again: "
            "docs/growth.md, the tuning rule)"
        )


Values = Mapping[int, float | None]


def _median(values: Values) -> float | None:
    """The median of the finite values; None with fewer than ``MIN_RUNS`` of them."""
    finite = [v for v in values.values() if v is not None and math.isfinite(v)]
    return statistics.median(finite) if len(finite) >= MIN_RUNS else None


def seed_cost(others: Sequence[Values], higher: bool) -> dict[int, float]:
    """Per seed, how far the other arms fell behind their own medians there (the median
    over the arms that have one and a finite run on the seed): accuracy points (0: not
    behind) or, for a loss, the ratio to the median (1: not behind)."""
    gaps: dict[int, list[float]] = {}
    for arm in others:
        median = _median(arm)
        if median is None:
            continue
        for seed, value in arm.items():
            if value is not None and math.isfinite(value):
                gaps.setdefault(seed, []).append(
                    median - value if higher else value / median if median > 0 else 1.0
                )
    floor = 0.0 if higher else 1.0
    return {seed: max(floor, statistics.median(g)) for seed, g in gaps.items()}


def failed_seeds(
    values: Values, higher: bool, rule: StallRule, others: Sequence[Values] = ()
) -> list[int]:
    """The seeds whose value is missing or not finite, or worse than the median of the
    finite ones by more than the rule's margin beyond what the seed cost ``others`` (the
    other arms' values by seed; see :func:`seed_cost`). ``higher``: an accuracy."""
    median = _median(values)
    cost = seed_cost(others, higher)

    def behind(seed: int, value: float) -> bool:
        if median is None:
            return False
        if higher:
            return median - value - cost.get(seed, 0.0) > rule.acc_points
        return value > median * (1 + rule.loss_ratio) * cost.get(seed, 1.0)

    return [
        seed
        for seed, value in values.items()
        if value is None or not math.isfinite(value) or behind(seed, value)
    ]


def arm_failures(
    cells: Sequence[CellResult], metrics: Mapping[str, str], rule: StallRule
) -> list[ArmFailure]:
    """Every (task, arm) with a run that did not train, in ``cells`` order; ``metrics``:
    task -> the test metric it is ranked by (its validation twin is judged); the other
    arms on the task tell a hard seed from a stall. A cell from before validation values
    were recorded is left out, not counted as failed."""
    by_arm: dict[tuple[str, str], dict[int, float]] = {}
    for c in cells:
        field = VALIDATION[metrics.get(c.task, "final_test_acc")]
        if getattr(c, field) is not None:
            by_arm.setdefault((c.task, c.policy), {})[c.seed] = c.value(field)
    out = []
    for (task, arm), values in by_arm.items():
        field = VALIDATION[metrics.get(task, "final_test_acc")]
        others = [v for (t, a), v in by_arm.items() if t == task and a != arm]
        seeds = failed_seeds(values, higher_is_better(field), rule, others)
        if seeds:
            finite = [v for v in values.values() if math.isfinite(v)]
            median = statistics.median(finite) if finite else None
            shown = [values[s] if math.isfinite(values[s]) else None for s in seeds]
            out.append(ArmFailure(task, arm, field, seeds, median, shown))
    return out


def failed_arms(failures: Sequence[ArmFailure], task: str | None) -> set[str]:
    """The arms that did not train on ``task`` (None: on any task)."""
    return {f.arm for f in failures if task is None or f.task == task}
