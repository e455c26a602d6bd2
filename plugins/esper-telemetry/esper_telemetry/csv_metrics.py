"""``telemetry.csv``: one row per env epoch in ``RUN_DIR/metrics.csv``.

Columns: env, episode, update, epoch, losses and accuracies, the action, the reward
and each of its components (``reward_<name>``), parameter counts, the epoch's wall
time and, per slot, its stage, alpha, blueprint and contribution. The reward family's
component names are only known from its first breakdown, so the header is fixed from
the first ``EpochCompleted``; a component the family did not report then (e.g. the
governor's rollback penalty) lands, by name, in the JSON column ``reward_other``
instead of being dropped.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import define

from esper_core import TelemetryContext, hookimpl
from esper_core.converter import options_field
from esper_core.run.telemetry import EpochCompleted, Event
from esper_telemetry.files import AppendFile

METRICS_FILE = "metrics.csv"
LEADING = [
    "env",
    "episode",
    "update",
    "epoch",
    "train_loss",
    "train_acc",
    "val_loss",
    "val_acc",
    "test_loss",
    "test_acc",
    "action",
    "action_refused",
    "reward",
]
TRAILING = ["reward_other", "host_params", "seed_params", "epoch_time"]
SLOT_FIELDS = ("stage", "alpha", "blueprint", "contribution")


@define
class CsvOptions:
    fsync: bool = options_field(False, doc="fsync metrics.csv at every epoch.")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan / inf, which float() reads back
    return value


class CsvBackend:
    """Appends a row per ``EpochCompleted``; the header comes from the first one."""

    name: ClassVar[str] = "csv"
    description: ClassVar[str] = (
        "metrics.csv: a row per env epoch (losses, accuracies, reward components, slots)"
    )
    Options: ClassVar[type] = CsvOptions

    def __init__(self, options: CsvOptions, context: TelemetryContext) -> None:
        self.options = options
        self.file = AppendFile(context.path(METRICS_FILE, self.name), fsync=options.fsync)
        self.components: list[str] | None = None
        self.slots: list[str] = []

    @property
    def columns(self) -> list[str]:
        components = [f"reward_{name}" for name in self.components or []]
        slots = [f"slot_{slot}_{part}" for slot in self.slots for part in SLOT_FIELDS]
        return LEADING + components + TRAILING + slots

    @staticmethod
    def _line(values: list[Any]) -> str:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow([_cell(v) for v in values])
        return buffer.getvalue()

    def _row(self, e: EpochCompleted) -> list[Any]:
        assert self.components is not None
        other = {k: v for k, v in e.reward_components.items() if k not in self.components}
        slots = {s.slot_id: s for s in e.slots}
        row: list[Any] = [
            e.env,
            e.episode,
            e.update,
            e.epoch,
            e.train_loss,
            e.train_acc,
            e.val_loss,
            e.val_acc,
            e.test_loss,
            e.test_acc,
            e.action,
            e.action_refused,
            e.reward,
        ]
        row += [e.reward_components.get(name) for name in self.components]
        row += [
            json.dumps(other, sort_keys=True) if other else None,
            e.host_params,
            e.seed_params,
            e.epoch_time,
        ]
        for slot_id in self.slots:
            s = slots.get(slot_id)
            row += (
                [None] * len(SLOT_FIELDS)
                if s is None
                else [s.stage, s.alpha, s.blueprint, s.contribution]
            )
        return row

    def handle(self, events: Sequence[Event]) -> None:
        for event in events:
            if not isinstance(event, EpochCompleted):
                continue
            if self.components is None:
                self.components = list(event.reward_components)
                self.slots = [s.slot_id for s in event.slots]
                self.file.write(self._line(self.columns))
            self.file.write(self._line(self._row(event)))

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.file.state(),
            "components": self.components,
            "slots": list(self.slots),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.file.resume(state)
        components = state.get("components")
        self.components = None if components is None else list(components)
        self.slots = list(state.get("slots") or [])


@hookimpl
def esper_register_telemetry(register: Any) -> None:
    register(CsvBackend)
