"""Rules shared by the reward families: the potential Φ, the shaping term, the rent.

Each rule lives here once; the families only combine them. Options are a single
inheritance chain (attrs slotted classes cannot mix in several bases):
``ShapingOptions`` (Φ and its weight) → ``ShapingRentOptions`` (+ parameter rent).

Sign convention of every component: positive is good for the controller, so costs
(rent, refusals, interventions) are returned as values <= 0; the one exception is the
compute rent timed ``final``, which refunds a prune (see :func:`flops_rent`).
"""

from __future__ import annotations

import math

from attrs import define

from esper_core.components.reward import RewardContext, SlotSnapshot
from esper_core.config_limits import MAX_FACTOR, MAX_PARAMS
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import ConfigError
from esper_core.lifecycle.rules import BLENDED_STAGES, SEED_STAGES
from esper_core.lifecycle.stages import Stage

# Stages that hold a seed. Only these earn the epochs-in-stage bonus: on DORMANT the
# bonus would make germinating *lower* Φ (an idle slot would be worth up to 2, a fresh
# seed 1), and on the cooldown stages it would make pruning look like progress.
# FOSSILIZED is included so a long-lived fossil (7.5 + 1) stays worth more than a seed
# held in HOLDING forever (5.5 + 1). The cap (1) is below every step between consecutive
# stages (1, 1.5, 2, 2), so no advance ever lowers Φ: with DOMAIN §6's cap of 2 and
# FOSSILIZED 6, advancing a seed after its 10 TRAINING epochs (2 + 2 -> 3.5) and
# fossilizing one held 2+ epochs (5.5 + 0.6 -> 6) were punished on the spot, teaching a
# learner the opposite of the lifecycle.


# Potentials may be negative; NaN or infinite would poison every step, and beyond
# ±MAX_FACTOR one stage's Φ would drown every other term of the reward.
_finite = in_range(-MAX_FACTOR, MAX_FACTOR)


def check_gamma(gamma: float) -> float:
    """The run's discount, validated: the family must shape with the learner's gamma."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not 0.0 < gamma <= 1.0:
        raise ConfigError([f"run.gamma: expected a number in (0, 1], got {gamma!r}"])
    return float(gamma)


@define
class ShapingOptions:
    """Potential-based shaping ``w·(γ·Φ(s′) − Φ(s))``; Φ sums over every slot."""

    shaping_weight: float = options_field(
        0.3, in_range(0, MAX_FACTOR), "w: weight of the PBRS term."
    )
    potential_dormant: float = options_field(0.0, _finite, "Φ of an empty slot.")
    potential_germinated: float = options_field(1.0, _finite, "Φ of a GERMINATED seed.")
    potential_training: float = options_field(2.0, _finite, "Φ of a TRAINING seed.")
    potential_blending: float = options_field(3.5, _finite, "Φ of a BLENDING seed.")
    potential_holding: float = options_field(5.5, _finite, "Φ of a HOLDING seed.")
    potential_fossilized: float = options_field(7.5, _finite, "Φ of a fossil.")
    potential_pruned: float = options_field(0.0, _finite, "Φ of a slot in PRUNED.")
    potential_embargoed: float = options_field(0.0, _finite, "Φ of a slot in EMBARGOED.")
    potential_resetting: float = options_field(0.0, _finite, "Φ of a slot in RESETTING.")
    epoch_bonus: float = options_field(
        0.3,
        in_range(0, MAX_FACTOR),
        "Φ bonus per epoch in stage, seed-holding stages only (GERMINATED..FOSSILIZED).",
    )
    epoch_bonus_cap: float = options_field(
        1.0,
        in_range(0, MAX_FACTOR),
        "Largest epochs-in-stage bonus per slot (below every step to the next stage, so "
        "no advance lowers Φ).",
    )
    zero_terminal_potential: bool = options_field(
        True,
        doc="Take Φ(s′) = 0 at the last step and at a rollback: the episode's shaping sums to "
        "−w·Φ(s_0) whatever the policy did (strict policy invariance); off: it sums to "
        "w·(γ^T·Φ(s_T) − Φ(s_0)), a bonus for ending with any seed or fossil, useful or not.",
    )


@define
class ShapingRentOptions(ShapingOptions):
    """Shaping plus the parameter rent ``min(scale·ln(1 + seed/max(host, floor)), cap)·weight``."""

    rent_weight: float = options_field(
        0.01,
        in_range(0, MAX_FACTOR),
        "Weight of the parameter rent (per step, on output parameters).",
    )
    rent_log_scale: float = options_field(
        0.5, in_range(0, MAX_FACTOR), "Scale of ln(1 + seed/host) in the rent."
    )
    rent_cap: float = options_field(
        1.5, in_range(0, MAX_FACTOR), "Largest rent before rent_weight."
    )
    rent_host_floor: int = options_field(
        200,
        in_range(1, MAX_PARAMS, integer=True),
        "Host parameters below this count as this many (tiny hosts).",
    )
    flops_rent_weight: float = options_field(
        0.0,
        in_range(0, MAX_FACTOR),
        "Weight of the training-FLOPs rent: min(rent_log_scale·ln(epoch FLOPs / the bare "
        "host's FLOPs), rent_cap)·weight, charged as flops_rent_timing says; 0 leaves "
        "compute unpriced.",
    )
    flops_rent_timing: str = options_field(
        "per_epoch",
        one_of("per_epoch", "final"),
        "When the compute rent is charged: per_epoch, each epoch's own compute (a growth "
        "late in the episode pays for fewer epochs); final, the compute of the model the "
        "episode ends with, for every epoch, charged as it changes (a prune refunds), so "
        "the moment of a growth is left to the accuracy.",
    )


def stage_potential(stage: Stage, opts: ShapingOptions) -> float:
    return {
        Stage.DORMANT: opts.potential_dormant,
        Stage.GERMINATED: opts.potential_germinated,
        Stage.TRAINING: opts.potential_training,
        Stage.BLENDING: opts.potential_blending,
        Stage.HOLDING: opts.potential_holding,
        Stage.FOSSILIZED: opts.potential_fossilized,
        Stage.PRUNED: opts.potential_pruned,
        Stage.EMBARGOED: opts.potential_embargoed,
        Stage.RESETTING: opts.potential_resetting,
    }[stage]


def slot_potential(slot: SlotSnapshot, opts: ShapingOptions) -> float:
    value = stage_potential(slot.stage, opts)
    if slot.stage in SEED_STAGES:
        value += min(opts.epoch_bonus * slot.epochs_in_stage, opts.epoch_bonus_cap)
    return value


def potential(slots: tuple[SlotSnapshot, ...], opts: ShapingOptions) -> float:
    """Φ(s): the sum over ALL slots, so WAIT and ops on other slots are credited too."""
    return math.fsum(slot_potential(slot, opts) for slot in slots)


def terminal_state(ctx: RewardContext, opts: ShapingOptions) -> bool:
    """Whether s′ counts as terminal (potential 0): the last step or a rollback, if zeroed."""
    return opts.zero_terminal_potential and (ctx.is_last_step or ctx.rolled_back)


def shaping(ctx: RewardContext, opts: ShapingOptions, gamma: float) -> float:
    """``w·(γ·Φ(s′) − Φ(s))`` with s = slots before the action, s′ = slots after the step."""
    phi_after = 0.0 if terminal_state(ctx, opts) else potential(ctx.slots_after, opts)
    return opts.shaping_weight * (gamma * phi_after - potential(ctx.slots_before, opts))


def output_params(slots: tuple[SlotSnapshot, ...]) -> int:
    """Parameters of the seeds that affect the output (BLENDING, HOLDING, FOSSILIZED).

    A GERMINATED or TRAINING seed leaves the output bit-identical to the host's, so it
    costs nothing yet: parking a seed that never blends is worth exactly a WAIT.
    """
    return sum(slot.seed_params for slot in slots if slot.stage in BLENDED_STAGES)


def log_cost(params: int, host_params: int, opts: ShapingRentOptions) -> float:
    """``min(scale·ln(1 + params/max(host, floor)), cap)``: the size of a seed set, >= 0."""
    ratio = max(params, 0) / max(host_params, opts.rent_host_floor)
    return min(opts.rent_log_scale * math.log1p(ratio), opts.rent_cap)


def rent(seed_params: int, host_params: int, opts: ShapingRentOptions) -> float:
    """The per-step parameter rent of ``seed_params`` output parameters, as a value <= 0.

    Host parameters only appear in the denominator: a larger host makes the same seed
    cheaper, and the rent never grows with the host. Families pass
    :func:`output_params` of the slots after the step.
    """
    # "0.0 -" keeps a zero rent +0.0 rather than -0.0 in telemetry.
    return 0.0 - opts.rent_weight * log_cost(seed_params, host_params, opts)


def flops_cost(train_flops_ratio: float, opts: ShapingRentOptions) -> float:
    """``min(scale·ln(ratio), cap)``, >= 0: ``train_flops_ratio`` is an epoch's training
    FLOPs over the bare host's, so ``ln`` of it prices growth by the compute it adds (a
    seed that doubles an epoch's FLOPs costs what a seed the size of the host costs in
    parameters), and a model trained small costs nothing."""
    return min(opts.rent_log_scale * math.log(max(train_flops_ratio, 1.0)), opts.rent_cap)


def flops_rent(ctx: RewardContext, opts: ShapingRentOptions, gamma: float) -> float:
    """The step's compute rent, ``−weight·`` a cost (``flops_rent_timing``).

    ``per_epoch``: the epoch's own cost, <= 0. Summed over an episode, a growth at epoch
    ``t`` pays for ``T − t + 1`` epochs, so the later it grows the less it pays.
    ``final``: ``T·(γ·c_t − c_{t−1})`` with ``c`` the cost of this epoch and of the last,
    whose discounted sum is ``T·γ^T·c_T``: the compute of the model the episode ends with,
    as if trained from the first epoch, whenever it grew (the accuracy term telescopes
    the same way). A growth pays on the epoch it starts, a prune is refunded, and a model
    held steady earns ``T·(1 − γ)·c``, the discount, a few thousandths."""
    cost = flops_cost(ctx.train_flops_ratio, opts)
    if opts.flops_rent_timing == "final":
        cost = ctx.max_epochs * (gamma * cost - flops_cost(ctx.train_flops_ratio_prev, opts))
    # "0.0 -" keeps a zero rent +0.0 rather than -0.0 in telemetry.
    return 0.0 - opts.flops_rent_weight * cost


def rents(ctx: RewardContext, opts: ShapingRentOptions, gamma: float) -> float:
    """The parameter rent of the seeds in the output plus the compute rent of the epoch."""
    return rent(output_params(ctx.slots_after), ctx.host_params, opts) + flops_rent(
        ctx, opts, gamma
    )


def refused(ctx: RewardContext, penalty: float) -> float:
    """``−penalty`` when the env refused the action (illegal, or its gate failed)."""
    return 0.0 if ctx.applied else -penalty


def accuracy_improvement(ctx: RewardContext, weight: float, gamma: float) -> float:
    """``weight·(γ·val_acc − val_acc_prev)``, accuracies in percent points.

    The discounted difference of the accuracy: over an episode it sums to exactly
    ``weight·(γ^T·acc_T − acc_0)`` (discounted with the learner's γ), so it pays for the
    final accuracy and nothing else, however the accuracy moved on the way. (The plain
    difference, clipped per step, did not: its discounted sum also paid for reaching an
    accuracy early, and a clip cut the noisy swings of a small host unevenly, so a
    useless fossil could out-earn ``wait``.) Validation accuracy, never test: rewards
    must not be optimised on the test split.
    """
    if not (math.isfinite(ctx.val_acc) and math.isfinite(ctx.val_acc_prev)):
        return 0.0
    return weight * (gamma * ctx.val_acc - ctx.val_acc_prev)
