"""Builders for hand-made observations: slot reports, gates and the real masks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from esper_core.components.policy import PolicyContext
from esper_core.env.observation import Observation, feature_dim
from esper_core.lifecycle.actions import ActionSpace, MaskRules, compute_masks
from esper_core.lifecycle.gates import GateResult
from esper_core.lifecycle.rules import ADVANCE_TARGET, SEED_STAGES
from esper_core.lifecycle.slot import SlotReport
from esper_core.lifecycle.stages import Stage

SPACE = ActionSpace(
    slot_ids=("r0c0", "r0c1", "r0c2"),
    blueprints=("cnn/attention", "cnn/conv_heavy", "cnn/conv_light", "cnn/conv_small", "cnn/norm"),
    styles=("linear_add", "sigmoid_add", "linear_multiply", "gated"),
    tempos=(3, 5, 8),
    alpha_targets=(0.5, 0.7, 1.0),
)
RULES = MaskRules(max_seeds=3, min_prune_age=1)


class Builders:
    """Observations as the env would build them, with masks from ``compute_masks``."""

    space = SPACE
    rules = RULES

    def context(self, space: ActionSpace = SPACE, seed: int = 0, n_envs: int = 2) -> PolicyContext:
        return PolicyContext(
            space=space,
            feature_dim=feature_dim(space, 5),
            history_length=5,
            max_epochs=30,
            n_envs=n_envs,
            task="test",
            topology="cnn",
            gamma=0.995,
            seed=seed,
        )

    def report(
        self,
        slot_id: str = "r0c0",
        stage: Stage = Stage.DORMANT,
        *,
        seed_id: str | None = None,
        blueprint: str | None = None,
        epochs_in_stage: int = 0,
        epochs_total: int | None = None,
        contribution: float | None = None,
        acc_at_stage_start: float = 0.0,
        alpha: float | None = None,
        alpha_target: float | None = None,
        cooldown_left: int = 0,
    ) -> SlotReport:
        has_seed = stage in SEED_STAGES
        if alpha is None:
            alpha = 1.0 if stage in (Stage.HOLDING, Stage.FOSSILIZED) else 0.0
        return SlotReport(
            slot_id=slot_id,
            stage=stage,
            seed_id=seed_id if seed_id is not None else (f"{slot_id}-s1" if has_seed else None),
            blueprint=blueprint
            if blueprint is not None
            else ("cnn/conv_heavy" if has_seed else None),
            style="linear_add" if has_seed else None,
            alpha=alpha,
            alpha_target=alpha if alpha_target is None else alpha_target,
            epochs_in_stage=epochs_in_stage,
            epochs_total=epochs_in_stage if epochs_total is None else epochs_total,
            contribution=contribution,
            contribution_velocity=0.0,
            gradient_health=1.0 if has_seed else None,
            grad_ratio=None,
            seed_params=100 if has_seed else 0,
            acc_at_stage_start=acc_at_stage_start,
            acc_at_germination=acc_at_stage_start,
            cooldown_left=cooldown_left,
        )

    def gate(self, report: SlotReport, passed: bool) -> GateResult | None:
        """The slot's next gate, passed or failed (None where a stage has no gate)."""
        if report.stage in ADVANCE_TARGET:
            target = ADVANCE_TARGET[report.stage]
        elif report.stage == Stage.HOLDING:
            target = Stage.FOSSILIZED
        else:
            return None
        name = {
            Stage.TRAINING: "G1",
            Stage.BLENDING: "G2",
            Stage.HOLDING: "G3",
            Stage.FOSSILIZED: "G5",
        }[target]
        return GateResult(name, target, passed, () if passed else ("made to fail",))

    def obs(
        self,
        slots: Sequence[SlotReport] | None = None,
        *,
        passed: Sequence[bool] | bool = True,
        env_index: int = 0,
        epoch: int = 10,
        max_epochs: int = 30,
        val_acc: float = 80.0,
        plateau_epochs: int = 0,
        epochs_since_prune: int = 10_000,
        space: ActionSpace = SPACE,
        rules: MaskRules = RULES,
        train_loss: float = 0.5,
        loss_history: Sequence[float] = (0.5,),
        host_params: int = 1000,
        epochs_before_blending: Sequence[int] | None = None,
        train_flops_ratio: float = 1.0,
    ) -> Observation:
        if slots is None:
            slots = [self.report(sid) for sid in space.slot_ids]
        flags = [passed] * len(slots) if isinstance(passed, bool) else list(passed)
        return Observation(
            env_index=env_index,
            epoch=epoch,
            max_epochs=max_epochs,
            val_loss=loss_history[-1],
            val_acc=val_acc,
            train_loss=train_loss,
            train_acc=val_acc,
            chance_loss=2.3,
            loss_history=tuple(loss_history),
            acc_history=(val_acc,),
            plateau_epochs=plateau_epochs,
            best_acc=val_acc,
            epochs_since_prune=epochs_since_prune,
            host_params=host_params,
            seed_params=sum(r.seed_params for r in slots),
            slots=tuple(slots),
            gates=tuple(self.gate(r, ok) for r, ok in zip(slots, flags)),
            masks=compute_masks(slots, space, rules),
            train_flops_ratio=train_flops_ratio,
            epochs_before_blending=tuple(
                [0] * len(space.blueprints)
                if epochs_before_blending is None
                else epochs_before_blending
            ),
        )

    def with_slot(self, report: SlotReport, space: ActionSpace = SPACE) -> list[SlotReport]:
        """Every slot empty except ``report``'s."""
        return [report if sid == report.slot_id else self.report(sid) for sid in space.slot_ids]


@pytest.fixture(scope="session")
def build() -> Builders:
    return Builders()
