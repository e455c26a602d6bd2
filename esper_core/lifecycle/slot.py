"""SeedSlot: one injection point of the host, holding at most one seed (DOMAIN §2).

Forward by stage: no seed or cooldown, the host activation ``h`` untouched; TRAINING,
``straight_through(h, s)`` with the seed fed ``h.detach()`` (output and host gradients
bit-identical to the host alone, whatever the seed outputs); BLENDING, ``blend(h, s,
alpha)``, exactly ``h`` where alpha is 0, the seed input detached while alpha < 1, the
host's upstream gradient whole (``blend_host_gradient=full``) or scaled by ``1 - alpha``;
HOLDING and FOSSILIZED, alpha 1 and no isolation (non-finite seed outputs:
:mod:`~esper_core.lifecycle.isolation`). A branch seed (``Blueprint.branch``) runs in two
steps, :meth:`SeedSlot.branch_input` and :meth:`SeedSlot.merge`, with the same logic
(:mod:`~esper_core.lifecycle.slot_forward`, which keeps a seed at its widths).
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
from esper_core.env.device import module_to
from esper_core.lifecycle import rules, slot_forward, slot_state
from esper_core.lifecycle.alpha import STYLES, AlphaSchedule, BlendGate
from esper_core.lifecycle.blueprint_resolver import BlueprintResolver
from esper_core.lifecycle.gates import GateInputs, GateResult, evaluate_gate
from esper_core.lifecycle.rules import (
    ADVANCE_TARGET,
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
    _nonfinite: torch.Tensor

    def __init__(
        self,
        spec: InjectionSpec,
        resolve_blueprint: Callable[[str], Blueprint],
        settings: SlotSettings = DEFAULT_SETTINGS,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.seed_spec = spec  # the seed's own widths: a fossil keeps them as the host widens
        self.settings = settings
        self._resolve_blueprint = BlueprintResolver(resolve_blueprint)
        self.state = SlotState()
        self.seed: nn.Module | None = None
        self.gate: BlendGate | None = None
        self._branch = False  # the seed is a branch of the following segment
        # Bumped whenever the set of seed parameters changes, so optimizers follow it.
        self.param_version = 0
        # Moves with .to() so an empty slot still knows its device and dtype.
        self.register_buffer("_anchor", torch.zeros(0), persistent=False)
        self.register_buffer("_alpha", torch.zeros(()), persistent=False)
        self.register_buffer("_nonfinite", torch.zeros(()), persistent=False)
        self.forced_alpha: torch.Tensor | float | None = None

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
    def nonfinite_outputs(self) -> torch.Tensor:
        """Forwards with a non-finite seed output since :meth:`clear_nonfinite` (on the device)."""
        return self._nonfinite

    def clear_nonfinite(self) -> None:
        self._nonfinite.zero_()

    @property
    def has_seed(self) -> bool:
        return self.seed is not None

    def seed_parameters(self) -> list[nn.Parameter]:
        """The seed's parameters, gate included: what the seed's optimizer must hold."""
        return [p for m in (self.seed, self.gate) if m is not None for p in m.parameters()]

    def seed_param_count(self) -> int:
        return sum(p.numel() for p in self.seed_parameters())

    # ------------------------------------------------------------ transitions

    def _enter(self, stage: Stage, accuracy: float | None = None) -> None:
        check_transition(self.state.stage, stage, self.slot_id)
        self.state.stage = stage
        self.state.epochs_in_stage = 0
        if accuracy is not None:
            self.state.acc_at_stage_start = accuracy
        if stage == Stage.BLENDING and self.state.acc_before_blend is None:
            self.state.acc_before_blend = self.state.acc_at_stage_start
        self.state.history.append((stage.value, self.state.epochs_total))
        del self.state.history[: -self.settings.stage_history]
        self._sync_alpha()

    def _sync_alpha(self) -> None:
        self._alpha.fill_(self.state.alpha)

    def _build_modules(
        self,
        blueprint: Blueprint,
        style: str,
        init_seed: int | None = None,
        source: nn.Module | None = None,
        spec: InjectionSpec | None = None,
    ) -> None:
        """Build the seed (and gate) of ``blueprint`` for ``spec`` (None: the slot's), seeded
        by ``init_seed``, as a copy of ``source`` (a stacking birth), each when given."""
        spec = spec if spec is not None else self.spec
        problem = blueprint.fits(spec)
        if problem is not None:
            raise ValueError(f"slot {self.slot_id}: {problem}")
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; expected one of {', '.join(STYLES)}")
        seeded = torch.random.fork_rng(devices=[]) if init_seed is not None else None
        with seeded or contextlib.nullcontext():
            if init_seed is not None:
                torch.manual_seed(init_seed)
            seed = blueprint.build_for(spec)
            if source is not None:
                if blueprint.inherit is None:
                    raise ValueError(f"blueprint {blueprint.key} cannot inherit a host block")
                with torch.no_grad():
                    blueprint.inherit(seed, source)
            gated = STYLES[style].operator == "gate"
            # The gate reads what the seed's output is a residual over (slot_forward): the
            # following segment's output for a branch seed.
            width = spec.next_channels if blueprint.branch else spec.channels
            gate = BlendGate(width or spec.channels, spec.topology) if gated else None
        self._branch, self.seed_spec = blueprint.branch, spec
        self.seed = module_to(seed, self._anchor.device, self._anchor.dtype)
        self.gate = module_to(gate, self._anchor.device, self._anchor.dtype) if gate else None
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
        source: nn.Module | None = None,
    ) -> None:
        """DORMANT -> GERMINATED: build the seed (and its gate) from a blueprint, as a copy
        of the host block ``source`` for a stacking birth; a seed that needs no isolation
        goes on to BLENDING at once, ramping to alpha 1."""
        if not rules.may_germinate_in(self.state.stage):
            raise LifecycleError(self.state.stage, Stage.GERMINATED, self.slot_id)
        self._build_modules(blueprint, style, init_seed, source)
        # A copied block computes something: it is isolated like any non-identity seed.
        identity = blueprint.identity_at_birth and source is None
        isolation = self.settings.isolation_epochs(identity)
        self.state = SlotState(
            seed_id=seed_id,
            blueprint=blueprint.key,
            style=style,
            tempo=tempo,
            germinated_epoch=epoch,
            isolation_epochs=isolation,
            acc_at_germination=accuracy,
            acc_at_stage_start=accuracy,
            history=list(self.state.history),
        )
        self._enter(Stage.GERMINATED)
        if rules.blends_at_germination(self.settings.isolation_mode(identity)):
            self._start_blending(1.0)
            self._enter(Stage.BLENDING, accuracy)

    def install_at_birth(
        self,
        seed_id: str,
        blueprint: Blueprint,
        *,
        epochs_done: int,
        style: str = "linear_add",
        init_seed: int | None = None,
    ) -> None:
        """DORMANT -> FOSSILIZED before the first epoch: the seed is part of the model
        from the start, as if it had been fossilized at birth (see ``rules``)."""
        if not rules.may_install_at_birth(self.state.stage, epochs_done):
            why = "seeds are installed at birth only into an empty slot of an untrained host"
            raise LifecycleError(self.state.stage, Stage.FOSSILIZED, self.slot_id, why)
        self._build_modules(blueprint, style, init_seed)
        self.state = SlotState(
            seed_id=seed_id,
            blueprint=blueprint.key,
            style=style,
            germinated_epoch=0,
            isolation_epochs=0,
            history=list(self.state.history),
        )
        # The one entry into FOSSILIZED without a gate (rules.may_install_at_birth).
        self.state.stage = Stage.FOSSILIZED
        self.state.history.append((Stage.FOSSILIZED.value, 0))
        self._sync_alpha()

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
            # Only HOLDING has a next stage (FOSSILIZED, through fossilize()) to name.
            target = rules.next_gated_target(stage)
            raise LifecycleError(
                stage, target, self.slot_id, rules.why_no_advance(stage), "advance()"
            )
        target = ADVANCE_TARGET[stage]
        result = evaluate_gate(target, self.gate_inputs(), self.settings.gates)
        if result.passed:
            if target == Stage.BLENDING:
                self._start_blending(alpha_target)
            self._enter(target, accuracy)
        return result

    def _start_blending(self, alpha_target: float) -> None:
        self.state.alpha_schedule = AlphaSchedule(
            curve=STYLES[self.state.style or "linear_add"].curve,
            start=0.0,
            target=alpha_target,
            ticks=self.state.tempo,
            steepness=self.settings.sigmoid_steepness,
        )
        # The first blending epoch runs at curve(1/tempo): alpha 0 would waste an epoch.
        self.state.alpha_schedule.tick()

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

    def report(self) -> SlotReport:
        return self.state.report(self.slot_id, self.seed_param_count())

    # ------------------------------------------------------------ alpha overrides

    @contextlib.contextmanager
    def alpha_override(self, alpha: torch.Tensor | float) -> Iterator[None]:
        """Use ``alpha`` instead of the schedule: a float, or a ``[B]`` tensor of per-sample values."""
        previous = self.forced_alpha
        self.forced_alpha = alpha
        try:
            yield
        finally:
            self.forced_alpha = previous

    # ------------------------------------------------------------ forward

    @property
    def is_branch(self) -> bool:
        """Whether the slot holds a branch seed (see :meth:`branch_input`)."""
        return self.seed is not None and self._branch

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """A series seed's slot: the output for the host activation ``h``."""
        if self.seed is None:
            return h
        if self._branch:
            raise RuntimeError(f"slot {self.slot_id} holds a branch seed: use merge()")
        return slot_forward.run_series(self, self.seed, h)

    def branch_input(self, x: torch.Tensor) -> torch.Tensor:
        """A branch seed's first step: keep the slot's activation ``x``, the input of the
        following segment, for :meth:`merge` (the host carries ``x`` on untouched)."""
        return x

    def merge(self, pending: torch.Tensor, h_next: torch.Tensor) -> torch.Tensor:
        """A branch seed's second step: the following segment's output ``h_next`` with the
        seed's increment on ``pending`` blended in by the series stage semantics, taking
        ``s = h_next + seed(pending)``."""
        if self.seed is None:
            return h_next
        return slot_forward.run_branch(self, self.seed, pending, h_next)

    # ------------------------------------------------------------ checkpointing

    def get_extra_state(self) -> dict[str, Any]:
        return slot_state.extra_state(self.state, self.param_version, self.seed_spec)

    def set_extra_state(self, extra: dict[str, Any]) -> None:
        # Runs before the children are loaded (nn.Module.load_state_dict loads a module,
        # then recurses), so rebuilding the seed here lets its weights load right after.
        state = converter.structure(extra["state"], SlotState)
        if state.stage in SEED_STAGES and state.blueprint and state.style:
            born = slot_state.born_spec(self.spec, extra)
            self._build_modules(self._resolve_blueprint(state.blueprint), state.style, spec=born)
        else:
            self.seed, self.gate = None, None
        self.state = state
        self.param_version = int(extra.get("param_version", 0)) + 1
        self._sync_alpha()
