"""The heuristic's options: every constant it decides with is one of these fields."""

from __future__ import annotations

from typing import Any

from attrs import define

from esper_core.components import host_growth_choice as auto
from esper_core.components import host_growth_options as growth
from esper_core.config_limits import MAX_EPOCHS, MAX_FACTOR
from esper_core.converter import each, in_range, non_empty, one_of, options_field

TRIGGERS = ("capacity", "slowdown", "expansion")
PRICES = ("params", "flops")
JUDGES = ("gain", "contribution")

# CNN: measured on digits with the impaired host (benchmarks/growth_study.py): seeds
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
    "mlp/residual",
    "mlp/residual_wide",
    "mlp/lowrank",
    "mlp/norm",
]


def _non_blank(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"expected a blueprint name such as conv_small or cnn/conv_small, got {value!r}"


@define
class HeuristicOptions:
    # expansion (with judge = contribution and expansion_ratio = 2) chosen on the
    # controller suite's training pairs and tuning random seeds 100-102
    # (docs/results/heuristic-expansion.md): the capacity trigger never fires on a host
    # that learns, at the rate that trains it best.
    trigger: str = options_field(
        "expansion",
        one_of(*TRIGGERS),
        "When to germinate: capacity (the host underfits and its training loss is flat, see "
        "underfit_loss_ratio) or slowdown (compute-aware: the host's validation loss falls "
        "by less than slowdown_drop per epoch, so more epochs of the same host buy little "
        "and a bigger model is the cheaper way on) or expansion (gradient-based: a free "
        "slot's expansion score says a new module there would lower the loss faster than "
        "the host's own next step, see expansion_ratio).",
    )
    expansion_ratio: float = options_field(
        2.0,
        in_range(0, MAX_FACTOR, lo_open=True),
        "trigger = expansion: germinate once a free slot's expansion score (the first-order "
        "loss decrease a zero-initialised module there would buy, over the host's own next "
        "step; Observation.expansion, needs env.expansion_batches > 0) is at least this; "
        "the seed goes to the slot with the highest score.",
    )
    expansion_patience: int = options_field(
        1,
        in_range(1, MAX_EPOCHS, integer=True),
        "trigger = expansion: germinate only once a free slot's score has reached "
        "expansion_ratio at this many consecutive decisions (1: at the first), so a "
        "transient reading does not grow the model.",
    )
    slowdown_drop: float = options_field(
        0.02,
        in_range(0, MAX_FACTOR),
        "trigger = slowdown: germinate once the validation loss fell by less than this "
        "fraction of itself per epoch over the last flat_window epochs.",
    )
    price: str = options_field(
        "params",
        one_of(*PRICES),
        "What a seed's gain must pay for: params (every doubling of the model's parameters "
        "costs gain_per_doubling) or flops (every doubling of the training FLOPs per epoch, "
        "measured with the seed against the model before it).",
    )
    min_epoch: int = options_field(
        2,
        in_range(0, MAX_EPOCHS, integer=True),
        "Never germinate before this many epochs are done (the capacity signal needs a "
        "few epochs of training).",
    )
    fit_loss_ratio: float = options_field(
        0.15,
        in_range(0, MAX_FACTOR),
        "Grow nothing (no seed, no host growth), whatever the trigger, while the training "
        "loss is below this fraction of the chance-level loss: a host that fits its "
        "training data has no capacity limit to lift (0: no such gate).",
    )
    underfit_loss_ratio: float = options_field(
        0.8,
        in_range(0, MAX_FACTOR),
        "Capacity limit: the training loss is still at least this fraction of the "
        "chance-level loss...",
    )
    flat_window: int = options_field(
        2, in_range(1, MAX_EPOCHS, integer=True), "...and over this many epochs..."
    )
    flat_max_drop: float = options_field(
        0.05,
        in_range(0, MAX_FACTOR),
        "...it fell by less than this fraction of itself per epoch.",
    )
    prune_cooldown: int = options_field(
        5,
        in_range(0, MAX_EPOCHS, integer=True),
        "Germinate only when the last prune (by this policy or a governor rollback) is at "
        "least this many epochs ago (Observation.epochs_since_prune).",
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
        in_range(0, MAX_EPOCHS, integer=True),
        "After a seed of a blueprint is pruned, skip that blueprint for this many epochs.",
    )
    style: str = options_field(
        "linear_add",
        _non_blank,
        "Germination style: alpha curve + blend operator (one of lifecycle.styles).",
    )
    tempo: int = options_field(
        5,
        in_range(1, MAX_EPOCHS, integer=True),
        "Alpha ramp length in epochs (one of lifecycle.tempos).",
    )
    judge: str = options_field(
        "contribution",
        one_of(*JUDGES),
        "How a HOLDING seed is judged: gain (the validation loss against where the host "
        "alone was heading, priced per doubling, see min_gain) or contribution (its "
        "counterfactual contribution: validation accuracy with it minus switched off, "
        "see min_contribution).",
    )
    min_contribution: float = options_field(
        1.0,
        in_range(-MAX_FACTOR, MAX_FACTOR),
        "judge = contribution: keep a seed whose contribution is at least this many "
        "validation accuracy points.",
    )
    gain_window: int = options_field(
        2,
        in_range(1, MAX_EPOCHS, integer=True),
        "Validation losses averaged for the level before a seed blends and when it is judged.",
    )
    min_gain: float = options_field(
        0.05,
        in_range(-MAX_FACTOR, MAX_FACTOR),
        "A seed must lower the validation loss by at least this fraction below where the "
        "host alone was heading...",
    )
    gain_per_doubling: float = options_field(
        0.02,
        in_range(0, MAX_FACTOR),
        "...plus this much for every doubling of the model's parameters it causes.",
    )
    min_holding_epochs: int = options_field(
        1,
        in_range(1, MAX_EPOCHS, integer=True),
        "Epochs in HOLDING (alpha 1) before the seed is judged.",
    )
    max_holding_epochs: int = options_field(
        3,
        in_range(1, MAX_EPOCHS, integer=True),
        "Prune a paying seed whose fossilize gate (G5) still fails after this many epochs in "
        "HOLDING.",
    )
    regression_points: float = options_field(
        2.0,
        in_range(0, MAX_FACTOR),
        "Prune a BLENDING seed when validation accuracy is more than this many points below "
        "its value at the start of the stage...",
    )
    regression_epochs: int = options_field(
        5,
        in_range(0, MAX_EPOCHS, integer=True),
        "...once the seed has spent this many epochs in the stage.",
    )
    stall_epochs: int = options_field(
        20,
        in_range(1, MAX_EPOCHS, integer=True),
        "Prune a seed whose gate has not passed after this many epochs in TRAINING or BLENDING.",
    )
    # fit_loss_ratio 0.15 (second round), auto with fresh layers (fourth round): chosen
    # on the controller suite's training pairs by the rule written before the runs
    # (docs/results/controller-benchmark.md); auto beat widening everywhere 0.82 to 0.58.
    host_growth: str = growth.kind_field(
        "Grow the host itself once per episode, at the moment the host_growth_* trigger "
        "says: widen (a CNN's conv stages, a transformer's d_model, a user's layer pairs), "
        "deepen (a transformer's stack, host_growth_mode), auto (deepen where the host can "
        "and the expansion score says depth is its bottleneck, see depth_expansion_ratio; "
        "else widen) or off. Before it grows (or its window closes) no seed germinates, and "
        "it grows only when the env says the growth can start (no seed in its way, "
        "host_growth_ready).",
        default="auto",
        extra=("auto",),
    )
    depth_expansion_ratio: float = auto.ratio_field()
    depth_topologies: list[str] = auto.topologies_field()
    host_growth_factor: float = growth.factor_field()
    # identity: glyphs' CNN has no channel-preserving layer for G_stack to copy.
    host_growth_mode: str = growth.mode_field(default="identity")
    # 1.0 (grow at once) chosen on the controller suite's training pairs, third round
    # (docs/results/controller-benchmark.md): waiting for a slowdown (0.1, chosen on
    # charlm alone, docs/results/growth-charlm-300k.md) gave up half the gain.
    host_growth_drop: float = options_field(
        1.0,
        in_range(0, MAX_FACTOR),
        "Grow once the validation loss fell by less than this fraction of itself per "
        "epoch over the last host_growth_window epochs (the host alone has slowed down; "
        "1 or more: at once, at the first decision of the window where the host still "
        "underfits by fit_loss_ratio)...",
    )
    host_growth_window: int = options_field(
        2, in_range(1, MAX_EPOCHS, integer=True), "...measured over this many epochs..."
    )
    host_growth_min_at: float = growth.at_field(
        0.2,
        "...but not before this fraction of the run (the growth starting at epoch "
        "round(f x max_epochs) at the earliest)...",
    )
    host_growth_max_at: float = growth.at_field(
        0.6,
        "...nor after this one (if the trigger has not fired by then, the host keeps its size).",
    )
    host_growth_tempo: int = growth.tempo_field()
    host_growth_curve: str = growth.curve_field()

    def __esper_validate__(self) -> list[str]:
        problems = growth.growth_problems(self)
        if self.max_holding_epochs < self.min_holding_epochs:
            problems.append(
                f"max_holding_epochs ({self.max_holding_epochs}) must be at least "
                f"min_holding_epochs ({self.min_holding_epochs})"
            )
        if non_empty(self.blueprint_order) is not None:
            problems.append('blueprint_order: name at least one blueprint (e.g. ["conv_small"])')
        return problems
