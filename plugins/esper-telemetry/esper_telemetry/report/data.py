"""A run directory's events, read once and indexed the way the report needs them."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from attrs import define, field

from esper_core.errors import RunDirError
from esper_core.run.event_fields import read_checked_events
from esper_core.run.ledger import HostGrowthLedger, SeedLedger
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GovernorRollback,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStarted,
    PolicyEvaluation,
    PolicyUpdate,
    RunFinished,
    RunStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)
from esper_telemetry.files import EVENTS_FILE

Key = tuple[int, int]  # (env, episode)
# The events drawn as markers: the seeds', the host's own growth's and rollbacks.
LIFECYCLE = (
    SeedGerminated,
    SeedFossilized,
    SeedPruned,
    GovernorRollback,
    HostGrowthStarted,
    HostGrowthFossilized,
    HostGrowthPruned,
)


@define
class RunData:
    run_dir: Path
    events: list[Event]
    started: RunStarted | None = None
    finished: RunFinished | None = None
    epochs: dict[Key, list[EpochCompleted]] = field(factory=dict)
    episodes: list[EpisodeFinished] = field(factory=list)
    lifecycle: dict[Key, list[Event]] = field(factory=dict)
    updates: list[PolicyUpdate] = field(factory=list)
    evaluations: list[PolicyEvaluation] = field(factory=list)
    ledger: SeedLedger = field(factory=SeedLedger)
    growth_ledger: HostGrowthLedger = field(factory=HostGrowthLedger)

    @property
    def name(self) -> str:
        return self.started.run_name if self.started else self.run_dir.name

    @property
    def mode(self) -> str:
        return self.started.mode if self.started else "run"

    @property
    def outer_name(self) -> str:
        """What an episode index counts: episodes of ``esper run`` or PPO updates of ``esper train``."""
        return "update" if self.mode == "train" else "episode"

    @property
    def max_epochs(self) -> int:
        if self.started is not None:
            return self.started.max_epochs
        return max(e.epoch for rows in self.epochs.values() for e in rows)

    @property
    def slot_ids(self) -> list[str]:
        if self.started is not None and self.started.slot_ids:
            return list(self.started.slot_ids)
        seen: dict[str, None] = {}
        for rows in self.epochs.values():
            for e in rows:
                for s in e.slots:
                    seen.setdefault(s.slot_id, None)
        return list(seen)

    @property
    def title(self) -> str:
        if self.started is None:
            return self.name
        s = self.started
        return f"{self.name}: {s.task} / {s.policy} / {s.reward}"

    def env_episodes(self) -> list[Key]:
        """(env, episode) pairs in run order: episode by episode, env by env."""
        return sorted(self.epochs, key=lambda k: (k[1], k[0]))

    def global_epoch(self, episode: int, epoch: int) -> int:
        return episode * self.max_epochs + epoch

    def last_epoch(self, key: Key) -> int:
        rows = self.epochs.get(key)
        return rows[-1].epoch if rows else 0


def load_run(run_dir: Path) -> RunData:
    """Read ``RUN_DIR/events.jsonl``; every problem is a one-line :class:`EsperError`."""
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such run directory")
    if not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir} is not a directory; pass the run directory (it holds {EVENTS_FILE})"
        )
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        raise RunDirError(
            f"{run_dir} has no {EVENTS_FILE}: it is not an Esper run directory, or the run was made "
            "without the jsonl telemetry backend (it is on by default; --telemetry jsonl adds it)"
        )
    try:
        events = read_checked_events(path)
    except UnicodeDecodeError:
        raise RunDirError(f"{path} is not a text file of JSON lines") from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    data = index_events(run_dir, events)
    if not data.epochs:
        failed = data.finished is not None and data.finished.status == "failed"
        why = f"; the run failed: {data.finished.error}" if failed and data.finished.error else ""
        raise RunDirError(f"{path} holds no completed epoch: nothing to report{why}")
    return data


def index_events(run_dir: Path, events: list[Event]) -> RunData:
    data = RunData(run_dir=run_dir, events=events)
    epochs: dict[Key, list[EpochCompleted]] = defaultdict(list)
    lifecycle: dict[Key, list[Event]] = defaultdict(list)
    for event in events:
        if isinstance(event, RunStarted):
            data.started = data.started or event
        elif isinstance(event, RunFinished):
            data.finished = event
        elif isinstance(event, EpochCompleted):
            epochs[(event.env, event.episode)].append(event)
        elif isinstance(event, EpisodeFinished):
            data.episodes.append(event)
        elif isinstance(event, PolicyUpdate):
            data.updates.append(event)
        elif isinstance(event, PolicyEvaluation):
            data.evaluations.append(event)
        elif isinstance(event, LIFECYCLE):
            lifecycle[(event.env, event.episode)].append(event)
    data.epochs = {k: sorted(v, key=lambda e: e.epoch) for k, v in epochs.items()}
    data.lifecycle = dict(lifecycle)
    data.ledger.consume(events)
    data.growth_ledger.consume(events)
    return data
