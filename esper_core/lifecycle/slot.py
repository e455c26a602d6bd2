"""SeedSlot: one injection point of the host, holding at most one seed (DOMAIN §2).

Forward pass by stage:

* no seed / cooldown: the host activation, untouched (the seed is not called);
* TRAINING: ``h + (s - s.detach())`` with the seed fed ``h.detach()``: output and host
  gradients are bit-identical to the host alone while the seed learns from the task
  gradient (straight-through);
* BLENDING: ``blend(h, s, alpha)`` with the seed input still detached (isolation);
* HOLDING, FOSSILIZED: alpha = 1 and isolation off, so upstream host layers receive
  gradient through the seed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.host import InjectionSpec
from esper_core.converter import converter
from esper_core.lifecycle import rules
from esper_core.lifecycle.alpha import (
    STYLES,
    AlphaSchedule,
    BlendGate,
    blend_add,
    blend_gated,
    blend_multiply,
)
from esper_core.lifecycle.gates import GateInputs, GateResult, evaluate_gate
from esper_core.lifecycle.rules import (
    ADVANCE_TARGET,
    BLENDED_STAGES,
    ISOLATED_STAGES,
    PRUNABLE_STAGES,
    SEED_STAGES,
    LifecycleError,
    check_transition,
)
from esper_core.lifecycle.slot_state import DEFAULT_SETTINGS, SlotReport, SlotSettings, SlotState
from esper_core.lifecycle.stages import Stage


class SeedSlot(nn.Module):
    """An injection point; see the module docstring for the stage semantics."""

    _anchor: torch.Tensor
    _alpha: torch.Tensor

    def __init__(
        self,
        spec: InjectionSpec,
        resolve_blueprint: Callable[[str], Blueprint],
        settings: SlotSettings = DEFAULT_SETTINGS,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.settings = settings
        self._resolve_blueprint = resolve_blueprint
        self.state = SlotState()
        self.seed: nn.Module | None = None
        self.gate: BlendGate | None = None
        # Bumped whenever the set of seed parameters changes, so optimizers follow it.
        self.param_version = 0
        # Moves with .to() so an empty slot still knows its device and dtype.
        self.register_buffer("_anchor", torch.zeros(0), persistent=False)
        self.register_buffer("_alpha", torch.zeros(()), persistent=False)
        self._alpha_override: torch.Tensor | float | None = None

    # ------------------------------------------------------------ properties

    @property
    def slot_id(self) -> str:
        return self.spec.slot_id

    @property
    def stage(self) -> Stage:
        return self.state.stage

    @property
    def alpha_tensor(self) -> torch.Tensor:
        """The scheduled alpha as a 0-dim tensor on the slot's device (no host sync to read)."""
        return self._alpha

    @property
    def has_seed(self) -> bool:
        return self.seed is not None

    def seed_parameters(self) -> list[nn.Parameter]:
        """The seed's parameters, gate included: what the seed's optimizer must hold."""
        params: list[nn.Parameter] = []
        if self.seed is not None:
            params.extend(self.seed.parameters())
        if self.gate is not None:
            params.extend(self.gate.parameters())
        return params

    def seed_param_count(self) -> int:
        return sum(p.numel() for p in self.seed_parameters())

    # ------------------------------------------------------------ transitions

    def _enter(self, stage: Stage, accuracy: float | None = None) -> None:
        check_transition(self.state.stage, stage, self.slot_id)
        self.state.stage = stage
        self.state.epochs_in_stage = 0
        if accuracy is not None:
            self.state.acc_at_stage_start = accuracy
        self.state.history.append((stage.value, self.state.epochs_total))
        del self.state.history[: -self.settings.stage_history]
        self._sync_alpha()

    def _sync_alpha(self) -> None:
        self._alpha.fill_(self.state.alpha)

    def _build_modules(self, blueprint: Blueprint, style: str) -> None:
        seed = blueprint.build(self.spec.channels)
        gate = (
            BlendGate(self.spec.channels, self.spec.topology)
            if STYLES[style].operator == "gate"
            else None
        )
        self.seed = seed.to(device=self._anchor.device, dtype=self._anchor.dtype)
        self.gate = gate.to(device=self._anchor.device, dtype=self._anchor.dtype) if gate else None
        self.param_version += 1

    def germinate(
        self,
        seed_id: str,
        blueprint: Blueprint,
        style: str = "linear_add",
        *,
        tempo: int = 5,
        epoch: int = 0,
        accuracy: float = 0.0,
        init_seed: int | None = None,
    ) -> None:
        """DORMANT -> GERMINATED: build the seed (and its gate) from a blueprint."""
        if not rules.may_germinate_in(self.state.stage):
            raise LifecycleError(self.state.stage, Stage.GERMINATED, self.slot_id)
        if blueprint.topology != self.spec.topology:
            raise ValueError(
                f"slot {self.slot_id}: blueprint {blueprint.key} is for {blueprint.topology} "
                f"hosts, this slot is {self.spec.topology}"
            )
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; expected one of {', '.join(STYLES)}")
        if init_seed is None:
            self._build_modules(blueprint, style)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(init_seed)
                self._build_modules(blueprint, style)
        self.state = SlotState(
            seed_id=seed_id,
            blueprint=blueprint.key,
            style=style,
            tempo=tempo,
            germinated_epoch=epoch,
            acc_at_germination=accuracy,
            acc_at_stage_start=accuracy,
            history=list(self.state.history),
        )
        self._enter(Stage.GERMINATED)

    def gate_inputs(self) -> GateInputs:
        return self.state.gate_inputs()

    def next_gate(self) -> GateResult | None:
        """The gate of the next forward step (ADVANCE, or G5 from HOLDING), if any."""
        target = rules.next_gated_target(self.state.stage)
        if target is None:
            return None
        return evaluate_gate(target, self.gate_inputs(), self.settings.gates)

    def advance(self, *, accuracy: float | None = None, alpha_target: float = 1.0) -> GateResult:
        """Move to the next stage if its gate passes; a failed gate changes nothing.

        Entering BLENDING starts the alpha ramp towards ``alpha_target`` over the tempo
        chosen at germination.
        """
        stage = self.state.stage
        if not rules.may_advance(stage):
            raise LifecycleError(
                stage,
                Stage.FOSSILIZED,
                self.slot_id,
                "advance() moves GERMINATED, TRAINING and BLENDING seeds; "
                "a HOLDING seed is fossilized with fossilize()",
            )
        target = ADVANCE_TARGET[stage]
        result = evaluate_gate(target, self.gate_inputs(), self.settings.gates)
        if result.passed:
            if target == Stage.BLENDING:
                self.state.alpha_schedule = AlphaSchedule(
                    curve=STYLES[self.state.style or "linear_add"].curve,
                    start=0.0,
                    target=alpha_target,
                    ticks=self.state.tempo,
                    steepness=self.settings.sigmoid_steepness,
                )
                # The first blending epoch already runs at curve(1/tempo): a blend at
                # alpha 0 would give the seed no gradient and waste an epoch.
                self.state.alpha_schedule.tick()
                self.state.mark_output_start(accuracy)
            self._enter(target, accuracy)
        return result

    def set_alpha_target(self, target: float, *, accuracy: float | None = None) -> None:
        """Retarget the blend: in BLENDING ramp to ``target``; from HOLDING (target < 1) go back to BLENDING."""
        stage = self.state.stage
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"slot {self.slot_id}: alpha target {target} is outside [0, 1]")
        if stage == Stage.HOLDING:
            if target >= 1.0:
                raise ValueError(
                    f"slot {self.slot_id}: already HOLDING at alpha 1; retarget below 1"
                )
            self.state.alpha_schedule = AlphaSchedule(
                curve=STYLES[self.state.style or "linear_add"].curve,
                start=1.0,
                target=1.0,
                ticks=1,
                step=1,
                steepness=self.settings.sigmoid_steepness,
            )
            self._enter(Stage.BLENDING, accuracy)
        elif stage != Stage.BLENDING:
            raise LifecycleError(
                stage,
                Stage.BLENDING,
                self.slot_id,
                "set_alpha_target() retargets BLENDING and HOLDING seeds; "
                "a TRAINING seed starts blending with advance()",
            )
        self.state.alpha_schedule.retarget(target, self.state.tempo)
        self.state.alpha_schedule.tick()
        self._sync_alpha()

    def fossilize(self, *, accuracy: float | None = None) -> GateResult:
        """HOLDING -> FOSSILIZED if G5 passes; a fossil is permanent."""
        if not rules.may_fossilize(self.state.stage):
            raise LifecycleError(self.state.stage, Stage.FOSSILIZED, self.slot_id)
        result = evaluate_gate(Stage.FOSSILIZED, self.gate_inputs(), self.settings.gates)
        if result.passed:
            self._enter(Stage.FOSSILIZED, accuracy)
        return result

    def prune(self) -> None:
        """Remove a live seed; the slot cools down (PRUNED -> EMBARGOED -> RESETTING -> DORMANT)."""
        if self.state.stage not in PRUNABLE_STAGES:
            raise LifecycleError(self.state.stage, Stage.PRUNED, self.slot_id)
        self._enter(Stage.PRUNED)
        self.seed = None
        self.gate = None
        self.param_version += 1
        self.state.cooldown_left = rules.PRUNED_EPOCHS

    def end_epoch(self) -> None:
        """Advance per-epoch counters, the alpha ramp and the cooldown: once per epoch."""
        s = self.state
        if s.stage in SEED_STAGES:
            s.epochs_in_stage += 1
            s.epochs_total += 1
            if s.stage == Stage.BLENDING:
                s.alpha_schedule.tick()
                self._sync_alpha()
            return
        if s.stage == Stage.DORMANT:
            return
        s.epochs_in_stage += 1
        s.cooldown_left -= 1
        # Zero-length cooldown stages are passed through in the same tick, in order.
        while s.cooldown_left <= 0 and s.stage != Stage.DORMANT:
            after, epochs = rules.cooldown_next(s.stage, self.settings)
            self._enter(after)
            s.cooldown_left = epochs
            if after == Stage.DORMANT:
                self.state = SlotState(history=list(s.history))
                s = self.state

    # ------------------------------------------------------------ measurements

    def record_gradients(
        self,
        health: float | None,
        exploding: bool,
        grad_ratio: float | None,
        grad_norm: float | None,
    ) -> None:
        s = self.state
        s.gradient_health, s.exploding, s.grad_ratio, s.seed_grad_norm = (
            health,
            exploding,
            grad_ratio,
            grad_norm,
        )

    def record_contribution(self, contribution: float | None, loss_finite: bool = True) -> None:
        s = self.state
        if contribution is not None:
            s.contribution_prev = s.contribution
            s.contribution = contribution
        s.contribution_fresh = contribution is not None
        s.loss_finite = loss_finite

    def report(self) -> SlotReport:
        return self.state.report(self.slot_id, self.seed_param_count())

    # ------------------------------------------------------------ alpha overrides

    @contextlib.contextmanager
    def alpha_override(self, alpha: torch.Tensor | float) -> Iterator[None]:
        """Use ``alpha`` instead of the schedule: a float, or a ``[B]`` tensor of per-sample values."""
        previous = self._alpha_override
        self._alpha_override = alpha
        try:
            yield
        finally:
            self._alpha_override = previous

    def _alpha_for(self, h: torch.Tensor) -> torch.Tensor | float:
        override = self._alpha_override
        if override is None:
            return self._alpha
        if isinstance(override, torch.Tensor) and override.dim() == 1:
            if override.shape[0] != h.shape[0]:
                raise ValueError(
                    f"slot {self.slot_id}: per-sample alpha has {override.shape[0]} values "
                    f"for a batch of {h.shape[0]}"
                )
            return override.view(-1, *([1] * (h.dim() - 1)))
        return override

    # ------------------------------------------------------------ forward

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        seed = self.seed
        stage = self.state.stage
        if seed is None:
            return h
        if stage == Stage.TRAINING:
            if not torch.is_grad_enabled():
                return h  # the output equals h; the seed only needs to run to learn
            s = seed(h.detach())
            return h + (s - s.detach())
        if stage not in BLENDED_STAGES:
            return h
        x = h.detach() if stage in ISOLATED_STAGES else h
        s = seed(x)
        alpha = self._alpha_for(h)
        alpha_t = (
            alpha if isinstance(alpha, torch.Tensor) else torch.full((), alpha, device=h.device)
        )
        operator = STYLES[self.state.style or "linear_add"].operator
        if operator == "add":
            return blend_add(h, s, alpha_t, x)
        if operator == "multiply":
            return blend_multiply(h, s, alpha_t, x)
        assert self.gate is not None
        return blend_gated(h, s, alpha_t, self.gate(x))

    # ------------------------------------------------------------ checkpointing

    def get_extra_state(self) -> dict[str, Any]:
        return {"state": converter.unstructure(self.state), "param_version": self.param_version}

    def set_extra_state(self, extra: dict[str, Any]) -> None:
        # Runs before the children are loaded (nn.Module.load_state_dict loads a module,
        # then recurses), so rebuilding the seed here lets its weights load right after.
        state = converter.structure(extra["state"], SlotState)
        has_module = state.stage in SEED_STAGES
        if has_module and state.blueprint and state.style:
            self._build_modules(self._resolve_blueprint(state.blueprint), state.style)
        else:
            self.seed, self.gate = None, None
        self.state = state
        self.param_version = int(extra.get("param_version", 0)) + 1
        self._sync_alpha()


@contextlib.contextmanager
def force_alpha(slot: SeedSlot, value: float) -> Iterator[None]:
    """Run the model with ``slot``'s alpha forced to ``value`` (e.g. 0 to switch a seed off)."""
    with slot.alpha_override(value):
        yield
