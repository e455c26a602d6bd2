"""The plain values of a seed slot: its settings, its state and the report it gives.

A :class:`SlotState` is everything about a slot that is not a tensor, so a checkpoint
holds it as plain data; :class:`SlotReport` and :class:`GateInputs` are read-only views
of it, copied by field name.
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import define, field, frozen

from esper_core.components.host import InjectionSpec
from esper_core.config import LifecycleSection
from esper_core.converter import converter
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
    isolation: str = lifecycle_default("isolation")
    isolation_non_identity: str = lifecycle_default("isolation_non_identity")
    # Resolved from ``short_training_fraction`` and the episode length by the env; a slot
    # built without an episode gets 2 (7% of a 30-epoch episode).
    short_training_epochs: int = 2
    blend_host_gradient: str = lifecycle_default("blend_host_gradient")

    @classmethod
    def from_lifecycle(cls, lc: LifecycleSection, max_epochs: int | None = None) -> SlotSettings:
        """The settings of ``lc``, copied by field name (``strict`` from ``gate_mode``);
        short isolation is a fraction of ``max_epochs`` (the episode), when given."""
        gates = by_name(GateThresholds, lc, strict=lc.gate_mode == "strict")
        short = (
            attrs.fields(cls).short_training_epochs.default
            if max_epochs is None
            else rules.short_isolation_epochs(lc.short_training_fraction, max_epochs)
        )
        return by_name(cls, lc, gates=gates, short_training_epochs=short)

    def isolation_mode(self, identity_at_birth: bool) -> str:
        return self.isolation if identity_at_birth else self.isolation_non_identity

    def isolation_epochs(self, identity_at_birth: bool) -> int:
        """Epochs of isolated TRAINING a new seed needs before it may blend."""
        return rules.isolation_epochs(
            self.isolation_mode(identity_at_birth),
            self.gates.min_training_epochs,
            self.short_training_epochs,
        )

    def epochs_before_blending(self, identity_at_birth: bool) -> int:
        """Epochs a new seed trains before it touches the output (0: it blends at once)."""
        mode = self.isolation_mode(identity_at_birth)
        return rules.epochs_before_blending(mode, self.isolation_epochs(identity_at_birth))

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
    isolation_epochs: int | None = None  # isolated TRAINING this seed needs (None: G2's default)
    acc_at_germination: float = 0.0
    # Validation accuracy just before the seed first touched the output (its gain's base).
    acc_before_blend: float | None = None
    acc_at_stage_start: float = 0.0
    alpha_schedule: AlphaSchedule = field(factory=lambda: AlphaSchedule(target=0.0, ticks=1))
    contribution: float | None = None
    contribution_prev: float | None = None
    contribution_fresh: bool = False  # measured by the last validation
    # ``gain``: the validation accuracy now minus ``acc_before_blend``, in points,
    # updated every epoch once the seed touches the output. The counterfactual
    # contribution measures how much the model *relies* on the seed (a host co-adapted
    # to a useless seed relies on it too); the gain measures what the model gained since
    # the seed joined it, host progress in that time included.
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

    def record_gradients(
        self,
        health: float | None,
        exploding: bool,
        grad_ratio: float | None,
        grad_norm: float | None,
    ) -> None:
        self.gradient_health, self.exploding = health, exploding
        self.grad_ratio, self.seed_grad_norm = grad_ratio, grad_norm

    def record_contribution(self, contribution: float | None, loss_finite: bool = True) -> None:
        if contribution is not None:
            self.contribution_prev = self.contribution
            self.contribution = contribution
        self.contribution_fresh = contribution is not None
        self.loss_finite = loss_finite

    def record_accuracy(self, accuracy: float) -> None:
        """This epoch's validation accuracy: the gain of a seed that touches the output."""
        if self.acc_before_blend is not None and self.stage in rules.BLENDED_STAGES:
            self.gain = accuracy - self.acc_before_blend

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
    acc_before_blend: float | None = None
    gain: float | None = None
    exploding: bool = False


def extra_state(state: SlotState, param_version: int, seed_spec: InjectionSpec) -> dict[str, Any]:
    """What a slot's checkpoint holds besides tensors: its state, and the widths its seed
    was built for (a fossil keeps them while the host widens around it)."""
    widths = (seed_spec.channels, seed_spec.next_channels)
    plain = converter.unstructure(state)
    return {"state": plain, "param_version": param_version, "seed_widths": widths}


def born_spec(spec: InjectionSpec, extra: dict[str, Any]) -> InjectionSpec:
    """The spec a checkpoint's seed was built for: the slot's ``spec`` at the seed's widths
    (a checkpoint without them: the slot's own)."""
    channels, after = extra.get("seed_widths", (spec.channels, spec.next_channels))
    return attrs.evolve(spec, channels=channels, next_channels=after)
