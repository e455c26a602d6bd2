"""Where each part of a ``slots`` observation sits in its flat vector, for each schema.

A step travels as ONE flat vector ``[global | S x slot | S x K x candidate]``
(:meth:`SlotLayout.split` takes it apart), so the rollout buffer and the learner store
and index it like the flat network's features. ``S`` and ``K`` come from the run's
(possibly padded) action space; the row widths come from the schema version alone, and
are what a checkpoint records (:func:`schema`).

Schema 2 pads: an observation of a host with fewer slots or blueprints than the run's
space fills the first rows and leaves the rest absent. Its slot and candidate rows end
with a presence flag (1: a real row, 0: padding, every other column 0 too), which the
network's pooling and the normaliser read; schema 1 has no flag and no padding.
"""

from __future__ import annotations

import torch
from attrs import frozen

from esper_core.components.blueprint import TOPOLOGIES
from esper_core.lifecycle.stages import STAGES

# Bump when the meaning or order of a feature changes; compat.py refuses an unknown one.
SCHEMA_VERSION = 2
KNOWN_VERSIONS = (1, 2)
RUN_SCALARS = 8  # the flat features' leading run-level scalars (epoch, losses, accuracies, ...)
SLOT_SCALARS = 9  # the flat features' per-slot scalars after the stage one-hot
# Schema 1's run-level extras (seed parameters, training FLOPs ratio, topology one-hot),
# its per-slot extras (the installed blueprint: present, identity, branch; the slot's
# relative depth) and its candidate row (parameter ratio, identity, branch, epochs
# before blending).
EXTRA_GLOBAL = 2 + len(TOPOLOGIES)
EXTRA_SLOT = 4
CANDIDATE = 4
SLOT_DIM = len(STAGES) + SLOT_SCALARS + EXTRA_SLOT
# What schema 2 appends: learning-curve slope, train/validation gap, budget left; per
# slot the expansion score (log ratio, known); the presence flag of every row.
UNIT_FREE_GLOBAL = 3
EXPANSION_SLOT = 2
PRESENCE = 1


def global_dim(history_length: int, version: int = SCHEMA_VERSION) -> int:
    extra = UNIT_FREE_GLOBAL if version >= 2 else 0
    return RUN_SCALARS + 2 * history_length + EXTRA_GLOBAL + extra


def slot_dim(version: int = SCHEMA_VERSION) -> int:
    return SLOT_DIM + (EXPANSION_SLOT + PRESENCE if version >= 2 else 0)


def candidate_dim(version: int = SCHEMA_VERSION) -> int:
    return CANDIDATE + (PRESENCE if version >= 2 else 0)


def schema(history_length: int, version: int = SCHEMA_VERSION) -> dict[str, int]:
    """What a checkpoint records of the observation it was trained on."""
    return {
        "version": version,
        "history_length": history_length,
        "global": global_dim(history_length, version),
        "slot": slot_dim(version),
        "candidate": candidate_dim(version),
    }


@frozen
class SlotLayout:
    """The flat vector of one step, for ``n_slots`` slots and ``n_blueprints`` blueprints
    (the run's space: the widest host's under padding) in schema ``version``."""

    n_slots: int
    n_blueprints: int
    history_length: int
    version: int = SCHEMA_VERSION

    @property
    def global_dim(self) -> int:
        return global_dim(self.history_length, self.version)

    @property
    def slot_dim(self) -> int:
        return slot_dim(self.version)

    @property
    def candidate_dim(self) -> int:
        return candidate_dim(self.version)

    @property
    def has_presence(self) -> bool:
        """Whether rows end with a presence flag (schema 2 on): padding is possible."""
        return self.version >= 2

    @property
    def total(self) -> int:
        per_slot = self.slot_dim + self.n_blueprints * self.candidate_dim
        return self.global_dim + self.n_slots * per_slot

    def split(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[..., total]`` -> global ``[..., G]``, slots ``[..., S, F]``, candidates
        ``[..., S, K, D]``."""
        lead = flat.shape[:-1]
        s, k = self.n_slots, self.n_blueprints
        g_end = self.global_dim
        s_end = g_end + s * self.slot_dim
        return (
            flat[..., :g_end],
            flat[..., g_end:s_end].reshape(*lead, s, self.slot_dim),
            flat[..., s_end:].reshape(*lead, s, k, self.candidate_dim),
        )

    def join(
        self, run: torch.Tensor, slots: torch.Tensor, candidates: torch.Tensor
    ) -> torch.Tensor:
        """The inverse of :meth:`split`."""
        lead = run.shape[:-1]
        return torch.cat([run, slots.reshape(*lead, -1), candidates.reshape(*lead, -1)], dim=-1)
