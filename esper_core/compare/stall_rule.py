"""The ``[stall]`` table of an experiment file: when a run counts as not trained.

A value of its own, below both the experiment that holds it and the check that applies
it (:mod:`esper_core.compare.stalls`).
"""

from __future__ import annotations

from attrs import define

from esper_core.converter import in_range, options_field


@define
class StallRule:
    """When a run counts as not trained (the ``[stall]`` table of an experiment file)."""

    acc_points: float = options_field(
        5.0,
        in_range(0, 100, lo_open=True),
        "A run whose final validation accuracy is more than this many points below the "
        "median of its arm's runs, beyond what its seed cost the other arms on the same "
        "seeds, did not train (it stalled).",
    )
    loss_ratio: float = options_field(
        0.10,
        in_range(0, 100, lo_open=True),
        "A run whose final validation loss is more than this fraction above the median of "
        "its arm's runs, beyond what its seed cost the other arms, did not train (0.10: "
        "10 % above).",
    )
