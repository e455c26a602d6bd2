"""The options of a policy that grows the host while the run goes on (``GrowsHostOnline``):
``host_growth`` and its ``host_growth_*`` fields, declared once for every such policy (the
heuristic's and PPO's), the growth they ask for, and their checks. No torch here: a
plugin's options module imports it.
"""

from __future__ import annotations

from typing import Any, Protocol

from esper_core.components.growth_request import DepthGrowthSpec, HostGrowthSpec, WidthGrowthSpec
from esper_core.converter import in_range, one_of, options_field

HOST_GROWTHS = ("off", "widen", "deepen")


def kind_field(doc: str, default: str = "off", extra: tuple[str, ...] = ()) -> Any:
    """``host_growth``: off, widen or deepen, or a policy's own ``extra`` choices (``doc``
    says how the policy chooses)."""
    return options_field(default, one_of(*HOST_GROWTHS, *extra), doc)


def factor_field() -> Any:
    return options_field(
        2.0,
        in_range(1, 64, lo_open=True),
        "widen: the channels (d_model) are multiplied by this; deepen: the stack grows this "
        "many times as deep (a whole number, 2 to 8).",
    )


def mode_field(default: str = "stack") -> Any:
    return options_field(
        default,
        one_of("stack", "identity"),
        "deepen: stack (the stack copied on itself, G_stack) or identity (fresh blocks).",
    )


def at_field(default: float, doc: str) -> Any:
    """``host_growth_min_at`` or ``host_growth_max_at``: a fraction of the run."""
    return options_field(default, in_range(0, 1, hi_open=True), doc)


def tempo_field() -> Any:
    return options_field(
        5, in_range(1, 1000, integer=True), "Epochs the growth's mask ramps from 0 to 1."
    )


def curve_field() -> Any:
    return options_field(
        "linear", one_of("linear", "cosine", "sigmoid"), "The mask ramp's alpha curve."
    )


class GrowthOptions(Protocol):
    """What :func:`growth_request` and :func:`growth_problems` read of a policy's options."""

    host_growth: str
    host_growth_factor: float
    host_growth_mode: str
    host_growth_min_at: float
    host_growth_max_at: float
    host_growth_tempo: int
    host_growth_curve: str


def growth_request(o: GrowthOptions, at: float, kind: str = "") -> HostGrowthSpec | None:
    """The growth ``o`` asks for, starting at ``at``; None when ``host_growth`` is off.
    ``kind`` (widen or deepen) stands in for a ``host_growth`` that chooses (auto)."""
    chosen = kind or o.host_growth
    if chosen == "widen":
        return WidthGrowthSpec(
            at=at, factor=o.host_growth_factor, tempo=o.host_growth_tempo, curve=o.host_growth_curve
        )
    if chosen == "deepen":
        return DepthGrowthSpec(
            at=at,
            mode=o.host_growth_mode,
            factor=int(o.host_growth_factor),
            tempo=o.host_growth_tempo,
            curve=o.host_growth_curve,
        )
    return None


def growth_problems(o: GrowthOptions) -> list[str]:
    """What is wrong with ``o``'s ``host_growth*`` options (empty: nothing)."""
    problems = []
    if o.host_growth_max_at < o.host_growth_min_at:
        problems.append(
            f"host_growth_max_at ({o.host_growth_max_at:g}) must be at least "
            f"host_growth_min_at ({o.host_growth_min_at:g})"
        )
    factor = o.host_growth_factor
    # auto may deepen, by the same factor.
    if o.host_growth in ("deepen", "auto") and not (factor.is_integer() and 2 <= factor <= 8):
        problems.append(
            f"host_growth_factor: deepen grows the stack a whole number of times as deep, "
            f"2 to 8; got {factor:g}"
        )
    return problems
