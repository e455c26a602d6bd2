"""The learning curve of an ``esper train`` run (``learning.png``), six panels by update.

Update k is where every panel puts the policy after k updates: the rollout it collected
(return), its greedy evaluation, and the update that learned from that rollout.

1. episode return: mean over the update's rollout episodes, with their range;
2. greedy evaluation: final test accuracy of the trained policy acting greedily on the
   fixed evaluation seeds (mean and each seed), with the reference policies evaluated
   on the same seeds as horizontal lines (``wait``, ``heuristic``);
3. entropy of each action head (over the steps where the op used the head);
4. approximate KL of each update, with the early-stop threshold when it is known;
5. clip fraction;
6. explained variance of the value function.

A panel whose numbers the run does not have says so instead of drawing nothing.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from esper_core.lifecycle.actions import HEADS
from esper_telemetry.report.canvas import GRID, integer_ticks, new_figure, palette
from esper_telemetry.report.data import RunData

REFERENCE_STYLE = {
    "wait": {"color": "#6c757d", "linestyle": "--"},
    "heuristic": {"color": "#2a9d8f", "linestyle": "-."},
}


def _series(data: RunData, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for u in data.updates:
        value = u.diagnostics.get(key)
        if value is not None and math.isfinite(value):
            xs.append(u.update)
            ys.append(value)
    return xs, ys


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _returns(data: RunData, ax: Any) -> None:
    by_update: dict[int, list[float]] = defaultdict(list)
    for e in data.episodes:
        if e.update is not None:
            by_update[e.update].append(e.total_reward)
    if not by_update:
        _empty(ax, "no training episodes")
        return
    xs = sorted(by_update)
    means = [statistics.fmean(by_update[u]) for u in xs]
    ax.fill_between(
        xs,
        [min(by_update[u]) for u in xs],
        [max(by_update[u]) for u in xs],
        color="#457b9d",
        alpha=0.2,
        label="range",
    )
    ax.plot(xs, means, color="#1d3557", marker="o", markersize=3, label="mean")
    ax.set_title("episode return (rollout episodes)")
    ax.set_xlabel("update")
    ax.legend(fontsize=7, loc="best")


def _evaluations(data: RunData, ax: Any) -> None:
    trained = [e for e in data.evaluations if e.policy == "trained" and e.update is not None]
    references = [e for e in data.evaluations if e.update is None]
    if not trained:
        _empty(ax, "no greedy evaluation (train.eval_every = 0?)")
        return
    trained.sort(key=lambda e: e.update or 0)
    xs = [e.update for e in trained]
    for e in trained:
        dots = [a for a in e.final_test_acc if a is not None]
        ax.scatter([e.update] * len(dots), dots, s=10, color="#e76f51", alpha=0.5, zorder=2)
    means = [_mean(list(e.final_test_acc)) for e in trained]
    ax.plot(xs, means, color="#e76f51", marker="o", label="ppo (greedy)", zorder=3)
    for ref in references:
        level = _mean(list(ref.final_test_acc))
        if level is not None:
            style = REFERENCE_STYLE.get(ref.policy, {"color": "#000000", "linestyle": ":"})
            ax.axhline(level, label=f"{ref.policy} ({level:.1f})", linewidth=1.4, **style)
    seeds = ", ".join(str(s) for s in trained[-1].seeds)
    ax.set_title(f"greedy evaluation, final test acc. (random seeds {seeds})", fontsize=9)
    ax.set_xlabel("update")
    ax.set_ylabel("%")
    ax.legend(fontsize=7, loc="lower right")


def _entropy(data: RunData, ax: Any) -> None:
    colours = palette(len(HEADS))
    drawn = False
    for head, colour in zip(HEADS, colours):
        xs, ys = _series(data, f"entropy/{head}")
        if xs:
            ax.plot(xs, ys, label=head, color=colour)
            drawn = True
    if not drawn:
        _empty(ax, "no entropy diagnostics")
        return
    ax.set_title("entropy per head (nats)")
    ax.set_xlabel("update")
    ax.legend(fontsize=7, ncols=2)


def _kl(data: RunData, ax: Any) -> None:
    xs, ys = _series(data, "approx_kl")
    if not xs:
        _empty(ax, "no approx_kl diagnostics")
        return
    ax.plot(xs, ys, color="#6a4c93", marker="o", markersize=3, label="approx KL")
    ppo = (data.started.config.get("policies", {}) if data.started else {}).get("ppo", {})
    target, factor = ppo.get("target_kl"), ppo.get("kl_stop_factor")
    if target and factor:
        ax.axhline(target * factor, color="#6a4c93", linestyle=":", label="early-stop threshold")
    stopped = [x for x, u in zip(*_series(data, "kl_stopped")) if u > 0]
    if stopped:
        ax.scatter(stopped, [0.0] * len(stopped), marker="|", color="#d00000", label="KL stop")
    ax.set_title("approximate KL per update")
    ax.set_xlabel("update")
    ax.legend(fontsize=7)


def _line(data: RunData, ax: Any, key: str, title: str, colour: str) -> None:
    xs, ys = _series(data, key)
    if not xs:
        _empty(ax, f"no {key} diagnostics")
        return
    ax.plot(xs, ys, color=colour, marker="o", markersize=3)
    ax.set_title(title)
    ax.set_xlabel("update")


def training_figure(data: RunData) -> Any:
    figure = new_figure(15, 8)
    axes = figure.subplots(2, 3)
    figure.suptitle(f"{data.title}: learning curve")
    _returns(data, axes[0][0])
    _evaluations(data, axes[0][1])
    _entropy(data, axes[0][2])
    _kl(data, axes[1][0])
    _line(data, axes[1][1], "clip_fraction", "clip fraction", "#f4a261")
    _line(data, axes[1][2], "explained_variance", "explained variance", "#2a9d8f")
    for ax in axes.flat:
        ax.grid(True, **GRID)
        integer_ticks(ax)
    return figure


def has_training(data: RunData) -> bool:
    return data.mode == "train" and bool(data.updates or data.evaluations)


__all__ = ["has_training", "training_figure"]
