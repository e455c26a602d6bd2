"""The range of every number and name ``esper report`` reads from a run's events.jsonl.

:func:`~esper_core.run.telemetry.read_events` checks an event's types only, so a line
edited to hold an epoch of -5 or 10**9, a negative parameter count, a stage ``"x"``, a
whole number written as ``1e308`` (a 300-digit integer once structured) or a host
growth that never started was drawn without a word. This module bounds them the way
:mod:`~esper_core.run.checkpoint_fields` bounds a checkpoint's: each is refused in one
line naming the file, the line and the field. events.jsonl carries no digest, so a
forgery inside these ranges still passes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs

from esper_core.errors import RunDirError
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import (
    EnvEvent,
    Event,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStageChanged,
    HostGrowthStarted,
    RunStarted,
    iter_event_lines,
)

# Whole numbers a run writes >= 0: indices, counts, epochs, parameters and FLOPs.
NON_NEGATIVE = frozenset(
    {
        "env",
        "episode",
        "epoch",
        "started_epoch",
        "germinated_epoch",
        "snapshot_epoch",
        "tempo",
        "params",
        "params_before",
        "params_after",
        "host_params",
        "seed_params",
        "train_flops",
        "n_envs",
        "episodes",
        "max_epochs",
        "episodes_per_update",
    }
)
# Epochs of an episode: at most the run's max_epochs (once run_started has said it).
EPOCHS = frozenset({"epoch", "started_epoch", "germinated_epoch", "snapshot_epoch"})
# An epoch's accuracies are percentages; its losses (cross-entropy) are never negative
# (a diverged run's may be inf or NaN, so no upper bound).
PERCENTAGES = frozenset({"train_acc", "val_acc", "test_acc"})
LOSSES = frozenset({"train_loss", "val_loss", "test_loss"})
STAGE_FIELDS = ("stage", "from_stage", "to_stage")
STAGES = tuple(stage.value for stage in Stage)
HOST_FOLLOW_UPS = (HostGrowthStageChanged, HostGrowthFossilized, HostGrowthPruned)


class EventFieldError(RunDirError):
    """An event whose values have the right types but cannot have been written by a run."""


def read_checked_events(path: Path) -> list[Event]:
    """Read ``path`` as :func:`~esper_core.run.telemetry.read_events` does, and refuse the
    first event whose fields lie outside what a run writes."""
    events: list[Event] = []
    max_epochs: int | None = None
    started: dict[tuple[int, int, str], HostGrowthStarted] = {}
    pruned: set[tuple[int, int, str]] = set()
    for number, raw, event in iter_event_lines(path):
        where = f"{path}:{number}"
        check_fields(raw, event, where, max_epochs)
        if isinstance(event, RunStarted) and max_epochs is None:
            max_epochs = event.max_epochs
        if isinstance(event, HostGrowthStarted):
            key = (event.env, event.episode, event.growth_id)
            operator, _, index = event.growth_id.partition("-")
            if operator != event.operator or not index.isdigit():
                raise _damaged(
                    where, event, "growth_id", event.growth_id, f"'{event.operator}-K', K >= 0"
                )
            # An id is never reused within an episode; only a growth pruned (a rollback)
            # could conceivably be started again.
            if key in started and key not in pruned:
                raise _damaged(
                    where, event, "growth_id", event.growth_id, "an id not started before"
                )
            started[key] = event
            pruned.discard(key)
        elif isinstance(event, HOST_FOLLOW_UPS):
            start = started.get((event.env, event.episode, event.growth_id))
            if start is None:
                raise _damaged(
                    where,
                    event,
                    "growth_id",
                    event.growth_id,
                    "the id of a host growth started before it in that env and episode",
                )
            if event.operator != start.operator:
                raise _damaged(
                    where, event, "operator", event.operator, repr(start.operator) + ", its start's"
                )
            if not isinstance(event, HostGrowthStageChanged) and (
                event.started_epoch != start.epoch
            ):
                raise _damaged(
                    where,
                    event,
                    "started_epoch",
                    event.started_epoch,
                    f"{start.epoch}, its start's",
                )
            if isinstance(event, HostGrowthPruned):
                pruned.add((event.env, event.episode, event.growth_id))
        events.append(event)
    return events


def check_fields(raw: dict[str, Any], event: Event, where: str, max_epochs: int | None) -> None:
    """Refuse one event (read from ``raw`` at ``where``) whose fields lie outside what a
    run writes; ``max_epochs``: the run's, once its run_started was read. Every reader of
    events.jsonl (``esper report``, ``esper compare``'s growth paths) checks here."""
    for spec in attrs.fields(type(event)):
        name, value = spec.name, getattr(event, spec.name)
        if spec.type in (int, "int"):
            # JSON from a run writes a whole number as one ("5", never "5.0" or "1e308").
            if isinstance(raw.get(name), float):
                raise _damaged(where, event, name, raw[name], "a whole number")
            if name in NON_NEGATIVE and value < 0:
                raise _damaged(where, event, name, value, "a whole number >= 0")
            if name in EPOCHS and max_epochs is not None and value > max_epochs:
                raise _damaged(
                    where, event, name, value, f"a whole number in 0..{max_epochs} (max_epochs)"
                )
        elif name in PERCENTAGES and value is not None and not 0 <= value <= 100:
            raise _damaged(where, event, name, value, "a percentage in [0, 100]")
        elif name in LOSSES and value is not None and value < 0:
            raise _damaged(where, event, name, value, "a loss >= 0")
        elif name == "time" and not (math.isfinite(value) and value >= 0):
            raise _damaged(where, event, name, value, "a finite time >= 0")
        elif name == "curve" and value not in _curves():
            raise _damaged(
                where, event, name, value, "an alpha curve (" + ", ".join(_curves()) + ")"
            )
        elif name in STAGE_FIELDS and isinstance(event, EnvEvent) and value not in STAGES:
            raise _damaged(
                where, event, name, value, "a lifecycle stage (" + ", ".join(STAGES) + ")"
            )


def _curves() -> tuple[str, ...]:
    # Imported here: the lifecycle's alpha module needs torch, and the CLI's listings that
    # import this module must stay torch-free.
    from esper_core.lifecycle.alpha import CURVES

    return CURVES


def _damaged(where: str, event: Event, field: str, value: Any, expected: str) -> EventFieldError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return EventFieldError(
        f"{where}: {event.kind}.{field} = {shown}, but a run writes {expected}: the events file "
        "is damaged (edited or written by another tool); use an intact copy (report from it, "
        "or put it back in the run directory), or run again"
    )
