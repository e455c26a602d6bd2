"""The report's figures, drawn with matplotlib's object API on the Agg canvas.

No pyplot: nothing here changes matplotlib's global backend or state, so the report can
be built inside any process (a notebook, a test) without side effects.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from esper_core.run.checkpoint import atomic_writer
from esper_core.run.ledger import HostGrowthRecord
from esper_core.run.telemetry import (
    GovernorRollback,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)
from esper_telemetry.report.data import Key, RunData
from esper_telemetry.report.decision_notes import (
    MAX_NOTES,
    decision_notes,
    number_decisions,
    write_notes,
)
from esper_telemetry.stages import STAGE_ORDER, stage_colour

SERIES_COLOURS = "tab10"
GRID = {"alpha": 0.3, "linewidth": 0.6}
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
HOST_LANE = "host"  # the swimlane of the host's own growth, above the slots' lanes
ROLLBACK_LINE: dict[str, Any] = {"color": "#d00000", "linestyle": "--", "linewidth": 1.4}


def new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save(figure: Any, path: Path, dpi: int) -> Path:
    with atomic_writer(path, "wb") as fh:
        figure.savefig(fh, format="png", dpi=dpi, facecolor="white")
    return path


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps[SERIES_COLOURS]
    return [cmap(i % cmap.N) for i in range(n)]


def _integer_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _label(data: RunData, key: Key) -> str:
    env, episode = key
    return f"env {env} · {data.outer_name} {episode}"


# ---------------------------------------------------------------- (1) accuracy


def accuracy_figure(data: RunData, max_series: int = 8) -> Any:
    """Validation (solid) and test (dashed, where measured) accuracy per epoch, per env-episode;
    with several episodes, a second panel with each episode's final accuracies."""
    from matplotlib.lines import Line2D

    keys = data.env_episodes()
    shown = keys[-max_series:]
    several = len({episode for _, episode in keys}) > 1 and bool(data.episodes)
    figure = new_figure(13.0 if several else 8.0, 4.8)
    axes = figure.subplots(1, 2 if several else 1, squeeze=False)[0]
    ax = axes[0]
    marked: set[str] = set()
    for colour, key in zip(_palette(len(shown)), shown):
        rows = data.epochs[key]
        ax.plot(
            [r.epoch for r in rows],
            [r.val_acc for r in rows],
            color=colour,
            linewidth=1.8,
            label=_label(data, key),
        )
        marked |= _mark_accuracy_events(data, ax, key)
        tests = [(r.epoch, r.test_acc) for r in rows if r.test_acc is not None]
        if tests:
            ax.plot(
                *zip(*tests),
                color=colour,
                linestyle="--",
                linewidth=1.1,
                marker="o",
                markersize=3.5,
            )
    title = "Accuracy per epoch"
    if len(shown) < len(keys):
        title += f" (last {len(shown)} of {len(keys)} env-{data.outer_name}s)"
    ax.set_title(title)
    ax.set_xlabel(f"epoch (of {data.max_epochs})")
    _integer_ticks(ax)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)  # the whole scale: a zoomed axis makes noise look like a trend
    ax.set_xlim(0.5, data.max_epochs + 0.5)
    ax.grid(**GRID)
    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="#444444", linewidth=1.8, label="validation (solid)"),
        Line2D(
            [],
            [],
            color="#444444",
            linestyle="--",
            marker="o",
            markersize=3.5,
            label="test (dashed)",
        ),
        *_marker_handles(marked),
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    if several:
        _final_accuracy_panel(data, axes[1])
    figure.suptitle(data.title, fontsize=11)
    return figure


def _event_kind(event: Any) -> str | None:
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


def _mark_accuracy_events(data: RunData, ax: Any, key: Key) -> set[str]:
    """The lifecycle events of one env-episode as markers on its validation curve, at the
    epoch where each happened (a germination before the first epoch: on the first point),
    so a jump in accuracy can be read against the seed that caused it."""
    rows = data.epochs[key]
    if not rows:
        return set()
    accuracy = {r.epoch: r.val_acc for r in rows}
    first = rows[0].epoch
    kinds: set[str] = set()
    for event in data.lifecycle.get(key, []):
        kind = _event_kind(event)
        epoch = max(int(getattr(event, "epoch", first)), first)
        if kind is None or epoch not in accuracy:
            continue
        ax.scatter([epoch], [accuracy[epoch]], zorder=4, **MARKERS[kind])
        kinds.add(kind)
    return kinds


MARKER_LABELS = {
    "germinate": "germinated",
    "fossilize": "fossilized",
    "prune": "pruned (policy)",
    "prune (rollback)": "pruned (rollback)",
    "host grow": "host grew (width)",
    "host fold": "host growth folded in",
    "host prune": "host growth pruned",
}


def _marker_handles(kinds: set[str]) -> list[Any]:
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


def _final_accuracy_panel(data: RunData, ax: Any) -> None:
    by_episode: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in data.episodes:
        by_episode[e.episode]["validation"].append(e.final_val_acc)
        if e.final_test_acc is not None:
            by_episode[e.episode]["test"].append(e.final_test_acc)
    episodes = sorted(by_episode)
    for name, colour, style in (("validation", "#1f77b4", "-"), ("test", "#d62728", "--")):
        xs = [k for k in episodes if by_episode[k][name]]
        if not xs:
            continue
        values = [by_episode[k][name] for k in xs]
        mean = [sum(v) / len(v) for v in values]
        ax.plot(
            xs,
            mean,
            color=colour,
            linestyle=style,
            marker="o",
            markersize=3.5,
            label=f"final {name} (mean over envs)",
        )
        if any(len(v) > 1 for v in values):
            ax.fill_between(
                xs,
                [min(v) for v in values],
                [max(v) for v in values],
                color=colour,
                alpha=0.15,
                label=f"{name}: min–max over envs",
            )
    ax.set_title(f"Final accuracy per {data.outer_name}")
    ax.set_xlabel(data.outer_name)
    _integer_ticks(ax)
    ax.set_ylabel("accuracy (%)")
    ax.grid(**GRID)
    ax.legend(loc="lower right", fontsize=8)


# ---------------------------------------------------------------- (2) lifecycle swimlanes


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
    shown_notes = min(len(notes), MAX_NOTES) + (len(notes) > MAX_NOTES)
    lanes_height = 1.6 + 0.42 * max(n, 3)
    notes_height = 0.35 + 0.15 * shown_notes if notes else 0.0
    figure = new_figure(12.0, lanes_height + notes_height)
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
            kind = _event_kind(event)
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
        write_notes(figure.add_subplot(grid[1]), notes, data.outer_name)
    first_lanes = [i for i, (key, _) in enumerate(lanes) if i and lanes[i - 1][0] != key]
    for i in first_lanes:
        ax.axhline(n - i - 0.5, color="#444444", linewidth=0.8)
    ax.set_yticks([lane_y[lane] for lane in lanes])
    ax.set_yticklabels(
        [f"env {k[0]} · {data.outer_name} {k[1]} · {slot}" for k, slot in lanes], fontsize=8
    )
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(-0.4, data.max_epochs + 0.4)
    _integer_ticks(ax)
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
    handles += _marker_handles(used_markers)
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


# ---------------------------------------------------------------- (3) reward components


def _component_names(data: RunData) -> list[str]:
    names: dict[str, None] = {}
    for key in data.env_episodes():
        for r in data.epochs[key]:
            for name in r.reward_components:
                names.setdefault(name, None)
    return list(names)


def reward_figure(data: RunData, max_bars: int = 150) -> Any:
    """Reward components per epoch (mean over envs) stacked as bars, positive parts up and
    negative parts down, with the total as a line; with several episodes, a second panel
    with each episode's total by component."""
    names = _component_names(data)
    per_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for key in data.env_episodes():
        for r in data.epochs[key]:
            step = data.global_epoch(r.episode, r.epoch)
            for name in names:
                per_step[step][name].append(r.reward_components.get(name, 0.0))
            per_step[step]["__total__"].append(r.reward)
    steps = sorted(per_step)
    width = max(1, math.ceil(len(steps) / max_bars))
    bins = [steps[i : i + width] for i in range(0, len(steps), width)]

    def mean(bin_steps: list[int], name: str) -> float:
        values = [v for s in bin_steps for v in per_step[s][name]]
        return sum(values) / len(values) if values else 0.0

    xs = [(b[0] + b[-1]) / 2 for b in bins]
    several = len({e.episode for e in data.episodes}) > 1
    figure = new_figure(13.0 if several else 9.0, 4.8)
    axes = figure.subplots(
        1, 2 if several else 1, squeeze=False, width_ratios=[2, 1] if several else None
    )[0]
    ax = axes[0]
    colours = dict(zip(names, _palette(len(names))))
    up = [0.0] * len(bins)
    down = [0.0] * len(bins)
    for name in names:
        values = [mean(b, name) for b in bins]
        pos = [max(v, 0.0) for v in values]
        neg = [min(v, 0.0) for v in values]
        ax.bar(xs, pos, bottom=up, width=0.85 * width, color=colours[name], label=name)
        ax.bar(xs, neg, bottom=down, width=0.85 * width, color=colours[name])
        up = [a + b for a, b in zip(up, pos)]
        down = [a + b for a, b in zip(down, neg)]
    totals = [mean(b, "__total__") for b in bins]
    ax.plot(xs, totals, color="black", linewidth=1.2, marker=".", markersize=4, label="total")
    ax.axhline(0.0, color="#666666", linewidth=0.8)
    _fit_y(ax, [*up, *totals], [*down, *totals])
    outer_count = len({k[1] for k in data.env_episodes()})
    if 1 < outer_count <= 20:
        for k in range(1, outer_count):
            ax.axvline(k * data.max_epochs + 0.5, color="#999999", linestyle=":", linewidth=0.8)
    if outer_count > 1:
        ax.set_xlabel(
            f"epoch of the run ({data.outer_name} × {data.max_epochs} + epoch; dotted: {data.outer_name} boundaries)"
        )
    else:
        ax.set_xlabel("epoch")
    ax.set_ylabel("reward (mean over envs)")
    title = "Reward components per epoch"
    if width > 1:
        title += f" (each bar: mean of {width} epochs)"
    ax.set_title(title)
    ax.grid(axis="y", **GRID)
    ax.set_axisbelow(True)
    if several:
        _episode_reward_panel(data, axes[1], names, colours)
    handles, labels = ax.get_legend_handles_labels()
    if several:
        extra_handles, extra_labels = axes[1].get_legend_handles_labels()
        for handle, label in zip(extra_handles, extra_labels):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.legend(
        handles,
        labels,
        loc="outside lower center",
        ncols=min(len(labels), 8),
        fontsize=9,
        title="reward component",
        title_fontsize=9,
        frameon=False,
    )
    figure.suptitle(data.title, fontsize=11)
    return figure


def _fit_y(ax: Any, highs: list[float], lows: list[float]) -> None:
    """Y limits that hold every stacked bar and the total line (with a margin)."""
    top = max([0.0, *highs])
    bottom = min([0.0, *lows])
    pad = 0.08 * ((top - bottom) or 1.0)
    ax.set_ylim(bottom - (pad if bottom < 0 else pad / 4), top + pad)


def _episode_reward_panel(
    data: RunData, ax: Any, names: list[str], colours: dict[str, Any]
) -> None:
    by_episode: dict[int, list[Any]] = defaultdict(list)
    for e in data.episodes:
        by_episode[e.episode].append(e)
    episodes = sorted(by_episode)
    up = [0.0] * len(episodes)
    down = [0.0] * len(episodes)
    extra = sorted({n for e in data.episodes for n in e.reward_components} - set(names))
    palette = dict(colours)
    palette.update(zip(extra, _palette(len(names) + len(extra))[len(names) :]))
    for name in names + extra:
        values = [
            sum(e.reward_components.get(name, 0.0) for e in by_episode[k]) / len(by_episode[k])
            for k in episodes
        ]
        pos = [max(v, 0.0) for v in values]
        neg = [min(v, 0.0) for v in values]
        ax.bar(episodes, pos, bottom=up, color=palette[name], width=0.8, label=name)
        ax.bar(episodes, neg, bottom=down, color=palette[name], width=0.8)
        up = [a + b for a, b in zip(up, pos)]
        down = [a + b for a, b in zip(down, neg)]
    totals = [sum(e.total_reward for e in by_episode[k]) / len(by_episode[k]) for k in episodes]
    ax.plot(
        episodes, totals, color="black", marker="o", markersize=3.5, linewidth=1.2, label="total"
    )
    ax.axhline(0.0, color="#666666", linewidth=0.8)
    _fit_y(ax, [*up, *totals], [*down, *totals])
    ax.set_title(f"Return per {data.outer_name} by component")
    ax.set_xlabel(data.outer_name)
    _integer_ticks(ax)
    ax.set_ylabel("summed reward (mean over envs)")
    ax.grid(axis="y", **GRID)
    ax.set_axisbelow(True)


def _stage_bar(ax: Any, start: float, width: float, y: float, stage: str) -> None:
    """One lane's stretch in one stage, coloured as the legend says."""
    ax.broken_barh(
        [(start, width)],
        (y - 0.36, 0.72),
        facecolors=stage_colour(stage),
        edgecolors="white",
        linewidth=0.6,
    )
