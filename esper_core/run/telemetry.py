"""Typed, schema-versioned telemetry events and the hub that fans them out.

Events produced during an epoch are built from values the epoch already synced to
the host once, so emitting them never touches a device. Each backend receives every
event; a backend that raises is disabled with a warning naming it, and the others
carry on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from attrs import field, frozen

from esper_core.converter import converter, structure
from esper_core.errors import ConfigError, EsperError

SCHEMA_VERSION = 1
log = logging.getLogger("esper.telemetry")


@frozen
class Event:
    """Base class; ``kind`` is the tag written to events.jsonl."""

    kind: ClassVar[str] = "event"
    time: float = field(factory=time.time, kw_only=True)


@frozen
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    run_name: str
    run_dir: str | None
    mode: str  # "run" or "train"
    task: str
    policy: str
    reward: str
    executor: str
    n_envs: int
    episodes: int
    max_epochs: int
    slot_ids: list[str]
    host_params: int
    config: dict[str, Any]
    esper_version: str


@frozen
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    status: str  # "completed", "interrupted", "failed"
    wall_time: float
    summary: dict[str, Any] = field(factory=dict)


@frozen
class SlotSummary:
    """The per-slot part of :class:`EpochCompleted`."""

    slot_id: str
    stage: str
    seed_id: str | None
    blueprint: str | None
    alpha: float
    contribution: float | None
    seed_params: int


@frozen
class EpochCompleted(Event):
    kind: ClassVar[str] = "epoch_completed"
    env: int
    episode: int
    epoch: int
    train_loss: float
    train_acc: float
    val_loss: float
    val_acc: float
    test_loss: float | None
    test_acc: float | None
    action: str
    action_refused: str | None
    reward: float
    reward_components: dict[str, float]
    host_params: int
    seed_params: int
    slots: list[SlotSummary]
    epoch_time: float
    update: int | None = None  # PPO update this epoch belongs to, when training


@frozen
class SeedGerminated(Event):
    kind: ClassVar[str] = "seed_germinated"
    env: int
    episode: int
    epoch: int
    slot_id: str
    seed_id: str
    blueprint: str
    style: str
    tempo: int
    params: int


@frozen
class StageChanged(Event):
    kind: ClassVar[str] = "stage_changed"
    env: int
    episode: int
    epoch: int
    slot_id: str
    seed_id: str | None
    from_stage: str
    to_stage: str


@frozen
class GateEvaluated(Event):
    kind: ClassVar[str] = "gate_evaluated"
    env: int
    episode: int
    epoch: int
    slot_id: str
    seed_id: str | None
    gate: str
    passed: bool
    failed: list[str]


@frozen
class SeedFossilized(Event):
    kind: ClassVar[str] = "seed_fossilized"
    env: int
    episode: int
    epoch: int
    slot_id: str
    seed_id: str
    blueprint: str
    contribution: float | None
    params: int
    germinated_epoch: int


@frozen
class SeedPruned(Event):
    kind: ClassVar[str] = "seed_pruned"
    env: int
    episode: int
    epoch: int
    slot_id: str
    seed_id: str
    blueprint: str
    stage: str  # the stage it was pruned from
    contribution: float | None
    params: int
    germinated_epoch: int
    reason: str  # "policy" or "rollback"


@frozen
class GovernorRollback(Event):
    kind: ClassVar[str] = "governor_rollback"
    env: int
    episode: int
    epoch: int
    reason: str
    val_loss: float
    penalty: float
    snapshot_epoch: int


@frozen
class EpisodeFinished(Event):
    kind: ClassVar[str] = "episode_finished"
    env: int
    episode: int
    epochs: int
    final_val_acc: float
    final_test_acc: float | None
    final_test_loss: float | None
    total_reward: float
    reward_components: dict[str, float]
    host_params: int
    params_added: int
    seeds_germinated: int
    seeds_fossilized: int
    seeds_pruned: int
    rollbacks: int
    refused_actions: int
    seed: int
    update: int | None = None


@frozen
class PolicyUpdate(Event):
    kind: ClassVar[str] = "policy_update"
    update: int
    diagnostics: dict[str, float]


@frozen
class PolicyEvaluation(Event):
    """Episodes on the fixed evaluation seeds of a training run: the trained policy acting
    greedily after ``update`` updates, or a reference policy (``update`` is None)."""

    kind: ClassVar[str] = "policy_evaluation"
    update: int | None
    policy: str  # "trained" or the name of a reference policy (wait, heuristic)
    seeds: list[int]
    final_val_acc: list[float]
    final_test_acc: list[float | None]
    total_reward: list[float]
    seeds_fossilized: list[int]
    params_added: list[int]


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        RunFinished,
        EpochCompleted,
        SeedGerminated,
        StageChanged,
        GateEvaluated,
        SeedFossilized,
        SeedPruned,
        GovernorRollback,
        EpisodeFinished,
        PolicyUpdate,
        PolicyEvaluation,
    )
}


class SchemaError(EsperError):
    """An events file written by a different (newer) schema, or an unknown event."""


def event_to_dict(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = converter.unstructure(event)
    return {"schema": SCHEMA_VERSION, "kind": event.kind, **data}


def event_from_dict(data: dict[str, Any], where: str = "event") -> Event:
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: not an Esper telemetry event (expected a JSON object)")
    data = dict(data)
    schema = data.pop("schema", None)
    kind = data.pop("kind", None)
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise SchemaError(
            f"{where}: not an Esper telemetry event (it has no integer 'schema' field)"
        )
    if schema > SCHEMA_VERSION:
        raise SchemaError(
            f"{where}: written by telemetry schema {schema}, this Esper reads schema "
            f"{SCHEMA_VERSION} or older; upgrade Esper to read it"
        )
    cls = EVENT_TYPES.get(str(kind))
    if cls is None:
        raise SchemaError(f"{where}: unknown event kind {kind!r}")
    try:
        return structure(data, cls)
    except ConfigError as exc:
        raise SchemaError(f"{where}: invalid {kind} event: {exc}") from None


def dumps(event: Event) -> str:
    return json.dumps(event_to_dict(event), separators=(",", ":"), allow_nan=True)


def read_events(path: Any) -> list[Event]:
    """Read an events.jsonl file back into typed events."""
    events = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}:{number}: not valid JSON ({exc})") from None
            events.append(event_from_dict(data, f"{path}:{number}"))
    return events


# ---------------------------------------------------------------- backends and hub


class Hub:
    """Fans events out to the enabled backends (each a
    :class:`~esper_core.components.telemetry.TelemetryBackend`); isolates backend failures.

    A backend that raises from any call (``handle``, ``flush``, ``close``,
    ``state_dict``, ``load_state_dict``) is disabled with a warning naming it; the run
    and the other backends carry on. A disabled backend still gets one ``close()`` (its
    errors ignored) so it can release its files and restore the terminal.
    """

    _MISSING = object()

    def __init__(self, backends: Iterable[Any] = ()) -> None:
        self.backends: list[Any] = list(backends)
        self.disabled: dict[str, str] = {}

    def _call(self, backend: Any, method: str, *args: Any) -> Any:
        """``backend.method(*args)``; ``_MISSING`` if it has no such method or it raised."""
        fn = getattr(backend, method, None)
        if fn is None:
            return self._MISSING
        try:
            return fn(*args)
        except Exception as exc:  # a broken backend must not end a training run
            name = getattr(backend, "name", type(backend).__name__)
            self.disabled[name] = f"{type(exc).__name__}: {exc}"
            self.backends.remove(backend)
            log.warning(
                "telemetry backend %r disabled after it raised %s: %s",
                name,
                type(exc).__name__,
                exc,
            )
            closer = getattr(backend, "close", None)
            if method != "close" and closer is not None:
                with contextlib.suppress(Exception):  # already reported above
                    closer()
            return self._MISSING

    def emit(self, events: Sequence[Event]) -> None:
        if not events:
            return
        for backend in list(self.backends):
            self._call(backend, "handle", events)

    def flush(self) -> None:
        for backend in list(self.backends):
            self._call(backend, "flush")

    def close(self) -> None:
        for backend in list(self.backends):
            self._call(backend, "close")

    def state_dict(self) -> dict[str, Any]:
        """Resume positions of the backends that have them (e.g. file offsets)."""
        out: dict[str, Any] = {}
        for backend in list(self.backends):
            state = self._call(backend, "state_dict")
            if state is not self._MISSING:
                out[backend.name] = state
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for backend in list(self.backends):
            if backend.name in state:
                self._call(backend, "load_state_dict", state[backend.name])
