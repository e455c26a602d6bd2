"""What one env step returns to the executor, the runner and the policy."""

from __future__ import annotations

from typing import Any

from attrs import field, frozen

from esper_core.env.observation import Observation
from esper_core.run.telemetry import EpochScores, Event


@frozen
class EpochMetrics(EpochScores):
    """Host numbers of one epoch, already on the CPU (one sync per epoch): the scores
    (losses, accuracies) the epoch event reports, then its time and batch count."""

    epoch_time: float
    batches: int


@frozen
class StepResult:
    """The outcome of one RL step (= one host epoch) of one env.

    ``done``: the episode is over (last epoch). ``terminal``: the value of the next
    state must not be bootstrapped: the episode ended or the governor rolled back,
    which ends this env's rollout segment (and only this env's).
    """

    env_index: int
    observation: Observation
    reward: float
    reward_components: dict[str, float]
    done: bool
    terminal: bool
    metrics: EpochMetrics
    refused: str | None = None  # why the action was refused, if it was
    rolled_back: bool = False
    events: list[Event] = field(factory=list)
    info: dict[str, Any] = field(factory=dict)
    reason: str = ""  # why the policy chose the epoch's action (its Action.reason)
