"""Runs compared with the other policy's run from the same start (same task and seed).

Two runs of one seed share the host initialisation and the data order, so their
difference carries none of the seed-to-seed spread: :func:`paired_difference` (the IQM of
the differences with a bootstrap CI stratified by task) and :func:`same_seed` (wins, ties
and losses). A win is a better value in the metric's direction
(:mod:`esper_core.compare.metric`): a lower test loss, fewer FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attrs import frozen

from esper_core.compare.metric import higher_is_better, oriented
from esper_core.compare.stats import iqm_interval

if TYPE_CHECKING:
    from esper_core.compare.cell_result import CellResult


@frozen
class PairedDifference:
    """The policy's run minus ``against``'s run from the same task and seed, on
    ``metric``: IQM of the differences with a bootstrap CI, their mean, and how many
    pairs the policy won, tied and lost. A win is a better value in the metric's
    direction: for ``higher_is_better = False`` (test loss, FLOPs) a negative difference."""

    against: str
    metric: str
    n: int
    iqm: float
    low: float | None
    high: float | None
    mean: float
    wins: int
    ties: int
    losses: int
    higher_is_better: bool = True


def same_seed(
    groups: Sequence[Sequence[CellResult]],
    others: Sequence[Sequence[CellResult]],
    metrics: Sequence[str],
) -> tuple[int, int, int]:
    """Wins, ties and losses of runs against the other policy's run of the same (task,
    seed), each task in its own metric's direction."""
    out = [0, 0, 0]
    for group, other_group, metric in zip(groups, others, metrics):
        other = {c.seed: oriented(c.value(metric), metric) for c in other_group}
        for c in group:
            if c.seed in other:
                d = oriented(c.value(metric), metric) - other[c.seed]
                out[0 if d > 0 else 1 if d == 0 else 2] += 1
    return out[0], out[1], out[2]


def paired_difference(
    groups: Sequence[Sequence[CellResult]],
    others: Sequence[Sequence[CellResult]],
    against: str,
    metric: str,
    confidence: float,
    resamples: int,
    bootstrap_seed: int,
) -> PairedDifference | None:
    """Run minus run of the same (task, seed), stratified by task for the interval."""
    other = {(c.task, c.seed): c.value(metric) for o in others for c in o}
    diffs = [
        [c.value(metric) - other[c.task, c.seed] for c in g if (c.task, c.seed) in other]
        for g in groups
    ]
    diffs = [d for d in diffs if d]
    if not diffs:
        return None
    interval = iqm_interval(diffs, confidence, resamples, bootstrap_seed)
    flat = [d for g in diffs for d in g]
    better = [oriented(d, metric) for d in flat]
    return PairedDifference(
        against,
        metric,
        len(flat),
        interval.estimate,
        interval.low,
        interval.high,
        sum(flat) / len(flat),
        wins=sum(d > 0 for d in better),
        ties=sum(d == 0 for d in better),
        losses=sum(d < 0 for d in better),
        higher_is_better=higher_is_better(metric),
    )
