"""Which policies are dominated on the accuracy-vs-cost plane.

A policy is dominated on a cost axis (parameters in the forward pass, or training FLOPs)
when another policy of the same task has a final test accuracy at least as high (IQM)
for a cost at most as high (mean), and is strictly better on one of the two. Point
estimates decide; the intervals are drawn in ``pareto.png`` for the reader to judge.
"""

from __future__ import annotations

from collections.abc import Mapping

# The cost axes, as CellResult fields (lower is cheaper).
COST_AXES = ("params_forward", "train_flops")


def dominated(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """``points``: policy -> (cost, value), higher value better; the dominated policies."""
    out = set()
    for name, (cost, value) in points.items():
        for other, (c, v) in points.items():
            if other != name and c <= cost and v >= value and (c < cost or v > value):
                out.add(name)
                break
    return out
