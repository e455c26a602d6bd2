"""The report's reward figure: the reward's components per epoch stacked as bars with the
total as a line, and each episode's return by component when the run has several."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from esper_telemetry.report.canvas import GRID, integer_ticks, new_figure, palette
from esper_telemetry.report.data import RunData


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
    colours = dict(zip(names, palette(len(names))))
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
    shades = dict(colours)
    shades.update(zip(extra, palette(len(names) + len(extra))[len(names) :]))
    for name in names + extra:
        values = [
            sum(e.reward_components.get(name, 0.0) for e in by_episode[k]) / len(by_episode[k])
            for k in episodes
        ]
        pos = [max(v, 0.0) for v in values]
        neg = [min(v, 0.0) for v in values]
        ax.bar(episodes, pos, bottom=up, color=shades[name], width=0.8, label=name)
        ax.bar(episodes, neg, bottom=down, color=shades[name], width=0.8)
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
    integer_ticks(ax)
    ax.set_ylabel("summed reward (mean over envs)")
    ax.grid(axis="y", **GRID)
    ax.set_axisbelow(True)
