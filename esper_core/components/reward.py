"""The reward protocol: every family receives the same :class:`RewardContext`.

A family is a component class constructed as ``Family(options, setup)`` with a
:class:`RewardSetup` (what it knows about the run, once); ``compute(ctx)`` receives a
:class:`RewardContext` every step and returns a :class:`RewardBreakdown` whose
components are summed into the total and reported to telemetry.
"""

from __future__ import annotations

import math
import numbers
from typing import ClassVar, Protocol, runtime_checkable

from attrs import field, frozen

from esper_core.errors import PluginError
from esper_core.lifecycle.actions import Action, LifecycleOp
from esper_core.lifecycle.stages import Stage


@frozen
class RewardSetup:
    """What a reward family may know about the run, given once at construction."""

    gamma: float  # run.gamma: the discount PPO uses, so potential-based shaping must use it too


@frozen
class SlotSnapshot:
    """The part of a slot's state rewards look at."""

    slot_id: str
    stage: Stage
    epochs_in_stage: int
    alpha: float
    contribution: float | None
    seed_params: int
    gain: float | None = None  # validation points gained since the seed first touched the output


@frozen
class RewardContext:
    action: Action
    op: LifecycleOp
    target_slot: str | None  # the slot the action addressed (None for WAIT)
    applied: bool  # False when the action was refused (illegal or a failed gate)
    epoch: int  # 1-based index of this step in the episode
    max_epochs: int
    val_acc_prev: float  # percent, before this epoch
    val_acc: float
    val_loss_prev: float
    val_loss: float
    slots_before: tuple[SlotSnapshot, ...]  # at the start of the step, before the action
    slots_after: tuple[SlotSnapshot, ...]  # after the epoch, ticks and any rollback
    host_params: int
    seed_params: int  # live + fossilized seeds after the step
    fossil_params: int
    pruned_contribution: float | None = None  # of the seed this action pruned
    fossilized_contribution: float | None = None  # of the seed this action fossilized
    fossils_contributing: int = 0  # fossils whose last contribution is >= 1 point
    rolled_back: bool = False
    chance_loss: float = 1.0
    # This epoch's training FLOPs over what the bare host would have cost on the same
    # samples: 1 without growth, 1.5 when seeds added half the host's compute.
    train_flops_ratio: float = 1.0
    # The previous epoch's ratio (1 before the first): what a price on the compute of the
    # model the episode ends with compares this epoch's to.
    train_flops_ratio_prev: float = 1.0

    @property
    def is_last_step(self) -> bool:
        return self.epoch >= self.max_epochs

    def target_before(self) -> SlotSnapshot | None:
        return next((s for s in self.slots_before if s.slot_id == self.target_slot), None)

    def target_after(self) -> SlotSnapshot | None:
        return next((s for s in self.slots_after if s.slot_id == self.target_slot), None)


@frozen
class RewardBreakdown:
    total: float
    components: dict[str, float] = field(factory=dict)

    @classmethod
    def of(cls, **components: float) -> RewardBreakdown:
        return cls(
            total=float(sum(components.values())),
            components={k: float(v) for k, v in components.items()},
        )

    def plus(self, **components: float) -> RewardBreakdown:
        merged = dict(self.components)
        for key, value in components.items():
            merged[key] = merged.get(key, 0.0) + float(value)
        return RewardBreakdown(
            total=self.total + float(sum(components.values())), components=merged
        )


@runtime_checkable
class RewardFamily(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type]

    def compute(self, ctx: RewardContext) -> RewardBreakdown: ...


def checked_breakdown(result: object, family: object, epoch: int) -> RewardBreakdown:
    """``result`` of ``family.compute`` at ``epoch``, refused in one line naming the family
    unless it is a :class:`RewardBreakdown` of finite numbers. A wrong type would fail later
    in the env's own code, blaming nobody; a NaN would be summed into every total, and
    into summary.json (where it is not even valid JSON)."""
    who = f"reward {getattr(family, 'name', type(family).__name__)!r} ({type(family).__module__})"
    if not isinstance(result, RewardBreakdown):
        raise PluginError(
            f"{who} returned a {type(result).__name__} from compute at epoch {epoch}; it must "
            "return a RewardBreakdown (e.g. RewardBreakdown.of(name=value))"
        )
    for key, value in {"total": result.total, **result.components}.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise PluginError(
                f"{who} returned a RewardBreakdown whose {key} is a {type(value).__name__} "
                f"at epoch {epoch}; every value must be a float"
            )
        if not math.isfinite(value):
            raise PluginError(
                f"{who} returned a non-finite reward ({key} = {value}) at epoch {epoch}; "
                "a reward must be a finite number"
            )
    return result
