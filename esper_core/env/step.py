"""What one env step returns to the executor, the runner and the policy: the values live
in :mod:`esper_core.step_values` (below the env and the policy protocols, which both name
them); this path names them too."""

from __future__ import annotations

from esper_core.step_values import EpochMetrics, StepResult

__all__ = ["EpochMetrics", "StepResult"]
