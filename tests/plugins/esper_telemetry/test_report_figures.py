"""What the report's figures show: loss next to accuracy with the lifecycle marked,
parameters over time, perplexity for a language model, PPO diagnostics as plots, and axes
that do not zoom into noise."""

from __future__ import annotations

from pathlib import Path

import attrs
from esper_telemetry.report.data import index_events
from esper_telemetry.report.figures import accuracy_figure
from esper_telemetry.report.training_figures import training_figure

from esper_core.run.telemetry import RunStarted
from tests.plugins.esper_telemetry.helpers import synthetic_batches


def _data(mode: str = "run", task: str | None = None):  # type: ignore[no-untyped-def]
    events = [
        e
        for batch in synthetic_batches(n_envs=1, episodes=2, max_epochs=4, mode=mode)
        for e in batch
    ]
    if task is not None:
        events = [attrs.evolve(e, task=task) if isinstance(e, RunStarted) else e for e in events]
    return index_events(Path("/nowhere"), events)


def test_loss_panel_starts_at_zero_and_marks_the_lifecycle() -> None:
    figure = training_figure(_data())
    loss_ax, params_ax = figure.axes[:2]
    assert loss_ax.get_ylim()[0] == 0.0 and params_ax.get_ylim()[0] == 0.0
    assert loss_ax.get_yscale() == "linear" and "loss" in loss_ax.get_ylabel()
    # A germination per episode: a vertical line at epoch 0, named in the legend.
    assert any(list(line.get_xdata()) == [0, 0] for line in loss_ax.get_lines())
    assert "germinated" in [t.get_text() for t in loss_ax.get_legend().get_texts()]
    totals = [line for line in params_ax.get_lines() if line.get_label().endswith("host + seeds")]
    assert totals and max(totals[0].get_ydata()) >= 100  # host parameters of the synthetic run


def test_a_language_model_shows_perplexity_on_a_log_axis() -> None:
    loss_ax = training_figure(_data(task="charlm")).axes[0]
    assert loss_ax.get_yscale() == "log" and "perplexity" in loss_ax.get_ylabel()


def test_accuracy_uses_the_whole_scale() -> None:
    assert accuracy_figure(_data()).axes[0].get_ylim() == (0.0, 100.0)


def test_accuracy_marks_the_lifecycle_on_each_curve_with_fixed_legend_markers() -> None:
    from matplotlib.collections import PathCollection

    data = _data()
    ax = accuracy_figure(data).axes[0]
    # One germination per episode, before its first epoch: a marker on that curve's first point.
    marks = [c for c in ax.collections if isinstance(c, PathCollection)]
    first_points = sorted((rows[0].epoch, rows[0].val_acc) for rows in data.epochs.values() if rows)
    drawn = sorted(tuple(map(float, xy)) for c in marks for xy in c.get_offsets())
    assert drawn == [(float(e), float(a)) for e, a in first_points]
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert "germinated" in texts
    handle = legend.legend_handles[texts.index("germinated")]
    assert handle.get_marker() == "^" and handle.get_markersize() == 9
