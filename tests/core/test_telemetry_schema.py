"""The events.jsonl schema: the keys of every event kind, in the order they are written.

Readers (``esper report``, notebooks, ``jq`` pipelines) may rely on the key order of a
line, so a refactor of the event classes (shared bases, mixins) must not move a key.
The expected lists are copied from an events.jsonl written before the event classes
shared their fields.
"""

from __future__ import annotations

import json

import attrs

from esper_core.env.step import EpochMetrics
from esper_core.run.telemetry import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    EpisodeFinished,
    EpochCompleted,
    EpochScores,
    PolicyEvaluation,
    RunFinished,
    RunStarted,
    dumps,
    event_from_dict,
    event_to_dict,
)
from tests.plugins.esper_telemetry.test_jsonl import one_of_each

ENV_EPOCH = ["schema", "kind", "time", "env", "episode", "epoch"]
SCORES = ["train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc"]
WRITTEN_KEYS = {
    "run_started": [
        *("schema", "kind", "time", "run_name", "run_dir", "mode", "task", "policy", "reward"),
        *("executor", "n_envs", "episodes", "max_epochs", "slot_ids", "host_params", "config"),
        *("esper_version", "episodes_per_update"),
    ],
    "run_finished": ["schema", "kind", "time", "status", "wall_time", "summary", "error"],
    "epoch_completed": [
        *ENV_EPOCH,
        *SCORES,
        *("action", "action_refused", "reward", "reward_components", "host_params"),
        *("seed_params", "slots", "epoch_time", "update", "train_flops", "reason"),
    ],
    "seed_germinated": [*ENV_EPOCH, "slot_id", "seed_id", "blueprint", "style", "tempo", "params"],
    "stage_changed": [*ENV_EPOCH, "slot_id", "seed_id", "from_stage", "to_stage"],
    "gate_evaluated": [*ENV_EPOCH, "slot_id", "seed_id", "gate", "passed", "failed"],
    "seed_fossilized": [
        *ENV_EPOCH,
        *("slot_id", "seed_id", "blueprint", "contribution", "params", "germinated_epoch"),
        "gain",
    ],
    "seed_pruned": [
        *ENV_EPOCH,
        *("slot_id", "seed_id", "blueprint", "stage", "contribution", "params"),
        *("germinated_epoch", "reason", "gain"),
    ],
    "governor_rollback": [*ENV_EPOCH, "reason", "val_loss", "penalty", "snapshot_epoch"],
    "host_growth_started": [
        *ENV_EPOCH,
        *("growth_id", "operator", "plan", "widths_before", "widths_after"),
        *("params_before", "params_after", "tempo", "curve"),
    ],
    "host_growth_stage_changed": [*ENV_EPOCH, "growth_id", "operator", "from_stage", "to_stage"],
    "host_growth_fossilized": [
        *ENV_EPOCH,
        *("growth_id", "operator", "started_epoch", "params_before", "params_after"),
    ],
    "host_growth_pruned": [
        *ENV_EPOCH,
        *("growth_id", "operator", "stage", "started_epoch", "params_before", "params_after"),
        "reason",
    ],
    "episode_finished": [
        *("schema", "kind", "time", "env", "episode", "epochs", "final_val_acc"),
        *("final_test_acc", "final_test_loss", "total_reward", "reward_components"),
        *("host_params", "params_added", "seeds_germinated", "seeds_fossilized"),
        *("seeds_pruned", "rollbacks", "refused_actions", "seed", "update", "params_unblended"),
        *("params_forward", "params_held", "train_flops", "host_train_flops"),
        "final_val_loss",
        "growth_note",
        "host_params_added",
        "pair",
    ],
    "policy_update": ["schema", "kind", "time", "update", "diagnostics"],
    "policy_evaluation": [
        *("schema", "kind", "time", "update", "policy", "seeds", "final_val_acc"),
        *("final_test_acc", "total_reward", "seeds_fossilized", "params_added"),
        "pairs",
    ],
}


def test_every_event_kind_writes_its_keys_in_the_same_order() -> None:
    events = one_of_each()
    assert {e.kind for e in events} == set(EVENT_TYPES) == set(WRITTEN_KEYS)  # type: ignore[attr-defined]
    for event in events:
        line = dumps(event)  # type: ignore[arg-type]
        assert list(json.loads(line)) == WRITTEN_KEYS[event.kind], event.kind  # type: ignore[attr-defined]


def test_epoch_metrics_and_the_epoch_event_share_the_scores() -> None:
    # Positional construction, as helpers and plugins do: the scores come first.
    metrics = EpochMetrics(0.5, 80.0, 0.75, 70.0, None, 65.0, 0.125, 9)
    assert attrs.asdict(metrics) == {
        **dict(zip(SCORES, (0.5, 80.0, 0.75, 70.0, None, 65.0))),
        "epoch_time": 0.125,
        "batches": 9,
    }
    names = [f.name for f in attrs.fields(EpochScores)]
    assert names == SCORES
    assert isinstance(metrics, EpochScores)
    assert issubclass(EpochCompleted, EpochScores)


def test_schema_2_adds_the_reason_and_still_reads_schema_1() -> None:
    # The epoch event says why the policy chose its action since schema 2; a schema-1
    # line (no reason) still reads, with the reason empty.
    assert SCHEMA_VERSION >= 2
    epoch = next(e for e in one_of_each() if isinstance(e, EpochCompleted))
    assert epoch.reason.startswith("r0c0: cnn/res: capacity limit")
    old = {**event_to_dict(epoch), "schema": 1}
    del old["reason"]
    read = event_from_dict(old)
    assert isinstance(read, EpochCompleted) and read.reason == ""
    assert attrs.evolve(read, reason=epoch.reason) == epoch


def test_schema_3_adds_a_failed_runs_reason_and_still_reads_schema_2() -> None:
    # run_finished says why a run failed since schema 3 (summary.json is written only by
    # a finished run); a schema-2 line still reads, with the reason empty.
    assert SCHEMA_VERSION >= 3
    failed = RunFinished(status="failed", wall_time=1.5, error="plugin x raised ValueError: no")
    old = {**event_to_dict(failed), "schema": 2}
    del old["error"]
    read = event_from_dict(old)
    assert isinstance(read, RunFinished) and read.error == ""
    assert attrs.evolve(read, error=failed.error) == failed


def test_schema_4_tells_host_growth_and_still_reads_schema_3() -> None:
    # The host's own growth has events since schema 4 and the episode counts its
    # parameters; a schema-3 episode line still reads, the host counted as not grown.
    assert SCHEMA_VERSION >= 4
    assert {"host_growth_started", "host_growth_fossilized", "host_growth_pruned"} <= set(
        EVENT_TYPES
    )
    episode = next(e for e in one_of_each() if isinstance(e, EpisodeFinished))
    assert episode.host_params_added == 4332
    old = {**event_to_dict(episode), "schema": 3}
    del old["host_params_added"]
    read = event_from_dict(old)
    assert isinstance(read, EpisodeFinished) and read.host_params_added == 0
    assert attrs.evolve(read, host_params_added=4332) == episode


def test_schema_5_says_the_episodes_per_update_and_still_reads_schema_4() -> None:
    # Progress names the rollout episode of an update from RunStarted.episodes_per_update;
    # a schema-4 run_started line still reads, as one episode per update.
    assert SCHEMA_VERSION >= 5
    started = next(e for e in one_of_each() if isinstance(e, RunStarted))
    old = {**event_to_dict(attrs.evolve(started, episodes_per_update=4)), "schema": 4}
    assert old["episodes_per_update"] == 4
    del old["episodes_per_update"]
    read = event_from_dict(old)
    assert isinstance(read, RunStarted) and read.episodes_per_update == 1


def test_schema_6_names_a_mixed_runs_pair_and_still_reads_schema_5() -> None:
    assert SCHEMA_VERSION == 6
    episode = next(e for e in one_of_each() if isinstance(e, EpisodeFinished))
    mine = attrs.evolve(episode, pair="digits-mid")
    assert event_from_dict(event_to_dict(mine)) == mine
    old = {**event_to_dict(episode), "schema": 5}
    del old["pair"]
    read = event_from_dict(old)
    assert isinstance(read, EpisodeFinished) and read.pair is None
    evaluation = next(e for e in one_of_each() if isinstance(e, PolicyEvaluation))
    old = {**event_to_dict(evaluation), "schema": 5}
    del old["pairs"]
    read = event_from_dict(old)
    assert isinstance(read, PolicyEvaluation) and read.pairs == []
