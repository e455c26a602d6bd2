"""metrics.csv: a row per env epoch, header fixed from the first row, resumable."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from esper_telemetry.csv_metrics import METRICS_FILE, CsvBackend, CsvOptions

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import epoch_event, feed, synthetic_batches


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_one_row_per_epoch_with_each_reward_component_and_slot(tmp_path: Path) -> None:
    backend = CsvBackend(CsvOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    batches = synthetic_batches(n_envs=2, episodes=2, max_epochs=3)
    feed(backend, batches)
    backend.close()
    header, rows = read(tmp_path / METRICS_FILE)
    assert len(rows) == 2 * 2 * 3
    for column in (
        "env",
        "episode",
        "update",
        "epoch",
        "train_loss",
        "val_acc",
        "test_acc",
        "reward",
        "reward_accuracy",
        "reward_rent",
        "reward_other",
        "host_params",
        "seed_params",
        "slot_r0c0_stage",
        "slot_r0c0_alpha",
        "slot_r0c1_stage",
        "slot_r0c1_alpha",
    ):
        assert column in header
    first = rows[0]
    event = batches[1][1]  # the first EpochCompleted (after the germination)
    assert (first["env"], first["episode"], first["epoch"]) == ("0", "0", "1")
    assert float(first["val_acc"]) == event.val_acc
    assert float(first["reward_accuracy"]) == event.reward_components["accuracy"]
    assert float(first["reward"]) == event.reward
    assert first["slot_r0c0_stage"] == "TRAINING"
    assert first["update"] == "" and first["reward_other"] == ""
    assert [(r["env"], r["episode"], r["epoch"]) for r in rows[:4]] == [
        ("0", "0", "1"),
        ("1", "0", "1"),
        ("0", "0", "2"),
        ("1", "0", "2"),
    ]


def test_components_unknown_at_the_first_row_are_kept_by_name(tmp_path: Path) -> None:
    backend = CsvBackend(CsvOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    backend.handle([epoch_event(0, 0, 1, components={"accuracy": 0.5})])
    backend.handle([epoch_event(0, 0, 2, components={"accuracy": 0.25, "governor_penalty": -10.0})])
    backend.handle([epoch_event(0, 0, 3, components={}, test=False)])
    backend.close()
    header, rows = read(tmp_path / METRICS_FILE)
    assert [c for c in header if c.startswith("reward_")] == ["reward_accuracy", "reward_other"]
    assert json.loads(rows[1]["reward_other"]) == {"governor_penalty": -10.0}
    assert rows[2]["reward_accuracy"] == "" and rows[2]["test_acc"] == ""


def test_resume_truncates_and_keeps_the_header(tmp_path: Path) -> None:
    batches = synthetic_batches(n_envs=1, episodes=1, max_epochs=6)
    whole = tmp_path / "whole"
    feed(CsvBackend(CsvOptions(), TelemetryContext(run_dir=whole, quiet=True)), batches)

    part = tmp_path / "part"
    first = CsvBackend(CsvOptions(), TelemetryContext(run_dir=part, quiet=True))
    feed(first, batches[:3])
    state = first.state_dict()
    feed(first, batches[3:5])  # written after the checkpoint, then the process dies
    first.close()
    resumed = CsvBackend(CsvOptions(), TelemetryContext(run_dir=part, quiet=True))
    resumed.load_state_dict(state)
    feed(resumed, batches[3:])
    resumed.close()
    assert (part / METRICS_FILE).read_bytes() == (whole / METRICS_FILE).read_bytes()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_are_written_readably(tmp_path: Path, value: float) -> None:
    backend = CsvBackend(CsvOptions(), TelemetryContext(run_dir=tmp_path, quiet=True))
    event = epoch_event(0, 0, 1)
    from attrs import evolve

    backend.handle([evolve(event, val_loss=value)])
    backend.close()
    _, rows = read(tmp_path / METRICS_FILE)
    assert repr(float(rows[0]["val_loss"])) == repr(value)
