"""Which policies are dominated on the metric-vs-cost plane.

A policy is dominated on a cost axis (parameters in the forward pass, or training FLOPs)
when another policy of the same task has an IQM of the task's metric at least as good
(test accuracy: at least as high; test loss: at most as high) for a mean cost at most as
high, and is strictly better on one of the two. Point estimates decide; the intervals are
drawn in ``pareto.png`` for the reader to judge.
"""

from __future__ import annotations

from collections.abc import Mapping

# The cost axes, as CellResult fields (lower is cheaper).
COST_AXES = ("params_forward", "train_flops")


def dominated(points: Mapping[str, tuple[float, float]], higher_is_better: bool = True) -> set[str]:
    """``points``: policy -> (cost, value); the dominated policies."""
    sign = 1.0 if higher_is_better else -1.0
    out = set()
    for name, (cost, value) in points.items():
        for other, (c, v) in points.items():
            better, as_good = sign * v > sign * value, sign * v >= sign * value
            if other != name and c <= cost and as_good and (c < cost or better):
                out.add(name)
                break
    return out
