"""The report's accuracy figure: validation and test accuracy per epoch with the lifecycle
events marked, and each episode's final accuracies when the run has several."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from esper_telemetry.report.canvas import GRID, integer_ticks, new_figure, palette, series_label
from esper_telemetry.report.data import Key, RunData
from esper_telemetry.report.markers import MARKERS, event_kind, marker_handles


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
    for colour, key in zip(palette(len(shown)), shown):
        rows = data.epochs[key]
        ax.plot(
            [r.epoch for r in rows],
            [r.val_acc for r in rows],
            color=colour,
            linewidth=1.8,
            label=series_label(data, key),
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
    integer_ticks(ax)
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
        *marker_handles(marked),
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    if several:
        _final_accuracy_panel(data, axes[1])
    figure.suptitle(data.title, fontsize=11)
    return figure


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
        kind = event_kind(event)
        epoch = max(int(getattr(event, "epoch", first)), first)
        if kind is None or epoch not in accuracy:
            continue
        ax.scatter([epoch], [accuracy[epoch]], zorder=4, **MARKERS[kind])
        kinds.add(kind)
    return kinds


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
    integer_ticks(ax)
    ax.set_ylabel("accuracy (%)")
    ax.grid(**GRID)
    ax.legend(loc="lower right", fontsize=8)
