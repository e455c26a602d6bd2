"""What the heuristic remembers per env, and the decisions it hands back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attrs import define, field, frozen

from esper_tamiyo_heuristic.signals import Baseline

if TYPE_CHECKING:
    from esper_core.lifecycle.actions import Action


@define
class SeenSeed:
    seed_id: str
    blueprint: str


@define
class EnvMemory:
    """What the heuristic remembers about one env's episode."""

    # Position in the blueprint order of the next germination.
    rotation: int = 0
    # Blueprint key -> the first epoch it may be germinated again.
    penalties: dict[str, int] = field(factory=dict)
    # Slot id -> the live seed in it at the last decision (to notice prunes).
    seen: dict[str, SeenSeed] = field(factory=dict)
    # Training losses of the last epochs, oldest first, and the epoch of the last one.
    train_losses: list[float] = field(factory=list)
    last_epoch: int = 0
    # Seed id -> its validation-loss baseline (None: not measurable).
    baselines: dict[str, Baseline | None] = field(factory=dict)
    # Seed id -> its gain when last judged short of its price (a rising gain may wait).
    gains: dict[str, float] = field(factory=dict)
    # The training-FLOPs ratio of the epoch before the last germination: what the model
    # cost without the seed now live (price = flops).
    flops_before_growth: float = 1.0
    # Why nothing was germinated, for the episode's summary (``why_no_growth``): whether
    # the trigger was ever asked (min_epoch passed, no live seed, no recent prune), and the
    # first time it fired too late to judge a seed: [epoch, epochs left, epochs needed].
    trigger_asked: bool = False
    late_trigger: list[int] = field(factory=list)
    # trigger = expansion: the epoch of the last decision at which a free slot's score
    # reached expansion_ratio, and how many decisions in a row it has (expansion_patience).
    expansion_epoch: int = -1
    expansion_streak: int = 0
    # The epoch the host growth (``host_growth``) was asked for; -1: not this episode.
    # Remembered, not read from the host, so that a growth a rollback pruned is not
    # asked for again: once per episode.
    host_growth_epoch: int = -1


@frozen
class Decision:
    """An action and the rule that chose it (for tests, debugging and benchmarks)."""

    action: Action
    rule: str
    reason: str


def resolve_blueprint_order(names: Sequence[str], available: Sequence[str]) -> tuple[str, ...]:
    """Map names or keys to the available blueprint keys, in order, without repeats."""
    order: list[str] = []
    for name in names:
        for key in available:
            if (key == name or key.split("/", 1)[-1] == name) and key not in order:
                order.append(key)
    return tuple(order) or tuple(available)
