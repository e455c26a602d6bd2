"""The report's training figures: losses with the lifecycle marked and parameters over
time (a train run's PPO learning curve is in :mod:`.learning_curve`).

Epochs are numbered as everywhere in Esper: epoch k is the k-th epoch of an episode
(1-based); a germination at epoch 0 happened before the first epoch. Loss axes start
at zero, so noise is not blown up into a trend; a language model's loss is shown as
perplexity (exp of the loss, on a log axis).
"""

from __future__ import annotations

import math
from typing import Any

from esper_core.run.telemetry import (
    GovernorRollback,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)
from esper_telemetry.report.canvas import GRID, integer_ticks, new_figure, palette, series_label
from esper_telemetry.report.data import RunData

LANGUAGE_TASKS = ("charlm",)
EVENT_LINES: dict[type, dict[str, Any]] = {
    SeedGerminated: {"color": "#111111", "linestyle": ":", "label": "germinated"},
    SeedFossilized: {"color": "#c9a227", "linestyle": "-", "label": "fossilized"},
    SeedPruned: {"color": "#e63946", "linestyle": "--", "label": "pruned"},
    GovernorRollback: {"color": "#d00000", "linestyle": "-.", "label": "rollback"},
    HostGrowthStarted: {"color": "#1d3557", "linestyle": ":", "label": "host widened"},
    HostGrowthFossilized: {"color": "#1d3557", "linestyle": "-", "label": "host growth folded"},
    HostGrowthPruned: {"color": "#1d3557", "linestyle": "--", "label": "host growth pruned"},
}
MAX_DIAGNOSTICS = 8


def perplexity_scale(data: RunData) -> bool:
    return data.started is not None and data.started.task in LANGUAGE_TASKS


def _mark_events(data: RunData, ax: Any, key: tuple[int, int], colour: Any) -> set[str]:
    """Vertical lines at the epochs where the lifecycle of this env-episode changed."""
    shown: set[str] = set()
    for event in data.lifecycle.get(key, []):
        style = EVENT_LINES.get(type(event))
        if style is None:
            continue
        ax.axvline(
            getattr(event, "epoch", 0),
            color=style["color"],
            linestyle=style["linestyle"],
            linewidth=1.0,
            alpha=0.8,
        )
        shown.add(style["label"])
    return shown


def training_figure(data: RunData, max_series: int = 4) -> Any:
    """Left: training (dashed) and validation (solid) loss per epoch, lifecycle events as
    vertical lines. Right: host and seed parameters per epoch."""
    from matplotlib.lines import Line2D

    keys = data.env_episodes()[-max_series:]
    figure = new_figure(13.0, 4.8)
    loss_ax, params_ax = figure.subplots(1, 2)
    ppl = perplexity_scale(data)
    marked: set[str] = set()
    for colour, key in zip(palette(len(keys)), keys):
        rows = data.epochs[key]
        epochs = [r.epoch for r in rows]

        def value(loss: float) -> float:
            return math.exp(min(loss, 50.0)) if ppl else loss

        loss_ax.plot(epochs, [value(r.val_loss) for r in rows], color=colour, linewidth=1.8)
        loss_ax.plot(
            epochs,
            [value(r.train_loss) for r in rows],
            color=colour,
            linewidth=1.1,
            linestyle="--",
        )
        marked |= _mark_events(data, loss_ax, key, colour)
        params_ax.plot(
            epochs,
            [r.host_params + r.seed_params for r in rows],
            color=colour,
            linewidth=1.8,
            label=f"{series_label(data, key)}: host + seeds",
        )
        params_ax.plot(
            epochs, [r.host_params for r in rows], color=colour, linewidth=1.0, linestyle=":"
        )
    what = "perplexity" if ppl else "loss"
    loss_ax.set_title(f"{what.capitalize()} per epoch (solid: validation, dashed: training)")
    loss_ax.set_xlabel(f"epoch (1..{data.max_epochs})")
    loss_ax.set_ylabel(what + (" (log scale)" if ppl else ""))
    if ppl:
        loss_ax.set_yscale("log")
    else:
        loss_ax.set_ylim(bottom=0.0)  # from zero: no auto-zoom that turns noise into a trend
    loss_ax.set_xlim(0, data.max_epochs + 0.5)
    integer_ticks(loss_ax)
    loss_ax.grid(**GRID)
    handles = [
        Line2D([], [], color=s["color"], linestyle=s["linestyle"], label=s["label"])
        for s in EVENT_LINES.values()
        if s["label"] in marked
    ]
    if handles:
        loss_ax.legend(handles=handles, loc="upper right", fontsize=8, title="lifecycle")
    params_ax.set_title("Parameters per epoch (solid: host + seeds, dotted: host)")
    params_ax.set_xlabel(f"epoch (1..{data.max_epochs})")
    params_ax.set_ylabel("parameters")
    top = max((r.host_params + r.seed_params for k in keys for r in data.epochs[k]), default=1)
    params_ax.set_ylim(0.0, top * 1.12)  # from zero, with room above the highest line
    params_ax.set_xlim(0, data.max_epochs + 0.5)
    integer_ticks(params_ax)
    params_ax.grid(**GRID)
    params_ax.legend(loc="lower right", fontsize=8)
    figure.suptitle(data.title, fontsize=11)
    return figure
