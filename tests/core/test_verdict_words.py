"""One word for one verdict in every table of a comparison: a policy nothing dominates and
a size the frontier does not pass through both read ``no``; ``-`` is kept for a value that
does not exist (no baseline, no sweep)."""

from __future__ import annotations

from esper_core.compare.frontier import AxisFrontier, FrontierPoint, TaskFrontier
from esper_core.compare.tables import NO, NOT_DOMINATED, frontier_rows


def _frontier() -> TaskFrontier:
    points = {  # label -> (params, FLOPs, accuracy, on the frontier)
        "sweep.small": (1_702.0, 51.8e9, 88.6, True),
        "sweep.base": (6_274.0, 192.1e9, 93.7, False),  # below the chord
        "sweep.large": (24_058.0, 738.1e9, 95.6, True),
    }
    axes = [
        AxisFrontier(
            axis,
            [FrontierPoint(label, p[i], p[2], p[3]) for label, p in points.items()],
        )
        for i, axis in enumerate(("params_forward", "train_flops"))
    ]
    return TaskFrontier("glyphs", "final_test_acc", True, axes)


def test_a_size_off_the_frontier_reads_the_same_no_as_a_policy_nothing_dominates() -> None:
    for short in (False, True):
        _, _, header, rows = frontier_rows(_frontier(), short=short)
        on = {r[0]: r[header.index("on frontier")] for r in rows}
        assert on == {
            "sweep.small": "params, FLOPs",
            "sweep.base": NO,
            "sweep.large": "params, FLOPs",
        }
    assert NOT_DOMINATED == NO == "no"
