"""Every lifecycle rule in one place: the named stage sets, what each stage means for
alpha and gradients, the cooldown table and the legality predicates.

Masks, slots, the epoch trainer, the governor, the heuristic and the reward families
all ask this module; none of them re-derives a stage set. Changing a rule here changes
it everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from esper_core.lifecycle.stages import Stage

# ---------------------------------------------------------------- transitions

TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.DORMANT: frozenset({Stage.GERMINATED}),
    # GERMINATED -> BLENDING: a seed that needs no isolation blends from germination.
    Stage.GERMINATED: frozenset({Stage.TRAINING, Stage.BLENDING, Stage.PRUNED}),
    Stage.TRAINING: frozenset({Stage.BLENDING, Stage.PRUNED}),
    Stage.BLENDING: frozenset({Stage.HOLDING, Stage.PRUNED}),
    Stage.HOLDING: frozenset({Stage.FOSSILIZED, Stage.BLENDING, Stage.PRUNED}),
    Stage.FOSSILIZED: frozenset(),
    Stage.PRUNED: frozenset({Stage.EMBARGOED}),
    Stage.EMBARGOED: frozenset({Stage.RESETTING}),
    Stage.RESETTING: frozenset({Stage.DORMANT}),
}


class LifecycleError(RuntimeError):
    """An illegal stage transition, or a call that has no transition from this stage.

    The message names the source stage, the target stage when there is one (else the
    refused ``call``) and the stages that are legal from the source.
    """

    def __init__(
        self,
        src: Stage,
        dst: Stage | None,
        slot: str | None = None,
        detail: str | None = None,
        call: str | None = None,
    ):
        self.src, self.dst, self.slot, self.detail, self.call = src, dst, slot, detail, call
        where = f"slot {slot}: " if slot else ""
        legal = ", ".join(s.value for s in sorted(TRANSITIONS[src])) or "none (terminal)"
        # ``detail`` explains a refused call whose transition the table allows
        # (e.g. advance() from HOLDING: FOSSILIZED is reached through fossilize()).
        why = f" ({detail})" if detail else ""
        what = (
            f"illegal lifecycle transition {src.value} -> {dst.value}"
            if dst is not None
            else f"{call or 'this call'} is illegal from {src.value}"
        )
        super().__init__(f"{where}{what}{why}; legal from {src.value}: {legal}")


def check_transition(src: Stage, dst: Stage, slot: str | None = None) -> None:
    if dst not in TRANSITIONS[src]:
        raise LifecycleError(src, dst, slot)


# ---------------------------------------------------------------- stage sets

# A seed that is still being decided on: it can be advanced or pruned.
LIVE_STAGES: frozenset[Stage] = frozenset(
    {Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING}
)
# The slot holds a seed module (live or kept for good).
SEED_STAGES: frozenset[Stage] = LIVE_STAGES | {Stage.FOSSILIZED}
# A seed that has not touched the output yet; only one may exist at a time.
INCUBATING_STAGES: frozenset[Stage] = frozenset({Stage.GERMINATED, Stage.TRAINING})
# The seed is part of the forward pass with a non-zero alpha.
BLENDED_STAGES: frozenset[Stage] = frozenset({Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED})
# The seed runs at alpha 1.
FULL_ALPHA_STAGES: frozenset[Stage] = frozenset({Stage.HOLDING, Stage.FOSSILIZED})
# The seed's input is detached from the host (isolation on) while its alpha is below 1
# (see :func:`is_isolated`).
ISOLATED_STAGES: frozenset[Stage] = frozenset({Stage.TRAINING, Stage.BLENDING})
# The seed's parameters receive gradient (and so need an optimizer step).
GRADIENT_STAGES: frozenset[Stage] = frozenset(
    {Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED}
)
# The slot is cooling down after a prune.
COOLDOWN_STAGES: frozenset[Stage] = frozenset({Stage.PRUNED, Stage.EMBARGOED, Stage.RESETTING})
# Stages a seed can be pruned from (a fossil is permanent).
PRUNABLE_STAGES: frozenset[Stage] = LIVE_STAGES
# Stages whose seed a controller may still evaluate for pruning on a regression.
WATCHED_STAGES: frozenset[Stage] = frozenset({Stage.TRAINING, Stage.BLENDING})
# A seed kept for good: counted as fossil parameters and restored by a governor rollback.
FOSSIL_STAGES: frozenset[Stage] = frozenset({Stage.FOSSILIZED})

# The stage an ADVANCE action moves a seed to, and so the gate that guards it.
ADVANCE_TARGET: dict[Stage, Stage] = {
    Stage.GERMINATED: Stage.TRAINING,
    Stage.TRAINING: Stage.BLENDING,
    Stage.BLENDING: Stage.HOLDING,
}
# The stage the next gated step leads to: an ADVANCE, or G5 from HOLDING (a FOSSILIZE).
GATED_TARGET: dict[Stage, Stage] = {**ADVANCE_TARGET, Stage.HOLDING: Stage.FOSSILIZED}


def holds_seed(stage: Stage) -> bool:
    return stage in SEED_STAGES


def is_isolated(stage: Stage, alpha: float) -> bool:
    """Whether the seed's input is detached from the host.

    A BLENDING seed at alpha 1 is not: ``lerp(h, s, 1)`` drops the host path, so with a
    detached input the upstream host layers would get no gradient at all for as long
    as the seed stays there. No epoch may starve the host.
    """
    if stage == Stage.TRAINING:
        return True
    return stage == Stage.BLENDING and alpha < 1.0


def alpha_of(stage: Stage, blending_alpha: float) -> float:
    """The alpha a seed in ``stage`` runs at (``blending_alpha``: the ramp's value)."""
    if stage in FULL_ALPHA_STAGES:
        return 1.0
    if stage == Stage.BLENDING:
        return blending_alpha
    return 0.0


# ---------------------------------------------------------------- isolation

# How long a new seed trains in isolation (TRAINING) before it may blend: the whole
# ``min_training_epochs``, a short stretch that scales with the episode, or not at all.
ISOLATION_MODES = ("full", "short", "none")


def short_isolation_epochs(fraction: float, max_epochs: int) -> int:
    """Epochs of short isolation: ``fraction`` of the episode, at least one."""
    return max(1, round(fraction * max_epochs))


def isolation_epochs(mode: str, full_epochs: int, short_epochs: int) -> int:
    """Epochs of isolated TRAINING that isolation ``mode`` asks of a new seed (0: none)."""
    if mode == "full":
        return full_epochs
    if mode == "short":
        return short_epochs
    if mode == "none":
        return 0
    raise ValueError(
        f"unknown isolation mode {mode!r}; expected one of {', '.join(ISOLATION_MODES)}"
    )


def blends_at_germination(mode: str) -> bool:
    """A seed that needs no isolation goes GERMINATED -> BLENDING in the germination itself."""
    return mode == "none"


def epochs_before_blending(mode: str, isolation: int) -> int:
    """Epochs a new seed trains before it touches the output, every gate passing at its
    first chance (one decision per epoch): none without isolation; else one epoch
    GERMINATED and ``isolation`` epochs TRAINING."""
    return 0 if blends_at_germination(mode) else 1 + isolation


def epochs_to_full_alpha(before_blending: int, tempo: int) -> int:
    """Epochs from a germination until the seed first trains at alpha 1: the blend starts
    at ``1/tempo`` and reaches 1 ``tempo - 1`` ticks later."""
    return before_blending + tempo


# ---------------------------------------------------------------- install at birth

# Seeds installed before the first epoch go DORMANT -> FOSSILIZED at once: the final
# architecture of a grown run, trained from scratch (the ``static`` baseline). This is
# the only way into FOSSILIZED that skips the gates, and only an untrained host may take it.


def may_install_at_birth(stage: Stage, epochs_done: int) -> bool:
    return stage == Stage.DORMANT and epochs_done == 0


# ---------------------------------------------------------------- cooldown


class CooldownLengths(Protocol):
    @property
    def embargo_epochs(self) -> int: ...

    @property
    def resetting_epochs(self) -> int: ...


# PRUNED lasts one epoch; then the embargo, then the reset, then the slot is empty.
PRUNED_EPOCHS = 1


def cooldown_next(stage: Stage, lengths: CooldownLengths) -> tuple[Stage, int]:
    """The stage after cooldown stage ``stage`` and how many epochs it lasts."""
    if stage == Stage.PRUNED:
        return Stage.EMBARGOED, lengths.embargo_epochs
    if stage == Stage.EMBARGOED:
        return Stage.RESETTING, lengths.resetting_epochs
    if stage == Stage.RESETTING:
        return Stage.DORMANT, 0
    raise ValueError(f"{stage.value} is not a cooldown stage")


def cooldown_epochs(lengths: CooldownLengths) -> int:
    """Epochs from a prune until the slot is DORMANT again."""
    return PRUNED_EPOCHS + lengths.embargo_epochs + lengths.resetting_epochs


# ---------------------------------------------------------------- legality


class StagedSeed(Protocol):
    @property
    def stage(self) -> Stage: ...

    @property
    def epochs_total(self) -> int: ...


def seeds_in_model(stages: Iterable[Stage]) -> int:
    return sum(1 for stage in stages if stage in SEED_STAGES)


def may_germinate(stages: Iterable[Stage], max_seeds: int) -> bool:
    """Below the seed cap, and no other seed still incubating (GERMINATED/TRAINING)."""
    stages = list(stages)
    incubating = any(stage in INCUBATING_STAGES for stage in stages)
    return seeds_in_model(stages) < max_seeds and not incubating


def may_germinate_in(stage: Stage) -> bool:
    return stage == Stage.DORMANT


def may_advance(stage: Stage) -> bool:
    return stage in ADVANCE_TARGET


def why_no_advance(stage: Stage) -> str:
    """Why a seed in ``stage`` (one :func:`may_advance` refuses) cannot be advanced."""
    if stage == Stage.DORMANT:
        return "the slot holds no seed; germinate one first"
    if stage == Stage.HOLDING:
        return "advance() moves GERMINATED, TRAINING and BLENDING seeds; a HOLDING seed is fossilized with fossilize()"
    if stage in FOSSIL_STAGES:
        return "a fossil is permanent"
    return "the slot is cooling down after a prune"


class JudgedSeed(StagedSeed, Protocol):
    """What the pruning rule reads of a seed (a ``SlotReport`` has all of it)."""

    @property
    def epochs_in_stage(self) -> int: ...

    @property
    def alpha(self) -> float: ...

    @property
    def alpha_target(self) -> float: ...

    @property
    def gradient_health(self) -> float | None: ...

    @property
    def exploding(self) -> bool: ...


def is_healthy(seed: JudgedSeed, min_gradient_health: float) -> bool:
    """No sign of trouble: gradient health unmeasured or at least the gate's threshold,
    and no exploding gradient."""
    health = seed.gradient_health
    return not seed.exploding and (health is None or health >= min_gradient_health)


def trial_done(seed: JudgedSeed, min_training_epochs: int) -> bool:
    """Whether the seed has had its stage's minimum: ``min_training_epochs`` in TRAINING,
    its alpha ramp in BLENDING; a HOLDING seed has, a GERMINATED one not yet."""
    if seed.stage == Stage.TRAINING:
        return seed.epochs_in_stage >= min_training_epochs
    if seed.stage == Stage.BLENDING:
        return seed.alpha >= seed.alpha_target
    return seed.stage == Stage.HOLDING


def may_prune(
    seed: JudgedSeed,
    min_prune_age: int,
    protect_healthy: bool = False,
    min_training_epochs: int = 0,
    min_gradient_health: float = 0.0,
) -> bool:
    """A live seed at least ``min_prune_age`` epochs old; with ``protect_healthy``, a
    healthy one only once its stage's trial is done (:func:`trial_done`).

    The protection is about exploration: an untrained controller that may prune from age
    1 ends almost every lifecycle in TRAINING (a third of its choices there are PRUNE),
    so it never sees what a blended seed is worth. A seed in trouble can always go.
    """
    if seed.stage not in PRUNABLE_STAGES or seed.epochs_total < min_prune_age:
        return False
    if not protect_healthy or not is_healthy(seed, min_gradient_health):
        return True
    return trial_done(seed, min_training_epochs)


def may_fossilize(stage: Stage) -> bool:
    return stage == Stage.HOLDING


def is_fossil(stage: Stage) -> bool:
    return stage in FOSSIL_STAGES


def next_gated_target(stage: Stage) -> Stage | None:
    """The stage a seed in ``stage`` moves to through its next gate; None: no gate ahead."""
    return GATED_TARGET.get(stage)


def auto_advance_fossilizes(stage: Stage) -> bool:
    """Whether an auto-advance from ``stage`` fossilizes the seed (else it advances it)."""
    return next_gated_target(stage) == Stage.FOSSILIZED


def alpha_targets_legal(
    stage: Stage, current_target: float, targets: Iterable[float]
) -> list[bool]:
    """Which SET_ALPHA_TARGET values are legal: a new target while BLENDING, below 1 from HOLDING."""
    if stage == Stage.BLENDING:
        return [t != current_target for t in targets]
    if stage == Stage.HOLDING:
        return [t < 1.0 for t in targets]
    return [False for _ in targets]
