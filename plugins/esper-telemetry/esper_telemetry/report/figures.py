"""The report's figures, one module per figure (accuracy, lifecycle, reward; the training
figures and the learning curve have theirs), gathered here for the report and its callers.
"""

from __future__ import annotations

from esper_telemetry.report.accuracy_figure import accuracy_figure
from esper_telemetry.report.canvas import save
from esper_telemetry.report.lifecycle_figure import lifecycle_figure
from esper_telemetry.report.reward_figure import reward_figure

__all__ = ["accuracy_figure", "lifecycle_figure", "reward_figure", "save"]
