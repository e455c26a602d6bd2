"""The plain values of a seed slot: its settings, its state and the report it gives.

A :class:`SlotState` is everything about a slot that is not a tensor, so a checkpoint
holds it as plain data; :class:`SlotReport` and :class:`GateInputs` are read-only views
of it, copied by field name.
"""

from __future__ import annotations

from attrs import define, field, frozen

from esper_core.config import LifecycleSection
from esper_core.lifecycle import rules
from esper_core.lifecycle.alpha import AlphaSchedule
from esper_core.lifecycle.gates import GateInputs, GateThresholds
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.views import by_name, lifecycle_default


@frozen
class SlotSettings:
    """The lifecycle settings a slot needs; every number is a ``LifecycleSection`` field."""

    gates: GateThresholds = GateThresholds()
    embargo_epochs: int = lifecycle_default("embargo_epochs")
    resetting_epochs: int = lifecycle_default("resetting_epochs")
    sigmoid_steepness: float = lifecycle_default("sigmoid_steepness")
    stage_history: int = lifecycle_default("stage_history")

    @classmethod
    def from_lifecycle(cls, lc: LifecycleSection) -> SlotSettings:
        """The settings of ``lc``, copied by field name (``strict`` from ``gate_mode``)."""
        gates = by_name(GateThresholds, lc, strict=lc.gate_mode == "strict")
        return by_name(cls, lc, gates=gates)

    @property
    def cooldown_epochs(self) -> int:
        """Epochs from a prune until the slot is DORMANT again."""
        return rules.cooldown_epochs(self)


# Frozen, so one instance serves every slot built without explicit settings.
DEFAULT_SETTINGS = SlotSettings()


@define
class SlotState:
    """Everything about a slot that is not a tensor; checkpointed as plain data."""

    stage: Stage = Stage.DORMANT
    epochs_in_stage: int = 0
    cooldown_left: int = 0
    seed_id: str | None = None
    blueprint: str | None = None  # blueprint key, e.g. "cnn/conv_small"
    style: str | None = None
    tempo: int = 5  # epochs of the alpha ramp when blending starts
    epochs_total: int = 0
    germinated_epoch: int = -1
    acc_at_germination: float = 0.0
    acc_at_stage_start: float = 0.0
    alpha_schedule: AlphaSchedule = field(factory=lambda: AlphaSchedule(target=0.0, ticks=1))
    contribution: float | None = None
    contribution_prev: float | None = None
    contribution_fresh: bool = False  # measured by the last validation
    # Validation accuracy just before the seed first touched the output (entering
    # BLENDING), and ``gain``: the validation accuracy now minus that, in points, updated
    # every epoch from then on. The counterfactual contribution measures how much the
    # model *relies* on the seed (a host co-adapted to a useless seed relies on it too);
    # the gain measures what the model gained since the seed joined it, host progress
    # in that time included.
    acc_before_output: float | None = None
    gain: float | None = None
    gradient_health: float | None = None
    exploding: bool = False
    grad_ratio: float | None = None
    seed_grad_norm: float | None = None
    loss_finite: bool = True
    history: list[tuple[str, int]] = field(factory=list)  # (stage, epochs_total at entry)

    @property
    def alpha(self) -> float:
        return rules.alpha_of(self.stage, self.alpha_schedule.value)

    @property
    def alpha_target(self) -> float:
        """Where alpha is heading: the ramp's target while BLENDING, else alpha itself."""
        return self.alpha_schedule.target if self.stage == Stage.BLENDING else self.alpha

    def mark_output_start(self, accuracy: float | None) -> None:
        """The seed is about to touch the output for the first time: remember the accuracy."""
        if self.acc_before_output is None and accuracy is not None:
            self.acc_before_output = accuracy

    def record_accuracy(self, accuracy: float) -> None:
        """This epoch's validation accuracy: the gain of a seed that touches the output."""
        if self.acc_before_output is not None and self.stage in rules.BLENDED_STAGES:
            self.gain = accuracy - self.acc_before_output

    def gate_inputs(self) -> GateInputs:
        # A gate judges this epoch's contribution only, never a stale one.
        fresh = self.contribution if self.contribution_fresh else None
        return by_name(GateInputs, self, contribution=fresh)

    def report(self, slot_id: str, seed_params: int) -> SlotReport:
        velocity = 0.0
        if self.contribution is not None and self.contribution_prev is not None:
            velocity = self.contribution - self.contribution_prev
        return by_name(
            SlotReport,
            self,
            slot_id=slot_id,
            contribution_velocity=velocity,
            seed_params=seed_params,
        )


@frozen
class SlotReport:
    """A read-only view of a slot for observations, policies and telemetry."""

    slot_id: str
    stage: Stage
    seed_id: str | None
    blueprint: str | None
    style: str | None
    alpha: float
    alpha_target: float
    epochs_in_stage: int
    epochs_total: int
    contribution: float | None
    contribution_velocity: float
    gradient_health: float | None
    grad_ratio: float | None
    seed_params: int
    acc_at_stage_start: float
    acc_at_germination: float
    cooldown_left: int
    acc_before_output: float | None = None
    gain: float | None = None
    exploding: bool = False
