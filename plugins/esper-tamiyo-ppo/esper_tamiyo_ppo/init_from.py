"""``policies.ppo.init_from``: a training run that starts from a trained slots network.

A chain of ``esper train`` runs, each on another task, host or slot count, each starting
from the network the previous one ended with, trains ONE policy across them: this is
how the shipped ``ppo:pretrained`` was trained (PRETRAINED.md). Only the network's
weights and its observation statistics carry over; the optimiser, the reward scale, the
schedules and the generators start afresh, as in any new run. So does its slot-feature
schema: a run from a schema-1 checkpoint reads schema 1, which fits one host's own
space, not a mixed run's (train a new network for that).

Only a ``slots`` checkpoint can start a run on another host (a ``flat`` network's sizes
are its own host's), and only into a network of the same options: anything else is
refused in one line that says what differs.
"""

from __future__ import annotations

from typing import Any

from esper_core.components.policy import PolicyContext
from esper_core.converter import unstructure
from esper_core.errors import CheckpointError
from esper_tamiyo_ppo.compat import check_compatible, check_kind, load_policy_state
from esper_tamiyo_ppo.options import MODEL_FIELD_DEFAULTS, MODEL_FIELDS, PPOOptions

OPTION = "policies.ppo.init_from"


def _fmt(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def load_init_state(options: PPOOptions, context: PolicyContext) -> tuple[dict[str, Any], str]:
    """The PPO state ``options.init_from`` names, checked to fit this run's network."""
    try:
        state, source = load_policy_state(options.init_from)
    except CheckpointError as exc:
        raise CheckpointError(f"{OPTION}: {exc}") from None
    check_kind(state, f"{OPTION}: {source}")
    saved_options = state.get("options", {})
    saved = {k: saved_options.get(k, MODEL_FIELD_DEFAULTS.get(k)) for k in MODEL_FIELDS}
    if saved["network"] != "slots":
        raise CheckpointError(
            f"{OPTION}: {source} holds a {saved['network']} network, which fits only the host "
            "and blueprints it was trained on; name a checkpoint trained with "
            "--set policies.ppo.network=slots"
        )
    ours = unstructure(options)
    differ = [k for k in MODEL_FIELDS if saved[k] != ours[k]]
    if differ:
        theirs = ", ".join(f"{k}={_fmt(saved[k])}" for k in differ)
        fix = " ".join(f"--set policies.ppo.{k}={_fmt(saved[k])}" for k in differ)
        raise CheckpointError(
            f"{OPTION}: {source} was trained with {theirs}, this run has "
            f"{', '.join(f'{k}={_fmt(ours[k])}' for k in differ)}; add {fix}"
        )
    check_compatible(
        state,
        context.space,
        context.feature_dim,
        f"{OPTION}: {source}",
        context.task,
        context.history_length,
    )
    return state, source
