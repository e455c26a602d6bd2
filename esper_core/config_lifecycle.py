"""The ``[lifecycle]`` section of the run configuration: stages, gates, alpha ramps,
isolation and births (DOMAIN §2). Its own module so ``config.py`` stays one screenful a
section; :mod:`esper_core.config` re-exports it."""

from __future__ import annotations

from attrs import define

from esper_core.config_limits import MAX_EPOCHS, MAX_FACTOR, MAX_HISTORY, MAX_POINTS
from esper_core.converter import each, in_range, one_of, options_field


@define
class LifecycleSection:
    """Gates, alpha schedules and cooldowns (DOMAIN §2)."""

    gate_mode: str = options_field(
        "permissive",
        one_of("permissive", "strict"),
        "Quality gates: permissive (basic checks) or strict (the strict thresholds below too).",
    )
    auto_advance: bool = options_field(
        False, doc="Let slots advance themselves when a gate passes."
    )
    min_training_epochs: int = options_field(
        10, in_range(0, MAX_EPOCHS, integer=True), "G2: epochs in TRAINING."
    )
    min_gradient_health: float = options_field(
        0.7, in_range(0, 1), "G2/G5: gradient health threshold."
    )
    min_grad_ratio: float = options_field(
        0.10, in_range(0, MAX_FACTOR), "G2 strict: seed/host gradient ratio."
    )
    strict_min_blending_epochs: int = options_field(
        10, in_range(0, MAX_EPOCHS, integer=True), "G3 strict."
    )
    strict_min_contribution: float = options_field(
        1.0, in_range(-MAX_POINTS, MAX_POINTS), "G5 strict: contribution in points."
    )
    embargo_epochs: int = options_field(
        5, in_range(0, MAX_EPOCHS, integer=True), "Epochs a pruned slot is embargoed."
    )
    resetting_epochs: int = options_field(
        1, in_range(0, MAX_EPOCHS, integer=True), "Epochs in RESETTING before DORMANT."
    )
    tempos: list[int] = options_field(
        [3, 5, 8], each(in_range(1, MAX_EPOCHS, integer=True)), "Alpha ramp lengths (epochs)."
    )
    default_tempo: int = options_field(
        5,
        in_range(1, MAX_EPOCHS, integer=True),
        "Ramp length when an action names none (one of tempos).",
    )
    alpha_targets: list[float] = options_field(
        [0.5, 0.7, 1.0],
        each(in_range(0, 1, lo_open=True)),
        "Alpha a blend may ramp to (the alpha_target head); must contain 1.0.",
    )
    styles: list[str] = options_field(
        ["linear_add", "sigmoid_add", "linear_multiply", "gated"],
        each(
            one_of("linear_add", "cosine_add", "sigmoid_add", "linear_multiply", "gated"),
            non_empty=True,
        ),
        "Germination styles the controller may choose (the style head); at least one.",
    )
    sigmoid_steepness: float = options_field(
        10.0, in_range(0, MAX_FACTOR, lo_open=True), "Steepness of the sigmoid_add alpha ramp."
    )
    stage_history: int = options_field(
        32, in_range(1, MAX_HISTORY, integer=True), "Stage transitions kept per slot."
    )
    isolation: str = options_field(
        "none",
        one_of("full", "short", "none"),
        "Isolated TRAINING before a seed that is the identity at birth may blend: full "
        "(min_training_epochs), short (short_training_fraction of the episode) or none "
        "(it blends from germination).",
    )
    isolation_non_identity: str = options_field(
        "none",
        one_of("full", "short", "none"),
        "The same for a seed that is not the identity at birth.",
    )
    short_training_fraction: float = options_field(
        0.07,
        in_range(0, 1, lo_open=True),
        "Short isolation: this fraction of the episode's epochs in TRAINING (at least 1).",
    )
    stack_blocks: bool = options_field(
        False,
        doc="Stacking births (G_stack): a seed whose blueprint can inherit (transformer/block) "
        "starts as a copy of the host block before its slot instead of as the identity; it "
        "is then not the identity at birth, and its blend starts at alpha 0.",
    )
    blend_host_gradient: str = options_field(
        "scaled",
        one_of("scaled", "full"),
        "While a seed blends with its input isolated, the host's upstream layers get the "
        "gradient scaled by (1 - alpha) (scaled), or all of it (full: the seed counts as "
        "the identity for the host's gradient).",
    )

    def __esper_validate__(self) -> list[str]:
        problems = []
        if self.default_tempo not in self.tempos:
            problems.append(
                f"default_tempo {self.default_tempo} is not one of tempos {self.tempos}"
            )
        if 1.0 not in self.alpha_targets:
            problems.append("alpha_targets must contain 1.0 (HOLDING needs a full blend)")
        return problems
