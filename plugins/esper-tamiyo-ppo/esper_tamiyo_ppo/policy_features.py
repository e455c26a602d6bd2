"""The raw features a PPO policy acts on, for its network and schema, and the refusal
of observations its network cannot read.

In a mixed run (``train.pairs``) the run's space is the pairs' union, padded, and each
observation is of its own env's space. Only the ``slots`` network in schema 2 reads
that (:mod:`esper_tamiyo_ppo.padded_features`): the flat network's features and
schema 1's are laid out by the run's own vocabulary, so an observation of another
size or topology is refused in one line instead of being misread.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from esper_core.components.policy import PolicyContext
from esper_core.env.observation import Observation, feature_tensor
from esper_core.errors import CheckpointError, ConfigError
from esper_tamiyo_ppo.padded_features import fits_space, own_sizes
from esper_tamiyo_ppo.slot_features import slot_feature_tensor


def _first_misfit(observations: Sequence[Observation], context: PolicyContext) -> str:
    space = context.space
    for o in observations:
        if not fits_space([o], space, context.topology):
            n_slots, n_bp = own_sizes(o)
            return (
                f"env {o.env_index} observes a {o.topology or context.topology} host of "
                f"{n_slots} slots and {n_bp} blueprints, the policy's space is a "
                f"{context.topology} one of {len(space.slot_ids)} and {len(space.blueprints)}"
            )
    return ""


def raw_features(
    observations: Sequence[Observation], context: PolicyContext, network: str, version: int
) -> torch.Tensor:
    """``[B, D]`` unnormalised features of the network ``network`` (``slots``: in schema
    ``version``)."""
    ctx = context
    if network == "slots" and version >= 2:
        return slot_feature_tensor(
            observations, ctx.space, ctx.history_length, ctx.topology, version
        )
    if not fits_space(observations, ctx.space, ctx.topology):
        misfit = _first_misfit(observations, ctx)
        if network == "slots":
            raise CheckpointError(
                f"the policy reads slot-feature schema {version}, which fits only the run's "
                f"own host ({misfit}); mixing pairs needs a policy trained with schema 2: "
                "train it again with this version of esper-tamiyo-ppo"
            )
        raise ConfigError(
            [
                f'run.policy: mixing pairs needs policies.ppo.network = "slots" ({misfit}); '
                "the flat network reads only the host it was built for"
            ]
        )
    if network == "slots":
        return slot_feature_tensor(
            observations, ctx.space, ctx.history_length, ctx.topology, version
        )
    return feature_tensor(observations, ctx.space, ctx.history_length)
