"""The lifecycle events drawn as markers (germinated, fossilized, pruned, the host's own
growth): their style and legend entries, shared by the accuracy and lifecycle figures so a
marker means the same thing in both."""

from __future__ import annotations

from typing import Any

from esper_core.run.telemetry import (
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)

MARKERS: dict[str, dict[str, Any]] = {
    "germinate": {"marker": "^", "color": "#111111", "s": 46},
    "fossilize": {
        "marker": "*",
        "color": "#ffd60a",
        "s": 150,
        "edgecolors": "#111111",
        "linewidths": 0.8,
    },
    "prune": {
        "marker": "X",
        "color": "#e63946",
        "s": 70,
        "edgecolors": "#111111",
        "linewidths": 0.6,
    },
    "prune (rollback)": {
        "marker": "X",
        "color": "#ffffff",
        "s": 70,
        "edgecolors": "#e63946",
        "linewidths": 1.2,
    },
    # The host's own growth: navy, apart from the seeds' markers.
    "host grow": {"marker": "D", "color": "#1d3557", "s": 52},
    "host fold": {
        "marker": "*",
        "color": "#1d3557",
        "s": 150,
        "edgecolors": "#ffd60a",
        "linewidths": 0.8,
    },
    "host prune": {
        "marker": "X",
        "color": "#ffffff",
        "s": 70,
        "edgecolors": "#1d3557",
        "linewidths": 1.2,
    },
}


def event_kind(event: Any) -> str | None:
    """The :data:`MARKERS` entry of a lifecycle event (None: not drawn as a marker)."""
    if isinstance(event, SeedGerminated):
        return "germinate"
    if isinstance(event, SeedFossilized):
        return "fossilize"
    if isinstance(event, SeedPruned):
        return "prune (rollback)" if event.reason == "rollback" else "prune"
    if isinstance(event, HostGrowthStarted):
        return "host grow"
    if isinstance(event, HostGrowthFossilized):
        return "host fold"
    if isinstance(event, HostGrowthPruned):
        return "host prune"
    return None


MARKER_LABELS = {
    "germinate": "germinated",
    "fossilize": "fossilized",
    "prune": "pruned (policy)",
    "prune (rollback)": "pruned (rollback)",
    "host grow": "host grew (width)",
    "host fold": "host growth folded in",
    "host prune": "host growth pruned",
}


def marker_handles(kinds: set[str]) -> list[Any]:
    """Legend entries of the event markers drawn, one fixed size whatever the data's."""
    from matplotlib.lines import Line2D

    handles = []
    for kind, label in MARKER_LABELS.items():
        if kind in kinds:
            style = MARKERS[kind]
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker=style["marker"],
                    markersize=9,
                    markerfacecolor=style["color"],
                    markeredgecolor=style.get("edgecolors", style["color"]),
                    label=label,
                )
            )
    return handles
