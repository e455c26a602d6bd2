"""The report's lifecycle figure: one swimlane per (env, episode, slot), coloured by the
slot's stage, with the lifecycle events, rollbacks, the host's own growth and the policy's
numbered decisions."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from esper_core.run.ledger import HostGrowthRecord
from esper_core.run.telemetry import GovernorRollback, SeedGerminated
from esper_telemetry.report.canvas import GRID, integer_ticks, new_figure
from esper_telemetry.report.data import Key, RunData
from esper_telemetry.report.decision_notes import (
    decision_notes,
    note_lines,
    number_decisions,
    write_notes,
)
from esper_telemetry.report.markers import MARKERS, event_kind, marker_handles
from esper_telemetry.stages import STAGE_ORDER, stage_colour

HOST_LANE = "host"  # the swimlane of the host's own growth, above the slots' lanes
FIGURE_WIDTH = 12.0  # inches
ROLLBACK_LINE: dict[str, Any] = {"color": "#d00000", "linestyle": "--", "linewidth": 1.4}


def _segments(rows: list[Any], slot_id: str) -> list[tuple[int, int, str]]:
    """(start, width, stage) runs of a slot's stage at the end of each epoch."""
    out: list[tuple[int, int, str]] = []
    for r in rows:
        stage = next((s.stage for s in r.slots if s.slot_id == slot_id), None)
        if stage is None:
            continue
        start = r.epoch - 1
        if out and out[-1][2] == stage and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + 1, stage)
        else:
            out.append((start, 1, stage))
    return out


def lifecycle_figure(data: RunData, max_groups: int = 4) -> Any:
    """One lane per (env, episode, slot): bars coloured by the slot's stage in each epoch,
    markers where seeds were germinated, fossilized or pruned, dashed lines at rollbacks,
    and each decision other than WAIT numbered, with the policy's reason under the lanes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    keys = data.env_episodes()
    groups = keys[-max_groups:]
    growths = _growths_by_key(data)
    lanes = [(key, slot) for key in groups for slot in _lanes(data, key in growths)]
    n = len(lanes)
    notes = decision_notes(data, groups)
    lines = note_lines(notes, data.outer_name, FIGURE_WIDTH) if notes else []
    lanes_height = 1.6 + 0.42 * max(n, 3)
    notes_height = 0.2 + 0.15 * len(lines) if notes else 0.0
    figure = new_figure(FIGURE_WIDTH, lanes_height + notes_height)
    grid = figure.add_gridspec(
        2 if notes else 1, 1, height_ratios=[lanes_height, notes_height] if notes else [1]
    )
    ax = figure.add_subplot(grid[0])
    lane_y = {lane: n - 1 - i for i, lane in enumerate(lanes)}
    stages_seen: set[str] = set()
    used_markers: set[str] = set()
    annotate = n <= 24
    for key in groups:
        rows = data.epochs[key]
        for growth in growths.get(key, []):
            y = lane_y[(key, HOST_LANE)]
            for start, width, stage in _growth_segments(growth, data.last_epoch(key)):
                stages_seen.add(stage)
                _stage_bar(ax, start, width, y, stage)
            if annotate:
                ax.annotate(
                    _growth_label(growth),
                    (growth.started_epoch, y),
                    xytext=(4, 9),
                    textcoords="offset points",
                    fontsize=7,
                    color="#222222",
                )
        for slot in data.slot_ids:
            y = lane_y[(key, slot)]
            for start, width, stage in _segments(rows, slot):
                stages_seen.add(stage)
                _stage_bar(ax, start, width, y, stage)
        for event in data.lifecycle.get(key, []):
            if isinstance(event, GovernorRollback):
                ys = [lane_y[(key, s)] for s in _lanes(data, key in growths)]
                ax.vlines(event.epoch, min(ys) - 0.45, max(ys) + 0.45, **ROLLBACK_LINE)
                used_markers.add("rollback")
                continue
            slot_id = getattr(event, "slot_id", HOST_LANE)
            lane = (key, slot_id)
            if lane not in lane_y:
                continue
            y = lane_y[lane]
            kind = event_kind(event)
            if kind is None:
                continue
            if isinstance(event, SeedGerminated) and annotate:
                ax.annotate(
                    event.blueprint,
                    (event.epoch, y),
                    xytext=(4, 9),
                    textcoords="offset points",
                    fontsize=7,
                    color="#222222",
                )
            used_markers.add(kind)
            ax.scatter([event.epoch], [y], zorder=4, **MARKERS[kind])
    if notes:
        number_decisions(ax, notes, lane_y, fallback=_lanes(data, False)[0])
        write_notes(figure.add_subplot(grid[1]), lines)
    first_lanes = [i for i, (key, _) in enumerate(lanes) if i and lanes[i - 1][0] != key]
    for i in first_lanes:
        ax.axhline(n - i - 0.5, color="#444444", linewidth=0.8)
    ax.set_yticks([lane_y[lane] for lane in lanes])
    ax.set_yticklabels(
        [f"env {k[0]} · {data.outer_name} {k[1]} · {slot}" for k, slot in lanes], fontsize=8
    )
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(-0.4, data.max_epochs + 0.4)
    integer_ticks(ax)
    ax.set_xlabel(
        "epoch (bar colour: the slot's stage at the end of that epoch; markers: the epoch boundary "
        "where the event happened)"
    )
    title = "Seed lifecycle per slot" + (" and the host's own growth" if growths else "")
    if len(groups) < len(keys):
        title += f" (last {len(groups)} of {len(keys)} env-{data.outer_name}s)"
    ax.set_title(title)
    ax.grid(axis="x", **GRID)
    ax.set_axisbelow(True)
    handles: list[Any] = [
        Patch(facecolor=stage_colour(s), label=s) for s in STAGE_ORDER if s in stages_seen
    ]
    handles += marker_handles(used_markers)
    if "rollback" in used_markers:
        handles.append(Line2D([], [], label="governor rollback", **ROLLBACK_LINE))
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=8,
        title="stage / event",
        title_fontsize=8,
        frameon=False,
    )
    figure.suptitle(data.title, fontsize=11)
    return figure


def _lanes(data: RunData, host: bool) -> list[str]:
    """An env-episode's lanes: the host's, when it grew, above the slots'."""
    return [HOST_LANE, *data.slot_ids] if host else list(data.slot_ids)


def _growths_by_key(data: RunData) -> dict[Key, list[HostGrowthRecord]]:
    out: dict[Key, list[HostGrowthRecord]] = defaultdict(list)
    for growth in data.growth_ledger.rows():
        out[(growth.env, growth.episode)].append(growth)
    return dict(out)


def _growth_segments(growth: HostGrowthRecord, last: int) -> list[tuple[int, int, str]]:
    """(start, width, stage) of a host growth: ramping from the epoch it started (its first
    epoch trained is the next) to where it ended, then folded in to the episode's end."""
    end = growth.ended_epoch if growth.ended_epoch is not None else last
    out = [(growth.started_epoch, max(end - growth.started_epoch, 0), "BLENDING")]
    if growth.fate == "fossilized" and end < last:
        out.append((end, last - end, "FOSSILIZED"))
    return [seg for seg in out if seg[1] > 0]


def _growth_label(growth: HostGrowthRecord) -> str:
    factor = growth.factor()
    shape = f"{factor:g}x" if factor is not None else growth.plan
    return f"{growth.operator} {shape}: {growth.params_before:,} -> {growth.params_after:,} params"


def _stage_bar(ax: Any, start: float, width: float, y: float, stage: str) -> None:
    """One lane's stretch in one stage, coloured as the legend says."""
    ax.broken_barh(
        [(start, width)],
        (y - 0.36, 0.72),
        facecolors=stage_colour(stage),
        edgecolors="white",
        linewidth=0.6,
    )
