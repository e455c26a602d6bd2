"""The training recipe: optimizer, learning-rate schedule and weight-decay rule.

One recipe trains the host and every seed (DOMAIN §5): the same optimizer family and
hyper-parameters, the same weight-decay rule and, by default, one gradient-norm budget
over both. A task names the recipe the field uses for its model family
(``Task.default_recipe``); without one, :func:`family_recipe` gives its topology's.
Every field of ``[training]`` that is set overrides the task's value.

The schedule is a pure function of the optimizer step (:func:`lr_factor`), applied by
the trainer to every parameter group each step. A torch ``LRScheduler`` is bound to
one optimizer and records each group's ``initial_lr`` when it is built, so a seed's
group, added mid-run, would have none; a function of the step has no such state.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
from attrs import frozen

if TYPE_CHECKING:
    from esper_core.config import TrainingSection


@frozen
class Recipe:
    """How a model family is trained. ``warmup`` and ``seed_warmup`` are fractions of the
    run's optimizer steps; ``min_lr`` is the cosine's final rate as a fraction of ``lr``."""

    optimizer: str
    lr: float
    momentum: float = 0.9  # SGD only
    nesterov: bool = False  # SGD only
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW only
    weight_decay: float = 0.0
    decay_embeddings: bool = False
    decay_norms_and_biases: bool = False
    schedule: str = "constant"
    warmup: float = 0.0
    min_lr: float = 0.0
    seed_warmup: float = 0.0


# The ResNet recipe for CIFAR-scale CNNs (He et al. 2016; timm's SGD defaults):
# Nesterov momentum, weight decay on kernels, cosine decay to the last step.
CNN_RECIPE = Recipe(
    optimizer="sgd", lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, schedule="cosine"
)
# nanoGPT's: AdamW, betas (0.9, 0.95), weight decay 0.1 on matrices, linear warm-up,
# cosine decay.
TRANSFORMER_RECIPE = Recipe(
    optimizer="adamw",
    lr=3e-3,
    betas=(0.9, 0.95),
    weight_decay=0.1,
    schedule="cosine",
    warmup=0.05,
)
# The original system's recipe: constant-rate SGD, weight decay on every parameter. An
# option (``recipe_overrides(LEGACY_SGD)``), not a default.
LEGACY_SGD = Recipe(
    optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4, decay_norms_and_biases=True
)


def family_recipe(topology: str | None) -> Recipe:
    """The recipe of a topology's model family, for tasks that name none."""
    return TRANSFORMER_RECIPE if topology == "transformer" else CNN_RECIPE


def task_recipe(task: Any, topology: str | None = None) -> Recipe:
    """The default recipe of a task (or task class): its own, or its family's."""
    recipe = getattr(task, "default_recipe", None)
    if isinstance(recipe, Recipe):
        return recipe
    return family_recipe(topology or getattr(task, "topology", None))


def resolve_recipe(training: TrainingSection, default: Recipe) -> Recipe:
    """``default`` with every recipe field ``training`` sets (not None) in its place."""
    changes: dict[str, Any] = {}
    for field in attrs.fields(Recipe):
        value = getattr(training, field.name)
        if value is not None:
            changes[field.name] = tuple(value) if field.name == "betas" else value
    return attrs.evolve(default, **changes)


def recipe_fields(recipe: Recipe) -> dict[str, Any]:
    """The recipe as ``[training]`` keys (what a run records in its config)."""
    values = attrs.asdict(recipe)
    values["betas"] = list(recipe.betas)
    return values


def recipe_overrides(recipe: Recipe) -> list[str]:
    """The ``--set training.KEY=VALUE`` overrides (TOML values) that select ``recipe``."""
    import tomli_w

    overrides = []
    for key, value in recipe_fields(recipe).items():
        text = tomli_w.dumps({"v": value}).removeprefix("v = ")
        overrides.append(f"training.{key}={' '.join(text.split())}")
    return overrides


# ---------------------------------------------------------------- the schedule


def lr_factor(recipe: Recipe, step: int, total_steps: int, born: int = 0) -> float:
    """The learning rate at optimizer ``step`` (0-based) of a run of ``total_steps``, as a
    fraction of ``recipe.lr``, for parameters that joined at step ``born``.

    Linear warm-up over the first ``warmup`` of the run, then constant or a cosine decay
    to ``min_lr`` at the last step. A seed born mid-run joins the schedule where it is and,
    with ``seed_warmup``, ramps up linearly from there over that fraction of the run.
    """
    total = max(total_steps, 1)
    warm = round(recipe.warmup * total)
    if step < warm:
        factor = (step + 1) / warm
    elif recipe.schedule == "cosine":
        progress = min((step - warm) / max(total - 1 - warm, 1), 1.0)
        factor = recipe.min_lr + (1 - recipe.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    else:
        factor = 1.0
    seed_warm = round(recipe.seed_warmup * total)
    if born > 0 and seed_warm > 0 and step - born < seed_warm:
        factor *= (step - born + 1) / seed_warm
    return factor
