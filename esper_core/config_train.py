"""The ``[train]`` section: how ``esper train`` updates a trainable policy, and the
host/task pairs its envs may draw from."""

from __future__ import annotations

from typing import Any

from attrs import define

from esper_core.config_limits import MAX_EPOCHS, MAX_SEED
from esper_core.converter import each, in_range, options_field, path_component


def _distinct_labels(pairs: list[Any]) -> str | None:
    labels = [p.label for p in pairs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    return f"pair labels must be distinct; repeated: {', '.join(repeated)}" if repeated else None


@define
class TrainPair:
    """One host/task pair of a mixed training run: its label and a partial run config
    (``run.task``, ``tasks.NAME`` options, ``training.lr``, ...) merged over the run's."""

    label: str = options_field("pair", path_component, "Name in logs and checkpoints.")
    config: dict[str, Any] = options_field({}, doc="A partial run config for this pair's envs.")


@define
class TrainSection:
    """``esper train``: PPO-style updates, each from one rollout of every env.

    A rollout's length is the policy's (``policies.ppo.rollout_episodes`` episodes).
    """

    updates: int = options_field(
        20, in_range(1, MAX_EPOCHS, integer=True), "Policy updates (rollouts) to run."
    )
    checkpoint_every: int = options_field(
        1, in_range(1, MAX_EPOCHS, integer=True), "Checkpoint every N updates."
    )
    eval_every: int = options_field(
        5,
        in_range(0, MAX_EPOCHS, integer=True),
        "Evaluate the greedy policy on eval_seeds before the first update and every N "
        "updates (0: never).",
    )
    eval_seeds: list[int] = options_field(
        [100_000, 100_001, 100_002],
        each(in_range(0, MAX_SEED, integer=True)),
        "Env seeds of the evaluation episodes: fixed, and far from the training seeds "
        "(run.seed + episode x n_envs + env).",
    )
    eval_references: list[str] = options_field(
        ["wait", "heuristic"],
        doc="Policies evaluated once on eval_seeds, as reference lines (those not installed "
        "are skipped).",
    )
    seed_group: int = options_field(
        1,
        in_range(1, MAX_EPOCHS, integer=True),
        "Envs that share each training episode's random seed (a divisor of run.n_envs): "
        "the same host, data order and pair, different only by the policy's actions, so "
        "a learner can compare its actions on one episode (policies.ppo.advantage_groups "
        "= seed); 1: every env its own seed.",
    )
    pairs: list[TrainPair] = options_field(
        [],
        _distinct_labels,
        "Host/task pairs the envs draw from, one per episode (a pair's config is merged "
        "over this run's); empty: every env runs run.task. `esper train --suite` fills it "
        "with a suite's training pairs.",
    )
