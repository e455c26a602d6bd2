"""Seed and host-growth fates from telemetry events: the one place that turns events
into seed records (:class:`SeedLedger`) and host growth records (:class:`HostGrowthLedger`).

Used by the run's summary (summary.json) and by ``esper report`` (report.md), so both
describe the same seeds and growths in the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attrs import define, field

from esper_core.converter import converter
from esper_core.run.telemetry import (
    Event,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStageChanged,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    StageChanged,
)


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


@define
class HostGrowthRecord:
    """One growth of the host itself (:class:`~esper_core.run.telemetry.HostGrowthStarted`)
    and what became of it."""

    growth_id: str
    env: int
    episode: int
    operator: str
    plan: str
    widths_before: dict[str, int]
    widths_after: dict[str, int]
    params_before: int
    params_after: int
    started_epoch: int
    ended_epoch: int | None = None
    fate: str = "live"  # live, fossilized, pruned, pruned_by_rollback
    last_stage: str = "BLENDING"

    def factor(self) -> float | None:
        """The one factor every widened dimension grew by, or None when they differ."""
        ratios = {
            round(self.widths_after[k] / v, 3)
            for k, v in self.widths_before.items()
            if v and self.widths_after.get(k, v) != v
        }
        return ratios.pop() if len(ratios) == 1 else None


@define
class HostGrowthLedger:
    records: dict[str, HostGrowthRecord] = field(factory=dict)

    @staticmethod
    def key(env: int, episode: int, growth_id: str) -> str:
        return f"{env}/{episode}/{growth_id}"

    def consume(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, HostGrowthStarted):
                self.records[self.key(event.env, event.episode, event.growth_id)] = (
                    HostGrowthRecord(
                        growth_id=event.growth_id,
                        env=event.env,
                        episode=event.episode,
                        operator=event.operator,
                        plan=event.plan,
                        widths_before=dict(event.widths_before),
                        widths_after=dict(event.widths_after),
                        params_before=event.params_before,
                        params_after=event.params_after,
                        started_epoch=event.epoch,
                    )
                )
                continue
            if not isinstance(
                event, HostGrowthStageChanged | HostGrowthFossilized | HostGrowthPruned
            ):
                continue
            record = self.records.get(self.key(event.env, event.episode, event.growth_id))
            if record is None:
                continue
            if isinstance(event, HostGrowthStageChanged):
                record.last_stage = event.to_stage
            else:
                record.ended_epoch = event.epoch
                if isinstance(event, HostGrowthFossilized):
                    record.fate = "fossilized"
                    record.params_after = event.params_after
                else:
                    rollback = event.reason == "rollback"
                    record.fate = "pruned_by_rollback" if rollback else "pruned"

    def rows(self) -> list[HostGrowthRecord]:
        return sorted(
            self.records.values(),
            key=lambda r: (r.episode, r.env, r.started_epoch, r.growth_id),
        )

    def state_dict(self) -> list[dict[str, Any]]:
        return [converter.unstructure(r) for r in self.rows()]

    def load_state_dict(self, rows: list[dict[str, Any]]) -> None:
        self.records = {}
        for row in rows:
            record = converter.structure(row, HostGrowthRecord)
            self.records[self.key(record.env, record.episode, record.growth_id)] = record
