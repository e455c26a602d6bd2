"""The tuning part of a comparison's text: what was searched, what each arm chose, or that
nothing was tuned. Shared by results.md and the terminal, like :mod:`.tables`."""

from __future__ import annotations

import json
from typing import Any

from esper_core.compare.results import ComparisonResults
from esper_core.compare.tuning_choice import edge_line
from esper_core.compare.tuning_results import VAL_ACC, ArmTuning, TuningResults

# Said wherever results are shown without a search: an untuned baseline is no fair one.
UNTUNED = "Untuned: every arm used the shared config's training recipe; add [tuning] to search it."
METRIC_NAMES = {VAL_ACC: ("validation accuracy", "val acc %", 2)}
LOSS_NAME = ("validation loss", "val loss", 4)


def _metric(arm: ArmTuning) -> tuple[str, str, int]:
    return METRIC_NAMES.get(arm.metric, LOSS_NAME)


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value)


def _seeds(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds))


def _score(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _metrics(tuning: TuningResults) -> str:
    names = dict.fromkeys(_metric(a)[0] for a in tuning.arms)
    return " / ".join(names) or "the validation metric"


def summary_line(tuning: TuningResults | None) -> str:
    """One line: what was searched, on which seeds, by which rule (or that nothing was)."""
    if tuning is None:
        return UNTUNED
    points = 1
    for values in tuning.grid.values():
        points *= len(values)
    return (
        f"Tuning: searched on seeds {_seeds(tuning.seeds)} (never evaluation seeds), "
        f"{points} grid point(s) of {', '.join(tuning.grid)} per arm, by {_metrics(tuning)}: "
        f"{tuning.rule}. Each arm's evaluation runs used its chosen values; a static-final "
        "baseline those of the policy whose architecture it retrains."
    )


def chosen_rows(tuning: TuningResults) -> tuple[list[str], list[list[str]]]:
    """One row per (task, arm): the chosen values and the chosen point's mean."""
    keys = list(tuning.grid)
    header = ["task", "arm", *keys, "mean (tuning seeds)"]
    rows = []
    for arm in tuning.arms:
        if arm.chosen is None:
            rows.append([arm.task, arm.arm, *["unfinished"] * len(keys), "-"])
            continue
        values = [fmt_value(arm.chosen[k]) for k in keys]
        if arm.same_as is not None:
            rows.append([arm.task, arm.arm, *values, f"{arm.same_as}'s choice"])
            continue
        name, _, digits = _metric(arm)
        mean = arm.points[arm.point].mean if arm.point is not None else None
        rows.append([arm.task, arm.arm, *values, f"{_score(mean, digits)} {name}"])
    return header, rows


def search_rows(tuning: TuningResults) -> tuple[list[str], list[list[str]]]:
    """The whole search: one row per (task, arm, grid point), with every seed's value."""
    keys = list(tuning.grid)
    header = [
        "task",
        "arm",
        *keys,
        "metric",
        "mean",
        f"per seed ({_seeds(tuning.seeds)})",
        "chosen",
    ]
    rows = []
    for arm in tuning.arms:
        _, short, digits = _metric(arm)
        if arm.same_as is not None:
            values = (
                ["-"] * len(keys)
                if arm.chosen is None
                else [fmt_value(arm.chosen[k]) for k in keys]
            )
            rows.append(
                [arm.task, arm.arm, *values, short, "-", "-", f"{arm.same_as}'s (same recipe)"]
            )
            continue
        for k, point in enumerate(arm.points):
            rows.append(
                [
                    arm.task,
                    arm.arm,
                    *[fmt_value(point.values[key]) for key in keys],
                    short,
                    _score(point.mean, digits),
                    ", ".join(_score(v, digits) for v in point.scores),
                    _chosen_word(k == arm.point, point.failed),
                ]
            )
    return header, rows


def _chosen_word(chosen: bool, failed: list[int]) -> str:
    """ "yes" for the chosen point; a point that did not train says on which seeds."""
    word = "yes" if chosen else ""
    if failed:
        word = (word + ", " if word else "") + f"did not train: {_seeds(failed)}"
    return word


def edge_lines(tuning: TuningResults) -> list[str]:
    """One line per searched arm whose choice is at an end of its grid."""
    return [
        f"{arm.task} / {arm.arm}: {edge_line(key, arm.chosen[key], end)}"
        for arm in tuning.arms
        if arm.same_as is None and arm.chosen is not None
        for key, end in arm.edges.items()
    ]


def tuning_markdown(results: ComparisonResults) -> list[str]:
    """The Markdown lines of results.md's tuning part."""
    tuning = results.tuning
    if tuning is None:
        return [UNTUNED, ""]
    out = ["## Tuning", "", summary_line(tuning), ""]
    for header, rows in (chosen_rows(tuning), search_rows(tuning)):
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    edges = edge_lines(tuning)
    if edges:
        out += ["At the edge of the grid:", "", *(f"- {line}" for line in edges), ""]
    if not tuning.finished:
        out += ["The search is unfinished: no evaluation run has been made with its choice.", ""]
    return out
