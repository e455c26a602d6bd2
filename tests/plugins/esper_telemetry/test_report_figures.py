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


def _widened():  # type: ignore[no-untyped-def]
    """The synthetic run with a width growth in episode 0: started after epoch 1, folded
    at the end of epoch 2."""
    from esper_core.run.telemetry import HostGrowthFossilized, HostGrowthStarted

    common = {"env": 0, "episode": 0, "growth_id": "width-0", "operator": "width"}
    growth = [
        HostGrowthStarted(
            **common,  # type: ignore[arg-type]
            epoch=1,
            plan="stage 0 -> 16",
            widths_before={"stage0": 4},
            widths_after={"stage0": 16},
            params_before=1702,
            params_after=24058,
            tempo=2,
            curve="linear",
        ),
        HostGrowthFossilized(
            **common,  # type: ignore[arg-type]
            epoch=2,
            started_epoch=1,
            params_before=1702,
            params_after=24058,
        ),
    ]
    events = [e for batch in synthetic_batches(n_envs=1, episodes=2, max_epochs=4) for e in batch]
    return index_events(Path("/nowhere"), [*events, *growth])


def test_a_host_growth_is_marked_on_the_accuracy_curve_and_the_training_losses() -> None:
    data = _widened()
    ax = accuracy_figure(data).axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "host grew (width)" in texts and "host growth folded in" in texts
    accuracy = {r.epoch: r.val_acc for r in data.epochs[(0, 0)]}
    drawn = {tuple(map(float, xy)) for c in ax.collections for xy in c.get_offsets()}
    assert (1.0, float(accuracy[1])) in drawn and (2.0, float(accuracy[2])) in drawn
    loss_ax = training_figure(data).axes[0]
    assert "host widened" in [t.get_text() for t in loss_ax.get_legend().get_texts()]


def test_the_swimlane_has_a_host_lane_with_the_growth_and_its_markers() -> None:
    from esper_telemetry.report.figures import lifecycle_figure

    ax = lifecycle_figure(_widened()).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "env 0 · episode 0 · host" in labels
    assert "env 0 · episode 1 · host" not in labels  # episode 1 kept its shape
    notes = [t.get_text() for t in ax.texts]
    assert "width 4x: 1,702 -> 24,058 params" in notes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"host grew (width)", "host growth folded in", "BLENDING", "FOSSILIZED"} <= set(legend)


def test_report_md_lists_the_host_growth() -> None:
    from esper_telemetry.report.markdown import render

    text = render(_widened(), [])
    assert (
        "- **host growth** width-0 (env 0, episode 0): width, stage 0 -> 16, at epoch 1: "
        "1,702 -> 24,058 parameters, folded in at epoch 2"
    ) in text


def test_the_swimlane_numbers_each_decision_and_says_why_under_the_lanes() -> None:
    from esper_telemetry.report.figures import lifecycle_figure

    from esper_core.run.telemetry import EpochCompleted

    def decide(e: object) -> object:
        if isinstance(e, EpochCompleted) and e.episode == 0 and e.epoch == 1:
            return attrs.evolve(
                e, action="GERMINATE r0c1 conv_light", reason="plateau: val loss fell 0.4%"
            )
        if isinstance(e, EpochCompleted) and e.episode == 1 and e.epoch == 3:
            return attrs.evolve(e, action="PRUNE r0c0", action_refused="r0c0 is dormant")
        if isinstance(e, EpochCompleted):
            return attrs.evolve(e, reason="no rule applies")  # WAITs: report.md only
        return e

    events = [decide(e) for b in synthetic_batches(n_envs=1, episodes=2, max_epochs=4) for e in b]
    figure = lifecycle_figure(index_events(Path("/nowhere"), events))
    lanes, notes = figure.axes
    lane_of = {t.get_text(): t.get_position()[1] for t in lanes.get_yticklabels()}
    tags = {t.get_text(): t.xy for t in lanes.texts if t.get_text() in ("1", "2")}
    assert tags["1"] == (0, lane_of["env 0 · episode 0 · r0c1"])
    assert tags["2"] == (2, lane_of["env 0 · episode 1 · r0c0"])
    text = notes.texts[0].get_text()
    assert (
        "1. env 0 · episode 0, after epoch 0: GERMINATE r0c1 conv_light: plateau: val loss" in text
    )
    assert (
        "2. env 0 · episode 1, after epoch 2: PRUNE r0c0 (refused: r0c0 is dormant): no reason given"
        in text
    )
    assert "no rule applies" not in text


def test_a_swimlane_without_decisions_has_no_notes_panel() -> None:
    from esper_telemetry.report.figures import lifecycle_figure

    assert len(lifecycle_figure(_data()).axes) == 1
