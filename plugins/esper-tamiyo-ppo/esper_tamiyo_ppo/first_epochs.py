"""The PPO policy's own rule "germinate nothing before ``min_epoch``".

At the episode's first decision nothing of the host has trained yet: its losses are
those of random weights, so whether it needs capacity cannot be read. A policy free to
germinate there learns a habit over hosts, not a reading of one (the PPO suite's third
study). With ``min_epoch`` it first sees that many epochs of the host's own learning
curve, as the heuristic (its own ``min_epoch``) and a policy in the Grower (whose first
decision follows the user's first epoch) do. The host-growth head has its window of its
own (``host_growth_min_at``).
"""

from __future__ import annotations

import attrs

from esper_core.env.observation import Observation
from esper_core.lifecycle.actions import ActionMasks, LifecycleOp


def masks_before(obs: Observation, min_epoch: int) -> ActionMasks:
    """``obs.masks``, with GERMINATE illegal while ``obs.epoch < min_epoch``."""
    if obs.epoch >= min_epoch or not bool(obs.masks.op[LifecycleOp.GERMINATE]):
        return obs.masks
    op, slot = obs.masks.op.clone(), obs.masks.slot.clone()
    op[LifecycleOp.GERMINATE] = False
    slot[LifecycleOp.GERMINATE] = False
    return attrs.evolve(obs.masks, op=op, slot=slot)
