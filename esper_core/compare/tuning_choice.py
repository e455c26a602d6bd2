"""The rule that picks an arm's grid point from its tuning runs (pure, over numbers).

A point's score is the **mean** of its validation metric over the tuning seeds: with the
two to five seeds a search can afford, an interquartile mean would drop most of them. The
chosen point has the best score (highest validation accuracy, lowest validation loss);
of equal scores the first in grid order wins, so a grid written from the default outwards
keeps the default unless another value does better. A point with a non-finite value on
any seed (a diverged run) scores below every finite point; if no point is finite, the
first is chosen. A point on which any tuning seed did not train (diverged, or stalled
far behind the point's other seeds: :mod:`esper_core.compare.stalls`) is scored as
diverged by its caller, so the next rate down is chosen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RULE = (
    "mean over the tuning seeds, among the points that trained on every tuning seed "
    "(esper_core.compare.stalls); ties: the first point in grid order"
)


def score(values: Sequence[float]) -> float:
    """The mean of ``values``; NaN if there are none or one is not finite."""
    if not values or not all(math.isfinite(v) for v in values):
        return math.nan
    return math.fsum(values) / len(values)


def choose(scores: Sequence[float], higher_is_better: bool) -> int:
    """The index of the best score; ties: the first; non-finite scores last."""
    if not scores:
        raise ValueError("no grid point to choose from")
    best = 0
    for i, value in enumerate(scores):
        current = scores[best]
        if not math.isfinite(value):
            continue
        if not math.isfinite(current) or (value > current if higher_is_better else value < current):
            best = i
    return best
