"""The observation of the ``slots`` network: run-level features, one row per slot and one
row per (slot, blueprint) candidate, whose widths depend on neither the number of slots
nor the blueprint vocabulary.

A blueprint is described by what it is (its parameters in that slot relative to the
host, whether it is the identity at birth, whether it is a branch, how long it trains
before it blends), never by its index, so a blueprint installed after training is read
like any other. Two blueprints with the same description are the same to the policy.

A step's three parts travel as ONE flat vector ``[global | S x slot | S x K x candidate]``
(:meth:`SlotLayout.split` takes it apart), so the rollout buffer and the learner store
and index it like the flat network's features. The layout's ``S`` and ``K`` come from
the run; the widths, the :data:`SCHEMA` a checkpoint records, do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from attrs import frozen

from esper_core.components.blueprint import TOPOLOGIES
from esper_core.env.observation import Observation, features
from esper_core.lifecycle.actions import ActionSpace
from esper_core.lifecycle.stages import STAGES

# Bump when the meaning or order of a feature changes: a checkpoint of another schema
# is refused (compat.py).
SCHEMA_VERSION = 1
RUN_SCALARS = 8  # the flat features' leading run-level scalars (epoch, losses, accuracies, ...)
SLOT_SCALARS = 9  # the flat features' per-slot scalars after the stage one-hot
EXTRA_GLOBAL = 2 + len(TOPOLOGIES)  # seed parameters, training FLOPs ratio, topology one-hot
# Per slot, after the stage one-hot and the scalars: the installed seed's blueprint
# (present, identity at birth, branch) and the slot's relative depth.
EXTRA_SLOT = 4
CANDIDATE = 4  # parameter ratio, identity at birth, branch, epochs before blending


def global_dim(history_length: int) -> int:
    return RUN_SCALARS + 2 * history_length + EXTRA_GLOBAL


SLOT_DIM = len(STAGES) + SLOT_SCALARS + EXTRA_SLOT


def schema(history_length: int) -> dict[str, int]:
    """What a checkpoint records of the observation it was trained on."""
    return {
        "version": SCHEMA_VERSION,
        "history_length": history_length,
        "global": global_dim(history_length),
        "slot": SLOT_DIM,
        "candidate": CANDIDATE,
    }


@frozen
class SlotLayout:
    """Where each part sits in the flat vector of one step, for ``n_slots`` slots and
    ``n_blueprints`` blueprints."""

    n_slots: int
    n_blueprints: int
    history_length: int

    @property
    def global_dim(self) -> int:
        return global_dim(self.history_length)

    @property
    def total(self) -> int:
        return self.global_dim + self.n_slots * (SLOT_DIM + self.n_blueprints * CANDIDATE)

    def split(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[..., total]`` -> global ``[..., G]``, slots ``[..., S, F]``, candidates
        ``[..., S, K, D]``."""
        lead = flat.shape[:-1]
        s, k = self.n_slots, self.n_blueprints
        g_end = self.global_dim
        s_end = g_end + s * SLOT_DIM
        return (
            flat[..., :g_end],
            flat[..., g_end:s_end].reshape(*lead, s, SLOT_DIM),
            flat[..., s_end:].reshape(*lead, s, k, CANDIDATE),
        )

    def join(
        self, run: torch.Tensor, slots: torch.Tensor, candidates: torch.Tensor
    ) -> torch.Tensor:
        """The inverse of :meth:`split`."""
        lead = run.shape[:-1]
        return torch.cat([run, slots.reshape(*lead, -1), candidates.reshape(*lead, -1)], dim=-1)


def _log_ratio(params: int, host: int) -> float:
    return min(math.log1p(max(params, 0) / max(host, 1)), 10.0)


def slot_features(
    obs: Observation, space: ActionSpace, history_length: int, topology: str
) -> list[float]:
    """One step's flat vector (see :class:`SlotLayout`). The run-level scalars and each
    slot's stage and scalars are exactly the flat network's (``observation.features``);
    what the flat vector says by index (the installed blueprint) is said here by features."""
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
        _log_ratio(obs.seed_params, host),
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
                _log_ratio(params[i][j], host),
                1.0 if identity[j] else 0.0,
                1.0 if branch[j] else 0.0,
                min(blending[j], 30) / 10.0,
            ]
    return out


def slot_feature_tensor(
    observations: Sequence[Observation], space: ActionSpace, history_length: int, topology: str
) -> torch.Tensor:
    return torch.tensor(
        [slot_features(o, space, history_length, topology) for o in observations],
        dtype=torch.float32,
    )
