"""The observation of the ``slots`` network: run-level features, one row per slot and one
row per (slot, blueprint) candidate, whose widths depend on neither the number of slots
nor the blueprint vocabulary (:mod:`esper_tamiyo_ppo.slot_layout` places them in one
flat vector).

A blueprint is described by what it is (its parameters in that slot relative to the
host, whether it is the identity at birth, whether it is a branch, how long it trains
before it blends), never by its index, so a blueprint installed after training is read
like any other. Two blueprints with the same description are the same to the policy.

Two schemas: 2, the default, is :mod:`esper_tamiyo_ppo.padded_features` (unit-free,
padded to a mixed run's space); 1, kept here unchanged, is what checkpoints trained
before schema 2 read (the first pretrained study's among them): the run's own space
only, no presence flags. A checkpoint's recorded schema selects which one a policy reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from esper_core.components.blueprint import TOPOLOGIES
from esper_core.env.observation import Observation, features
from esper_core.lifecycle.actions import ActionSpace
from esper_core.lifecycle.stages import STAGES
from esper_tamiyo_ppo.padded_features import log_ratio, padded_features
from esper_tamiyo_ppo.slot_layout import (
    CANDIDATE,
    RUN_SCALARS,
    SCHEMA_VERSION,
    SLOT_DIM,
    SLOT_SCALARS,
    SlotLayout,
    schema,
)

__all__ = ["CANDIDATE", "SCHEMA_VERSION", "SLOT_DIM", "SlotLayout", "schema"]


def slot_features(
    obs: Observation, space: ActionSpace, history_length: int, topology: str
) -> list[float]:
    """One step's flat vector in schema 1 (see :class:`SlotLayout`). The run-level
    scalars and each slot's stage and scalars are exactly the flat network's
    (``observation.features``); what the flat vector says by index (the installed
    blueprint) is said here by features."""
    n_slots, n_bp = len(space.slot_ids), len(space.blueprints)
    flat = features(obs, space, history_length)
    run_end = RUN_SCALARS + 2 * history_length
    per_slot = len(STAGES) + SLOT_SCALARS + n_bp + 1  # the flat layout's slot block
    host = max(obs.host_params, 1)
    identity = obs.blueprint_identity or (False,) * n_bp
    branch = obs.blueprint_branch or (False,) * n_bp
    blending = obs.epochs_before_blending or (0,) * n_bp
    params = obs.blueprint_params or ((0,) * n_bp,) * n_slots
    out = flat[:run_end]
    out += [
        log_ratio(obs.seed_params, host),
        max(min(math.log(max(obs.train_flops_ratio, 1e-6)), 10.0), -10.0),
        *(1.0 if topology == t else 0.0 for t in TOPOLOGIES),
    ]
    for i, report in enumerate(obs.slots):
        start = run_end + i * per_slot
        out += flat[start : start + len(STAGES) + SLOT_SCALARS]
        j = space.blueprints.index(report.blueprint) if report.blueprint in space.blueprints else -1
        out += [
            1.0 if report.blueprint is not None else 0.0,
            1.0 if j >= 0 and identity[j] else 0.0,
            1.0 if j >= 0 and branch[j] else 0.0,
            i / (n_slots - 1) if n_slots > 1 else 0.0,  # its depth, whatever the slot count
        ]
    for i in range(n_slots):
        for j in range(n_bp):
            out += [
                log_ratio(params[i][j], host),
                1.0 if identity[j] else 0.0,
                1.0 if branch[j] else 0.0,
                min(blending[j], 30) / 10.0,
            ]
    return out


def slot_feature_tensor(
    observations: Sequence[Observation],
    space: ActionSpace,
    history_length: int,
    topology: str,
    version: int = SCHEMA_VERSION,
) -> torch.Tensor:
    """The flat vectors of a batch in schema ``version``, laid out for ``space`` (the run's,
    padded in a mixed run)."""
    if version == 1:
        rows = [slot_features(o, space, history_length, topology) for o in observations]
    else:
        layout = SlotLayout(len(space.slot_ids), len(space.blueprints), history_length, version)
        rows = [padded_features(o, layout, topology) for o in observations]
    return torch.tensor(rows, dtype=torch.float32)
