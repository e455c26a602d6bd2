"""The quality gates that guard advances (DOMAIN §2): a failed gate names its failed
checks and never raises."""

from __future__ import annotations

import math

from attrs import frozen

from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.views import lifecycle_default


@frozen
class GateThresholds:
    """Gate parameters; every number is a ``LifecycleSection`` field of the same name."""

    strict: bool = lifecycle_default("gate_mode") == "strict"
    min_training_epochs: int = lifecycle_default("min_training_epochs")
    min_gradient_health: float = lifecycle_default("min_gradient_health")
    min_grad_ratio: float = lifecycle_default("min_grad_ratio")
    strict_min_blending_epochs: int = lifecycle_default("strict_min_blending_epochs")
    strict_min_contribution: float = lifecycle_default("strict_min_contribution")


@frozen
class GateInputs:
    """What a gate looks at, measured by the last epoch."""

    stage: Stage
    epochs_in_stage: int
    alpha: float
    alpha_target: float
    gradient_health: float | None  # None: not measured (the seed saw no gradient)
    exploding: bool
    grad_ratio: float | None
    contribution: float | None  # points; None: not measured this epoch
    loss_finite: bool


@frozen
class GateResult:
    gate: str
    target: Stage
    passed: bool
    failed: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        if self.passed:
            return f"{self.gate} passed"
        return f"{self.gate} failed: " + "; ".join(self.failed)


def _health_checks(inputs: GateInputs, t: GateThresholds) -> list[str]:
    failed = []
    if inputs.gradient_health is None:
        failed.append("gradient health not measured")
    elif inputs.gradient_health < t.min_gradient_health:
        failed.append(f"gradient health {inputs.gradient_health:.2f} < {t.min_gradient_health:.2f}")
    if inputs.exploding:
        failed.append("exploding gradient")
    return failed


def evaluate_gate(target: Stage, inputs: GateInputs, t: GateThresholds) -> GateResult:
    """Evaluate the gate that guards ``inputs.stage -> target``. Never raises."""
    failed: list[str] = []
    if target == Stage.TRAINING:
        gate = "G1"
        if inputs.stage != Stage.GERMINATED:
            failed.append(f"stage is {inputs.stage.value}, not GERMINATED")
    elif target == Stage.BLENDING and inputs.stage == Stage.TRAINING:
        gate = "G2"
        if inputs.epochs_in_stage < t.min_training_epochs:
            failed.append(f"{inputs.epochs_in_stage} epochs in TRAINING < {t.min_training_epochs}")
        failed.extend(_health_checks(inputs, t))
        if t.strict and (inputs.grad_ratio is None or inputs.grad_ratio < t.min_grad_ratio):
            ratio = "unmeasured" if inputs.grad_ratio is None else f"{inputs.grad_ratio:.3f}"
            failed.append(f"seed/host gradient ratio {ratio} < {t.min_grad_ratio:.2f}")
    elif target == Stage.HOLDING:
        gate = "G3"
        if inputs.stage != Stage.BLENDING:
            failed.append(f"stage is {inputs.stage.value}, not BLENDING")
        if inputs.alpha_target < 1.0 or inputs.alpha < 1.0:
            failed.append(f"alpha {inputs.alpha:.3f} has not reached target 1.0")
        if t.strict and inputs.epochs_in_stage < t.strict_min_blending_epochs:
            failed.append(
                f"{inputs.epochs_in_stage} epochs in BLENDING < {t.strict_min_blending_epochs}"
            )
    elif target == Stage.FOSSILIZED:
        gate = "G5"
        if inputs.stage != Stage.HOLDING:
            failed.append(f"stage is {inputs.stage.value}, not HOLDING")
        if inputs.contribution is None or not math.isfinite(inputs.contribution):
            failed.append("no counterfactual contribution measured this epoch")
        if not inputs.loss_finite:
            failed.append("loss is not finite")
        failed.extend(_health_checks(inputs, t))
        if (
            t.strict
            and inputs.contribution is not None
            and inputs.contribution < t.strict_min_contribution
        ):
            failed.append(
                f"contribution {inputs.contribution:.2f} points < {t.strict_min_contribution:.2f}"
            )
    else:
        gate = "no gate"
        failed.append(f"no gated advance from {inputs.stage.value} to {target.value}")
    return GateResult(gate=gate, target=target, passed=not failed, failed=tuple(failed))
