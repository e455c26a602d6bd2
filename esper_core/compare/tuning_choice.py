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
from collections.abc import Mapping, Sequence
from typing import Any

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


def grid_edges(grid: Mapping[str, Sequence[Any]], chosen: Mapping[str, Any]) -> dict[str, str]:
    """Per numeric grid key of two or more values, ``"highest"`` or ``"lowest"`` where the
    chosen value is that end of its list: the best value may lie beyond the grid, so the
    grid should be extended there (the tuning rule; a baseline tuned at the edge of its
    grid may be a weak one). Keys whose values are not all numbers are not judged."""
    edges: dict[str, str] = {}
    for key, values in grid.items():
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) != len(values) or len(set(numbers)) < 2 or key not in chosen:
            continue
        if chosen[key] == max(numbers):
            edges[key] = "highest"
        elif chosen[key] == min(numbers):
            edges[key] = "lowest"
    return edges


def edge_line(key: str, value: Any, end: str) -> str:
    """What a results page says of a choice at the end of its grid, with how to fix it."""
    beyond = "above" if end == "highest" else "below"
    return (
        f"{key} = {value:g} is the {end} value of its grid: the best may lie {beyond} it; "
        f"extend the grid {beyond} and run again (docs/growth.md, the tuning rule)"
    )
