"""events.jsonl: every event type round-trips; newer schemas and bad lines are refused clearly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from esper_telemetry.files import AppendFile
from esper_telemetry.jsonl import EVENTS_FILE, JsonlBackend, JsonlOptions

from esper_core import TelemetryContext
from esper_core.errors import RunDirError
from esper_core.run.telemetry import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    EpisodeFinished,
    EpochCompleted,
    GateEvaluated,
    GovernorRollback,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStageChanged,
    HostGrowthStarted,
    PolicyEvaluation,
    PolicyUpdate,
    RunFinished,
    RunStarted,
    SchemaError,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    SlotSummary,
    StageChanged,
    event_to_dict,
    read_events,
)


def one_of_each() -> list[object]:
    """Every event type with non-default values in every field (None, nested, unicode, inf)."""
    slots = [
        SlotSummary(
            slot_id="r0c0",
            stage="BLENDING",
            seed_id="r0c0-s1",
            blueprint="cnn/res",
            alpha=0.4,
            contribution=-1.5,
            seed_params=52,
        ),
        SlotSummary(
            slot_id="r0c1",
            stage="DORMANT",
            seed_id=None,
            blueprint=None,
            alpha=0.0,
            contribution=None,
            seed_params=0,
        ),
    ]
    return [
        RunStarted(
            run_name="rün",
            run_dir=None,
            mode="train",
            task="tiny",
            policy="ppo:x.pt",
            reward="pbrs",
            executor="serial",
            n_envs=2,
            episodes=3,
            max_epochs=7,
            slot_ids=["r0c0", "r0c1"],
            host_params=396,
            config={"run": {"seed": 1, "telemetry": ["jsonl"]}, "x": [1.5, None]},
            esper_version="0.1.0",
            time=1.5,
        ),
        RunFinished(
            status="interrupted", wall_time=12.25, summary={"nested": {"a": [1, 2]}}, time=2.0
        ),
        EpochCompleted(
            env=1,
            episode=2,
            epoch=3,
            train_loss=0.5,
            train_acc=80.0,
            val_loss=math.inf,
            val_acc=70.0,
            test_loss=None,
            test_acc=None,
            action="GERMINATE r0c0 cnn/res",
            action_refused="slot busy",
            reward=-0.25,
            reward_components={"accuracy": 0.5, "rent": -0.75},
            host_params=396,
            seed_params=52,
            slots=slots,
            epoch_time=0.125,
            update=4,
            reason="r0c0: cnn/res: capacity limit (training loss 2.100, chance 2.303)",
            time=3.0,
        ),
        SeedGerminated(
            env=0,
            episode=1,
            epoch=2,
            slot_id="r0c0",
            seed_id="r0c0-s1",
            blueprint="cnn/res",
            style="gated",
            tempo=8,
            params=52,
            time=4.0,
        ),
        StageChanged(
            env=0,
            episode=1,
            epoch=2,
            slot_id="r0c0",
            seed_id=None,
            from_stage="PRUNED",
            to_stage="EMBARGOED",
            time=5.0,
        ),
        GateEvaluated(
            env=0,
            episode=1,
            epoch=2,
            slot_id="r0c0",
            seed_id="r0c0-s1",
            gate="G2",
            passed=False,
            failed=["min_training_epochs", "gradient_health"],
            time=6.0,
        ),
        SeedFossilized(
            env=0,
            episode=1,
            epoch=9,
            slot_id="r0c1",
            seed_id="r0c1-s2",
            blueprint="cnn/res",
            contribution=None,
            params=7,
            germinated_epoch=1,
            time=7.0,
        ),
        SeedPruned(
            env=1,
            episode=0,
            epoch=4,
            slot_id="r0c0",
            seed_id="r0c0-s1",
            blueprint="cnn/res",
            stage="HOLDING",
            contribution=0.75,
            params=52,
            germinated_epoch=0,
            reason="rollback",
            time=8.0,
        ),
        GovernorRollback(
            env=1,
            episode=0,
            epoch=4,
            reason="non-finite loss",
            val_loss=math.nan,
            penalty=-10.0,
            snapshot_epoch=0,
            time=9.0,
        ),
        HostGrowthStarted(
            env=1,
            episode=0,
            epoch=2,
            growth_id="width-0",
            operator="width",
            plan="stage 0 -> 8, stage 2 -> 32",
            widths_before={"stage0": 4, "stage1": 8, "stage2": 16},
            widths_after={"stage0": 8, "stage1": 8, "stage2": 32},
            params_before=1702,
            params_after=6034,
            tempo=3,
            curve="cosine",
            time=9.25,
        ),
        HostGrowthStageChanged(
            env=1,
            episode=0,
            epoch=4,
            growth_id="width-0",
            operator="width",
            from_stage="BLENDING",
            to_stage="HOLDING",
            time=9.5,
        ),
        HostGrowthFossilized(
            env=1,
            episode=0,
            epoch=4,
            growth_id="width-0",
            operator="width",
            started_epoch=2,
            params_before=1702,
            params_after=6034,
            time=9.625,
        ),
        HostGrowthPruned(
            env=0,
            episode=0,
            epoch=3,
            growth_id="width-1",
            operator="width",
            stage="HOLDING",
            started_epoch=1,
            params_before=6034,
            params_after=1702,
            reason="rollback",
            time=9.75,
        ),
        EpisodeFinished(
            env=1,
            episode=0,
            epochs=30,
            final_val_acc=91.5,
            final_test_acc=None,
            final_test_loss=0.25,
            total_reward=3.5,
            reward_components={"terminal": 3.5},
            host_params=396,
            params_added=59,
            seeds_germinated=3,
            seeds_fossilized=1,
            seeds_pruned=2,
            rollbacks=1,
            refused_actions=4,
            seed=17,
            update=None,
            host_params_added=4332,
            time=10.0,
        ),
        PolicyUpdate(update=5, diagnostics={"approx_kl": 0.01, "clip_fraction": 0.2}, time=11.0),
        PolicyEvaluation(
            update=5,
            policy="trained",
            seeds=[100000, 100001],
            final_val_acc=[91.0, 93.5],
            final_test_acc=[90.0, None],
            total_reward=[7.5, 7.9],
            seeds_fossilized=[1, 0],
            params_added=[18560, 0],
            time=12.0,
        ),
    ]


def _same(a: object, b: object) -> bool:
    """Equality that treats NaN as equal to NaN (GovernorRollback.val_loss above)."""
    return json.dumps(event_to_dict(a), sort_keys=True) == json.dumps(
        event_to_dict(b), sort_keys=True
    )  # type: ignore[arg-type]


def test_every_event_type_round_trips_through_the_jsonl_backend(tmp_path: Path) -> None:
    events = one_of_each()
    assert {type(e) for e in events} == set(EVENT_TYPES.values()), (
        "add the new event type to one_of_each()"
    )
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    backend.handle(events[:4])
    backend.flush()
    backend.handle(events[4:])
    backend.close()
    lines = (tmp_path / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(events)
    assert all(json.loads(line)["schema"] == SCHEMA_VERSION for line in lines)
    back = read_events(tmp_path / EVENTS_FILE)
    assert [type(e) for e in back] == [type(e) for e in events]
    for original, read in zip(events, back):
        assert _same(original, read), type(original).__name__
        if type(original) is not GovernorRollback:  # NaN != NaN
            assert read == original


def test_lines_reach_the_file_at_flush_not_before(tmp_path: Path) -> None:
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    backend.handle(one_of_each()[:2])
    path = tmp_path / EVENTS_FILE
    assert not path.exists() or path.read_text() == ""
    backend.flush()
    assert len(path.read_text().splitlines()) == 2
    backend.close()


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / EVENTS_FILE
    good = json.dumps(event_to_dict(one_of_each()[-1]))
    newer = {**json.loads(good), "schema": SCHEMA_VERSION + 1}
    path.write_text(good + "\n" + json.dumps(newer) + "\n", encoding="utf-8")
    with pytest.raises(SchemaError) as info:
        read_events(path)
    message = str(info.value)
    assert f"{path}:2" in message
    assert f"schema {SCHEMA_VERSION + 1}" in message
    assert "upgrade Esper" in message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"kind": "policy_update", "update": 1, "diagnostics": {}}', "no integer 'schema'"),
        ('{"schema": 1, "kind": "martian", "x": 1}', "unknown event kind 'martian'"),
        (
            '{"schema": 1, "kind": "policy_update", "update": "one", "diagnostics": {}}',
            "invalid policy_update event",
        ),
        ('{"schema": 1, "kind": "policy_update"', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_lines_are_refused_naming_the_line(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / EVENTS_FILE
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=expected) as info:
        read_events(path)
    assert f"{path}:1" in str(info.value)


def test_append_file_truncates_back_to_a_checkpointed_position(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    f = AppendFile(path)
    f.write("a\n")
    f.write("b\n")
    state = f.state()
    f.write("after checkpoint\n")
    f.close()
    assert path.read_text() == "a\nb\nafter checkpoint\n"
    resumed = AppendFile(path)
    resumed.resume(state)
    resumed.write("c\n")
    resumed.close()
    assert path.read_text() == "a\nb\nc\n"


def test_append_file_refuses_a_file_shorter_than_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("ab")
    with pytest.raises(RunDirError, match="has only 2 bytes but the checkpoint expects 10"):
        AppendFile(path).resume({"offset": 10, "sha256": "0" * 64})
    with pytest.raises(RunDirError, match="is missing"):
        AppendFile(tmp_path / "gone.txt").resume({"offset": 3, "sha256": "0" * 64})


def test_append_file_never_cuts_a_file_it_did_not_write(tmp_path: Path) -> None:
    """Resume truncates only what it can prove was written after the checkpoint."""
    path = tmp_path / "f.txt"
    f = AppendFile(path)
    f.write("a\nb\n")
    state = f.state()
    f.close()
    path.write_text("x\ny\nrecords of another run\n")  # same length up to the offset, other bytes
    with pytest.raises(RunDirError, match="is not the file this run wrote"):
        AppendFile(path).resume(state)
    assert path.read_text() == "x\ny\nrecords of another run\n", "the file was cut"


def test_a_fresh_run_starts_the_file_empty(tmp_path: Path) -> None:
    (tmp_path / EVENTS_FILE).write_text("stale line of a run that never checkpointed\n")
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    backend.handle(one_of_each()[:1])
    backend.close()
    assert len((tmp_path / EVENTS_FILE).read_text().splitlines()) == 1


def test_a_backend_without_a_run_directory_is_a_clear_error() -> None:
    with pytest.raises(RunDirError, match="'jsonl' writes files and needs a run directory"):
        JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=None, quiet=True))
