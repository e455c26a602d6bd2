"""``policies.heuristic``: the rule-based Tamiyo (DOMAIN §7).

Once per epoch and env it takes the first rule that yields a legal action:

1. HOLDING: fossilize a seed whose measured counterfactual contribution exceeds
   ``fossilize_min_contribution`` points (when its gate G5 passes), prune it when the
   contribution is at or below that; prune a contributing seed whose G5 still fails
   after ``max_holding_epochs``.
2. Regression: prune a TRAINING or BLENDING seed when validation accuracy has fallen
   more than ``regression_points`` below its value at the start of the stage, once the
   seed has spent ``regression_epochs`` in the stage.
3. Stall: prune a seed that has spent ``stall_epochs`` in TRAINING or BLENDING without
   its gate passing (it would otherwise block germination for the rest of the run).
4. Advance a seed whose next gate (``Observation.gates``) passes.
5. Germinate when accuracy has plateaued for ``plateau_epochs``, at least
   ``min_epoch`` epochs are done, the last prune is ``prune_cooldown`` epochs ago and
   ``min_epochs_left`` epochs remain; the blueprint is the next one of
   ``blueprint_order`` (rotating), skipping any whose seed was pruned in the last
   ``blueprint_penalty_epochs`` epochs.
6. Otherwise WAIT.

Every candidate is checked against ``Observation.masks`` with
``esper_core.lifecycle.actions.refusal_reason``; an illegal one is skipped, never sent.
Memory (rotation position, blueprint penalties, the live seeds last seen) is kept per
env, keyed by ``Observation.env_index``, and is part of the state dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define, field, frozen

from esper_core import hookimpl
from esper_core.converter import each, in_range, non_empty, options_field, structure, unstructure
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.rules import ADVANCE_TARGET, LIVE_STAGES, SEED_STAGES, WATCHED_STAGES
from esper_core.lifecycle.stages import Stage

if TYPE_CHECKING:
    from esper_core import PolicyContext
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action, ActionSpace

STATE_VERSION = 1

# CNN: measured on digits with the impaired host (benchmarks/heuristic_vs_wait.py): seeds
# that add 3x3 spatial mixing help, 1x1 and channel-only ones do not. Transformer: on
# charlm (impaired, one seed) no blueprint beat wait in 30 epochs; lora cost the least.
# Keys name the topology, so each host rotates through its own blueprints only.
DEFAULT_BLUEPRINT_ORDER = [
    "cnn/conv_heavy",
    "cnn/conv_light",
    "cnn/depthwise",
    "cnn/bottleneck",
    "cnn/attention",
    "cnn/norm",
    "cnn/conv_small",
    "transformer/lora",
    "transformer/mlp_small",
    "transformer/attention",
    "transformer/mlp",
    "transformer/lora_large",
    "transformer/norm",
]


def _non_blank(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"expected a blueprint name such as conv_small or cnn/conv_small, got {value!r}"


@define
class HeuristicOptions:
    # DOMAIN §7 says 3; 1 is measured: on 30-epoch digits runs a 3-epoch plateau comes
    # too late for a seed to finish its ~16-epoch lifecycle (see the README).
    plateau_epochs: int = options_field(
        1,
        in_range(0, integer=True),
        "Germinate only when validation accuracy has not improved (by more than "
        "env.plateau_delta) for this many epochs (Observation.plateau_epochs).",
    )
    min_epoch: int = options_field(
        5, in_range(0, integer=True), "Never germinate before this many epochs are done."
    )
    prune_cooldown: int = options_field(
        5,
        in_range(0, integer=True),
        "Germinate only when the last prune (by this policy or a governor rollback) is at "
        "least this many epochs ago (Observation.epochs_since_prune).",
    )
    min_epochs_left: int = options_field(
        0,
        in_range(0, integer=True),
        "Do not germinate when fewer epochs than this remain in the episode (0: no limit).",
    )
    blueprint_order: list[str] = options_field(
        DEFAULT_BLUEPRINT_ORDER,
        each(_non_blank),
        "Blueprints to germinate, in rotation: names (conv_small) or keys (cnn/conv_small). "
        "Names the host's topology lacks are skipped; if none is available, every available "
        "blueprint is used in the action space's order.",
    )
    blueprint_penalty_epochs: int = options_field(
        10,
        in_range(0, integer=True),
        "After a seed of a blueprint is pruned, skip that blueprint for this many epochs.",
    )
    style: str = options_field(
        "linear_add",
        _non_blank,
        "Germination style: alpha curve + blend operator (one of lifecycle.styles).",
    )
    tempo: int = options_field(
        5, in_range(1, integer=True), "Alpha ramp length in epochs (one of lifecycle.tempos)."
    )
    regression_points: float = options_field(
        2.0,
        in_range(0),
        "Prune a TRAINING/BLENDING seed when validation accuracy is more than this many points "
        "below its value at the start of the seed's stage...",
    )
    regression_epochs: int = options_field(
        5, in_range(0, integer=True), "...once the seed has spent this many epochs in the stage."
    )
    stall_epochs: int = options_field(
        20,
        in_range(1, integer=True),
        "Prune a seed whose gate has not passed after this many epochs in TRAINING or BLENDING.",
    )
    fossilize_min_contribution: float = options_field(
        0.5,
        doc="In HOLDING, fossilize when the measured counterfactual contribution exceeds this "
        "(accuracy points), otherwise prune.",
    )
    min_holding_epochs: int = options_field(
        1,
        in_range(1, integer=True),
        "Epochs in HOLDING before deciding; the first one measures the contribution at alpha 1.",
    )
    max_holding_epochs: int = options_field(
        3,
        in_range(1, integer=True),
        "Prune a contributing seed whose fossilize gate (G5) still fails after this many epochs in HOLDING.",
    )

    def __esper_validate__(self) -> list[str]:
        problems = []
        if self.max_holding_epochs < self.min_holding_epochs:
            problems.append(
                f"max_holding_epochs ({self.max_holding_epochs}) must be at least "
                f"min_holding_epochs ({self.min_holding_epochs})"
            )
        if non_empty(self.blueprint_order) is not None:
            problems.append('blueprint_order: name at least one blueprint (e.g. ["conv_small"])')
        return problems


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


class HeuristicPolicy:
    """Rule-based Tamiyo; see the module docstring for the rules in priority order."""

    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = (
        "Rules: germinate on plateau, rotate blueprints, advance on passed gates, "
        "prune regressions, fossilize contributing seeds"
    )
    Options: ClassVar[type] = HeuristicOptions

    def __init__(self, options: HeuristicOptions, context: PolicyContext) -> None:
        self.options = options
        self.context = context
        space = context.space
        problems = []
        if options.style not in space.styles:
            problems.append(
                f"policies.heuristic.style: {options.style!r} is not one of this run's "
                f"lifecycle.styles ({', '.join(space.styles)})"
            )
        if options.tempo not in space.tempos:
            problems.append(
                f"policies.heuristic.tempo: {options.tempo} is not one of this run's "
                f"lifecycle.tempos ({', '.join(str(t) for t in space.tempos)})"
            )
        if problems:
            raise ConfigError(problems)
        self.style_index = space.styles.index(options.style)
        self.tempo_index = space.tempos.index(options.tempo)
        self.blueprint_order = resolve_blueprint_order(options.blueprint_order, space.blueprints)
        self.memory: dict[int, EnvMemory] = {}

    @property
    def space(self) -> ActionSpace:
        return self.context.space

    # ------------------------------------------------------------ protocol

    def reset(self, env_indices: Sequence[int]) -> None:
        for index in env_indices:
            self.memory.pop(int(index), None)

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        return [self.decide(obs).action for obs in observations]

    def observe(self, results: Sequence[StepResult]) -> None:
        """Nothing to learn: prunes (the policy's own and the governor's) are read from
        the next observation, where they are certain."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "memory": {index: unstructure(memory) for index, memory in self.memory.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            if state["version"] != STATE_VERSION:
                raise ValueError(f"state version {state['version']!r}, expected {STATE_VERSION}")
            memory = {
                int(index): structure(data, EnvMemory) for index, data in state["memory"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError, ConfigError) as exc:
            raise CheckpointError(
                f"the heuristic policy's saved state is not one it wrote ({type(exc).__name__}: {exc}); "
                "resume the run with the policy that wrote the checkpoint"
            ) from None
        self.memory = memory

    # ------------------------------------------------------------ decisions

    def decide(self, obs: Observation) -> Decision:
        """Choose the action for one env and update that env's memory."""
        memory = self.memory.setdefault(obs.env_index, EnvMemory())
        self._note_removed_seeds(memory, obs)
        decision = self._choose(memory, obs)
        if decision.rule == "germinate":
            key = self.space.blueprints[decision.action.blueprint]
            memory.rotation = (self.blueprint_order.index(key) + 1) % len(self.blueprint_order)
        return decision

    def _note_removed_seeds(self, memory: EnvMemory, obs: Observation) -> None:
        """Penalise the blueprint of every seed that was live at the last decision and is
        gone now (pruned by this policy or by a governor rollback); remember live seeds."""
        by_slot = {r.slot_id: r for r in obs.slots}
        for slot_id, seen in memory.seen.items():
            report = by_slot.get(slot_id)
            kept = (
                report is not None
                and report.seed_id == seen.seed_id
                and report.stage in SEED_STAGES
            )
            if not kept:
                memory.penalties[seen.blueprint] = obs.epoch + self.options.blueprint_penalty_epochs
        memory.penalties = {k: until for k, until in memory.penalties.items() if until > obs.epoch}
        memory.seen = {
            r.slot_id: SeenSeed(r.seed_id, r.blueprint)
            for r in obs.slots
            if r.stage in LIVE_STAGES and r.seed_id is not None and r.blueprint is not None
        }

    def _choose(self, memory: EnvMemory, obs: Observation) -> Decision:
        for candidate in self._candidates(memory, obs):
            if self._legal(candidate.action, obs):
                return candidate
        from esper_core.lifecycle.actions import WAIT

        return Decision(WAIT, "wait", "no rule applies")

    def _legal(self, action: Action, obs: Observation) -> bool:
        from esper_tamiyo_heuristic.legal import is_legal

        return is_legal(action, obs.masks, self.space)

    def _candidates(self, memory: EnvMemory, obs: Observation) -> list[Decision]:
        """Every action a rule suggests now, in priority order (legality checked later)."""
        from esper_core.lifecycle.actions import Action, LifecycleOp

        o = self.options
        out: list[Decision] = []
        for i, r in enumerate(obs.slots):
            if r.stage != Stage.HOLDING or r.epochs_in_stage < o.min_holding_epochs:
                continue
            gate = obs.gates[i] if i < len(obs.gates) else None
            if r.contribution is None:
                continue  # nothing measured yet: wait for the counterfactual
            if r.contribution <= o.fossilize_min_contribution:
                out.append(
                    Decision(
                        Action(LifecycleOp.PRUNE, slot=i),
                        "prune_holding",
                        f"{r.slot_id}: contribution {r.contribution:.2f} <= "
                        f"{o.fossilize_min_contribution:.2f} points",
                    )
                )
            elif gate is not None and gate.passed:
                out.append(
                    Decision(
                        Action(LifecycleOp.FOSSILIZE, slot=i),
                        "fossilize",
                        f"{r.slot_id}: contribution {r.contribution:.2f} points",
                    )
                )
            elif r.epochs_in_stage >= o.max_holding_epochs:
                why = gate.reason if gate is not None else "no gate"
                out.append(
                    Decision(
                        Action(LifecycleOp.PRUNE, slot=i),
                        "prune_gate",
                        f"{r.slot_id}: {why} after {r.epochs_in_stage} epochs in HOLDING",
                    )
                )
        for i, r in enumerate(obs.slots):
            if r.stage not in WATCHED_STAGES:
                continue
            drop = obs.val_acc - r.acc_at_stage_start
            if r.epochs_in_stage >= o.regression_epochs and drop < -o.regression_points:
                out.append(
                    Decision(
                        Action(LifecycleOp.PRUNE, slot=i),
                        "prune_regression",
                        f"{r.slot_id}: accuracy {drop:+.2f} points since {r.stage.value} began",
                    )
                )
            elif r.epochs_in_stage >= o.stall_epochs:
                out.append(
                    Decision(
                        Action(LifecycleOp.PRUNE, slot=i),
                        "prune_stall",
                        f"{r.slot_id}: {r.epochs_in_stage} epochs in {r.stage.value}",
                    )
                )
        for i, r in enumerate(obs.slots):
            gate = obs.gates[i] if i < len(obs.gates) else None
            if r.stage in ADVANCE_TARGET and gate is not None and gate.passed:
                out.append(
                    Decision(
                        Action(LifecycleOp.ADVANCE, slot=i),
                        "advance",
                        f"{r.slot_id}: {gate.reason}",
                    )
                )
        germinate = self._germination(memory, obs)
        if germinate is not None:
            out.append(germinate)
        return out

    def _germination(self, memory: EnvMemory, obs: Observation) -> Decision | None:
        from esper_core.lifecycle.actions import Action, LifecycleOp

        o = self.options
        if obs.epoch < o.min_epoch or obs.plateau_epochs < o.plateau_epochs:
            return None
        if obs.epochs_since_prune < o.prune_cooldown:
            return None
        if o.min_epochs_left and obs.max_epochs - obs.epoch < o.min_epochs_left:
            return None
        legal_slots = obs.masks.slot[LifecycleOp.GERMINATE].tolist()
        if not bool(obs.masks.op[LifecycleOp.GERMINATE]) or not any(legal_slots):
            return None
        key = self.next_blueprint(memory, obs.epoch)
        if key is None:
            return None
        slot = legal_slots.index(True)
        action = Action(
            LifecycleOp.GERMINATE,
            slot=slot,
            blueprint=self.space.blueprints.index(key),
            style=self.style_index,
            tempo=self.tempo_index,
        )
        return Decision(
            action,
            "germinate",
            f"{self.space.slot_ids[slot]}: {key} after {obs.plateau_epochs} plateau epochs",
        )

    def next_blueprint(self, memory: EnvMemory, epoch: int) -> str | None:
        """The next blueprint of the rotation that is not penalised at ``epoch``."""
        order = self.blueprint_order
        for step in range(len(order)):
            key = order[(memory.rotation + step) % len(order)]
            if memory.penalties.get(key, 0) <= epoch:
                return key
        return None


@hookimpl
def esper_register_policies(register: Any) -> None:
    register(HeuristicPolicy)
