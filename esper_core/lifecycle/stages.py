"""Seed lifecycle stages (DOMAIN §2). What each stage allows lives in :mod:`esper_core.lifecycle.rules`;
the quality gates in :mod:`esper_core.lifecycle.gates`."""

from __future__ import annotations

import enum


class Stage(enum.StrEnum):
    DORMANT = "DORMANT"
    GERMINATED = "GERMINATED"
    TRAINING = "TRAINING"
    BLENDING = "BLENDING"
    HOLDING = "HOLDING"
    FOSSILIZED = "FOSSILIZED"
    PRUNED = "PRUNED"
    EMBARGOED = "EMBARGOED"
    RESETTING = "RESETTING"


STAGES: tuple[Stage, ...] = tuple(Stage)
