"""Seed fates from telemetry events: the one place that turns events into seed records.

Used by the run's summary (summary.json) and by ``esper report`` (report.md), so both
describe the same seeds in the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attrs import define, field

from esper_core.converter import converter
from esper_core.run.telemetry import Event, SeedFossilized, SeedGerminated, SeedPruned, StageChanged


@define
class SeedRecord:
    seed_id: str
    env: int
    episode: int
    slot_id: str
    blueprint: str
    style: str
    params: int
    germinated_epoch: int
    ended_epoch: int | None = None
    fate: str = "live"  # live, fossilized, pruned, pruned_by_rollback
    last_stage: str = "GERMINATED"
    contribution: float | None = None
    gain: float | None = None  # points over the accuracy before it blended (see SeedFossilized)

    @property
    def lifespan(self) -> int | None:
        return None if self.ended_epoch is None else self.ended_epoch - self.germinated_epoch


@define
class SeedLedger:
    records: dict[str, SeedRecord] = field(factory=dict)

    @staticmethod
    def key(env: int, episode: int, seed_id: str) -> str:
        return f"{env}/{episode}/{seed_id}"

    def consume(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, SeedGerminated):
                self.records[self.key(event.env, event.episode, event.seed_id)] = SeedRecord(
                    seed_id=event.seed_id,
                    env=event.env,
                    episode=event.episode,
                    slot_id=event.slot_id,
                    blueprint=event.blueprint,
                    style=event.style,
                    params=event.params,
                    germinated_epoch=event.epoch,
                )
            elif isinstance(event, StageChanged) and event.seed_id:
                record = self.records.get(self.key(event.env, event.episode, event.seed_id))
                if record is not None and record.fate == "live":
                    record.last_stage = event.to_stage
            elif isinstance(event, SeedFossilized | SeedPruned):
                record = self.records.get(self.key(event.env, event.episode, event.seed_id))
                if record is None:
                    continue
                record.ended_epoch = event.epoch
                record.contribution = event.contribution
                record.gain = event.gain
                record.params = event.params
                if isinstance(event, SeedFossilized):
                    record.fate = "fossilized"
                else:
                    record.fate = "pruned_by_rollback" if event.reason == "rollback" else "pruned"

    def rows(self) -> list[SeedRecord]:
        return sorted(
            self.records.values(), key=lambda r: (r.episode, r.env, r.germinated_epoch, r.seed_id)
        )

    def state_dict(self) -> list[dict[str, Any]]:
        return [converter.unstructure(r) for r in self.rows()]

    def load_state_dict(self, rows: list[dict[str, Any]]) -> None:
        self.records = {}
        for row in rows:
            record = converter.structure(row, SeedRecord)
            self.records[self.key(record.env, record.episode, record.seed_id)] = record
