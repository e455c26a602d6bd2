"""The metric a comparison judges each task by, and which way is better.

One place decides it, :func:`task_metrics`: the experiment's ``[sweep] metric``, or with
"auto" (the default) the test loss of a language model (the task class says
``language_model = True``) and the test accuracy of anything else. Everything that ranks
runs takes it from there: the main column of the tables, P(policy better than the
baseline), the same-seed wins/ties/losses, the paired differences, the dominance marks,
the size-sweep frontier, the growth paths and the plots. Accuracy ranks a language model
poorly: a run can predict the most likely next character as often as another while
putting less probability on the right one, which only the loss sees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from esper_core.run.summary import is_language_model

if TYPE_CHECKING:
    from esper_core.compare.experiment import Experiment
    from esper_core.plugins import PluginManager

# CellResult fields a comparison ranks runs by.
ACCURACY = "final_test_acc"
LOSS = "final_test_loss"
# The validation value of each test metric: what a choice among runs is made by.
VALIDATION = {ACCURACY: "final_val_acc", LOSS: "final_val_loss"}
# A row pooled over tasks judged in different metrics: each task keeps its own.
MIXED = "mixed"
# Which way is better for each CellResult field a paired difference is taken of.
HIGHER_IS_BETTER = {
    ACCURACY: True,
    LOSS: False,
    "train_flops": False,
    VALIDATION[ACCURACY]: True,
    VALIDATION[LOSS]: False,
}


def higher_is_better(metric: str) -> bool:
    return HIGHER_IS_BETTER[metric]


def oriented(value: float, metric: str) -> float:
    """``value`` turned so that higher is better: a rank statistic or a win count taken of
    it then means "better" whatever the metric."""
    return value if HIGHER_IS_BETTER[metric] else -value


def common(metrics: Iterable[str]) -> str:
    """The one metric of several tasks, or :data:`MIXED`."""
    distinct = set(metrics)
    return distinct.pop() if len(distinct) == 1 else MIXED


def metric_kinds(experiment: Experiment, pm: PluginManager, setting: str) -> dict[str, str]:
    """Per task label, "loss" or "accuracy": ``setting`` itself, or with "auto" loss for a
    language model (the task class says ``language_model = True``) and accuracy otherwise.
    Shared by the ranking (test values) and the tuning search (validation values)."""
    if setting != "auto":
        return {t.label: setting for t in experiment.tasks}
    return {
        t.label: "loss" if is_language_model(pm.get("tasks", t.name)) else "accuracy"
        for t in experiment.tasks
    }


def task_metrics(experiment: Experiment, pm: PluginManager) -> dict[str, str]:
    """Per task label, the CellResult field its runs are ranked by."""
    kinds = metric_kinds(experiment, pm, experiment.frontier_metric)
    return {task: LOSS if kind == "loss" else ACCURACY for task, kind in kinds.items()}
