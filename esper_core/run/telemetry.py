"""Typed, schema-versioned telemetry events (the hub that fans them out to the
backends is :mod:`esper_core.run.hub`).

Events produced during an epoch are built from values the epoch already synced to
the host once, so emitting them never touches a device.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from attrs import field, frozen

from esper_core.converter import converter, structure
from esper_core.errors import ConfigError, EsperError

# 2: EpochCompleted.reason (why the policy chose the epoch's action). 3: RunFinished.error
# (why a run failed). 4: the host_growth_* events (the host itself grew, not a seed) and
# EpisodeFinished.host_params_added, which params_added now includes. 5:
# RunStarted.episodes_per_update. 6: EpisodeFinished.pair and PolicyEvaluation.pairs (a
# mixed training run's host/task pair). A reader reads every schema up to its own; an
# older file's missing fields take their defaults.
SCHEMA_VERSION = 6


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
    # Rollout episodes of every env per PPO update (``esper train``; 1 for ``esper run``):
    # progress can then say which episode of the update is running, not repeat the update.
    episodes_per_update: int = 1


@frozen
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    status: str  # "completed", "interrupted", "failed"
    wall_time: float
    summary: dict[str, Any] = field(factory=dict)
    # A failed run's reason, the line the CLI printed: summary.json is written only by a
    # finished run, so this is the run directory's record of what went wrong.
    error: str = ""


@frozen
class EnvEvent(Event):
    """An event of one env at one epoch of one episode. attrs puts inherited fields
    first, so every subclass writes ``time, env, episode, epoch`` before its own."""

    env: int
    episode: int
    epoch: int


@frozen(slots=False)
class EpochScores:
    """The losses and accuracies of one epoch, shared by :class:`EpochCompleted` and the
    env's ``EpochMetrics``. Not slotted: a mixin beside a slotted event base must not
    lay out slots of its own."""

    train_loss: float
    train_acc: float
    val_loss: float
    val_acc: float
    test_loss: float | None
    test_acc: float | None


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
class EpochCompleted(EpochScores, EnvEvent):
    """Written flat: ``time, env, episode, epoch``, the :class:`EpochScores`, then these.
    (``EpochScores`` comes first among the bases so that it comes after ``EnvEvent`` in
    the field order.)"""

    kind: ClassVar[str] = "epoch_completed"
    action: str  # in words, the host's growth named ("WIDEN host x2": esper_core.env.decision)
    action_refused: str | None
    reward: float
    reward_components: dict[str, float]
    host_params: int
    seed_params: int
    slots: list[SlotSummary]
    epoch_time: float
    update: int | None = None  # PPO update this epoch belongs to, when training
    train_flops: int = 0  # training FLOPs of the episode so far (forward + backward)
    reason: str = ""  # why the policy chose ``action`` ("": none given, or schema 1)


@frozen
class SeedGerminated(EnvEvent):
    kind: ClassVar[str] = "seed_germinated"
    slot_id: str
    seed_id: str
    blueprint: str
    style: str
    tempo: int
    params: int


@frozen
class StageChanged(EnvEvent):
    kind: ClassVar[str] = "stage_changed"
    slot_id: str
    seed_id: str | None
    from_stage: str
    to_stage: str


@frozen
class GateEvaluated(EnvEvent):
    kind: ClassVar[str] = "gate_evaluated"
    slot_id: str
    seed_id: str | None
    gate: str
    passed: bool
    failed: list[str]


@frozen
class SeedFossilized(EnvEvent):
    kind: ClassVar[str] = "seed_fossilized"
    slot_id: str
    seed_id: str
    blueprint: str
    contribution: float | None
    params: int
    germinated_epoch: int
    # Validation accuracy now minus just before the seed first touched the output
    # (points); None: it never blended (or was installed at birth).
    gain: float | None = None


@frozen
class SeedPruned(EnvEvent):
    kind: ClassVar[str] = "seed_pruned"
    slot_id: str
    seed_id: str
    blueprint: str
    stage: str  # the stage it was pruned from
    contribution: float | None
    params: int
    germinated_epoch: int
    reason: str  # "policy", "rollback" or "non_finite" (its output held an inf or NaN)
    gain: float | None = None  # as in SeedFossilized


@frozen
class HostGrowthStarted(EnvEvent):
    """The host itself started to grow (an operator such as ``width``, not a seed): born
    behind a mask at alpha 0, ramped in over ``tempo`` epochs, then folded into the host
    (:class:`HostGrowthFossilized`) or removed (:class:`HostGrowthPruned`). ``epoch``: the
    epochs trained before it, as a germination's."""

    kind: ClassVar[str] = "host_growth_started"
    growth_id: str  # the operator and its index among the episode's host growths: "width-0"
    operator: str  # "width" or "depth"
    plan: str  # in words: "stage 0 -> 64, stage 1 -> 128", "d_model 64 -> 128", "n_layer 2 -> 4, stack"
    # Every dimension the operator acts on (a CNN: "stage0", "stage1", ... -> channels; a
    # transformer: "d_model"; a depth growth: "n_layer"),
    # before and after; the ones it leaves alone appear unchanged.
    widths_before: dict[str, int]
    widths_after: dict[str, int]
    params_before: int  # the host's parameters just before the growth
    params_after: int  # and just after (its new slices included, at alpha 0)
    tempo: int  # epochs of the mask's ramp from 0 to 1
    curve: str


@frozen
class HostGrowthStageChanged(EnvEvent):
    """A host growth moved through the lifecycle's stages (BLENDING -> HOLDING ->
    FOSSILIZED, or to PRUNED), as a seed's :class:`StageChanged`."""

    kind: ClassVar[str] = "host_growth_stage_changed"
    growth_id: str
    operator: str
    from_stage: str
    to_stage: str


@frozen
class HostGrowthFossilized(EnvEvent):
    """The growth's masks were folded away: the host is now plain layers of the new width."""

    kind: ClassVar[str] = "host_growth_fossilized"
    growth_id: str
    operator: str
    started_epoch: int
    params_before: int  # the host's parameters before the growth started
    params_after: int  # the host's parameters now, folded


@frozen
class HostGrowthPruned(EnvEvent):
    """The growth was removed (the host's old layers put back), e.g. by a governor rollback."""

    kind: ClassVar[str] = "host_growth_pruned"
    growth_id: str
    operator: str
    stage: str  # the stage it was pruned from
    started_epoch: int
    params_before: int  # the host's parameters with the growth in place
    params_after: int  # the host's parameters now, restored
    reason: str  # "rollback"


@frozen
class GovernorRollback(EnvEvent):
    kind: ClassVar[str] = "governor_rollback"
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
    host_params: int  # the host at the end (grown, if it grew)
    params_added: int  # see params_unblended
    seeds_germinated: int
    seeds_fossilized: int
    seeds_pruned: int
    rollbacks: int
    refused_actions: int
    seed: int
    update: int | None = None
    # Parameters added to the forward pass: seeds blended or fossilized, plus the host's own
    # growth (host_params_added). Seeds alive at the end that never reached the output
    # (GERMINATED, TRAINING) are counted apart, in params_unblended.
    params_unblended: int = 0
    params_forward: int = 0  # host + seeds blended into the output at the end
    params_held: int = 0  # host + every seed the model holds at the end
    train_flops: int = 0  # forward + backward FLOPs of every training batch
    # What the bare host would have cost on the same batches (0: no batch was trained).
    host_train_flops: int = 0
    # Cross-entropy on the validation split at the end: what a language model's recipe is
    # tuned on (esper compare's [tuning]); None in events written before it was recorded.
    final_val_loss: float | None = None
    # When no seed was germinated: why, as the policy tells it (its optional
    # ``why_no_growth``); None when it grew, or the policy cannot say.
    growth_note: str | None = None
    # Parameters the host's own growth added (its parameters at the end minus at birth),
    # a growth still ramping included: part of params_added since schema 4 (0 before).
    host_params_added: int = 0
    # The host/task pair the episode ran in a mixed training run (train.pairs); None else.
    pair: str | None = None


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
    pairs: list[str] = field(factory=list)  # each seed's pair in a mixed run; [] else


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
        HostGrowthStarted,
        HostGrowthStageChanged,
        HostGrowthFossilized,
        HostGrowthPruned,
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
    return [event for _, _, event in iter_event_lines(path)]


def iter_event_lines(path: Any) -> Iterator[tuple[int, dict[str, Any], Event]]:
    """Each event of an events.jsonl file with its line number and its JSON object."""
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}:{number}: not valid JSON ({exc})") from None
            yield number, data, event_from_dict(data, f"{path}:{number}")
