"""A failing backend is disabled with a warning naming it; the others lose nothing.
A run resumed from a mid-run checkpoint writes the same files as an uninterrupted one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from esper_core.run.hub import Hub
from tests.plugins.esper_telemetry.faulty_plugin import CRASH_FILE
from tests.plugins.esper_telemetry.helpers import csv_rows, jsonl_records, resume_tiny, run_tiny


def test_a_raising_backend_is_disabled_and_the_others_lose_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clean = tmp_path / "clean" / "run"
    run_tiny(clean, ["jsonl", "csv"])
    faulty = tmp_path / "faulty" / "run"
    with caplog.at_level(logging.WARNING, logger="esper.telemetry"):
        summary = run_tiny(faulty, ["exploding", "jsonl", "csv"], "telemetry.exploding.at_epoch=3")
    assert summary["status"] == "completed"
    # The summary says which records stop early, not only a log line.
    assert list(summary["telemetry_disabled"]) == ["exploding"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert (
        "'exploding' disabled" in warnings[0]
        and "RuntimeError" in warnings[0]
        and "epoch 3" in warnings[0]
    )
    # The configs differ only in the backends (and their options): compare everything else.
    clean_events = jsonl_records(clean / "events.jsonl")
    faulty_events = jsonl_records(faulty / "events.jsonl")
    for records in (clean_events, faulty_events):
        records[0]["config"]["run"].pop("telemetry")
        records[0]["config"].pop("telemetry")
        records[-1]["summary"].pop("telemetry_disabled")
    assert faulty_events == clean_events
    assert csv_rows(faulty / "metrics.csv") == csv_rows(clean / "metrics.csv")
    assert len(csv_rows(clean / "metrics.csv")) == 12


class Broken:
    """A backend whose ``method`` raises ``error``; counts the calls to ``close``."""

    name = "broken"

    def __init__(self, method: str, error: type[Exception] = RuntimeError) -> None:
        self.method = method
        self.error = error
        self.closed = 0

    def _maybe_fail(self, method: str) -> None:
        if method == self.method:
            raise self.error(f"{method} failed")

    def handle(self, events: Any) -> None:
        self._maybe_fail("handle")

    def flush(self) -> None:
        self._maybe_fail("flush")

    def close(self) -> None:
        self.closed += 1
        self._maybe_fail("close")

    def state_dict(self) -> dict[str, Any]:
        self._maybe_fail("state_dict")
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._maybe_fail("load_state_dict")


@pytest.mark.parametrize("method", ["handle", "flush", "close", "state_dict", "load_state_dict"])
def test_the_hub_isolates_every_backend_call(method: str, caplog: pytest.LogCaptureFixture) -> None:
    class Ok:
        name = "ok"

        def __init__(self) -> None:
            self.seen: list[Any] = []

        def handle(self, events: Any) -> None:
            self.seen.extend(events)

        def state_dict(self) -> dict[str, int]:
            return {"n": len(self.seen)}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.seen = [None] * state["n"]

    ok = Ok()
    broken = Broken(method)
    hub = Hub([broken, ok])
    with caplog.at_level(logging.WARNING, logger="esper.telemetry"):
        hub.emit([1, 2])
        hub.flush()
        state = hub.state_dict()
        hub.load_state_dict({"backends": {"broken": {}, "ok": {"n": 5}}, "disabled": {}})
        hub.close()
    assert list(hub.disabled) == ["broken"] and "RuntimeError" in hub.disabled["broken"]
    assert [b.name for b in hub.backends] == ["ok"]
    still_enabled = method in ("close", "load_state_dict")  # they fail after state_dict()
    positions = ({"broken": {}} if still_enabled else {}) | {"ok": {"n": 2}}
    assert state["backends"] == positions
    assert state["disabled"] == ({} if still_enabled else {"broken": hub.disabled["broken"]})
    assert len(ok.seen) == 5
    assert broken.closed == 1  # closed once when disabled (or by hub.close), never again
    assert any("'broken' disabled" in r.getMessage() for r in caplog.records)


def test_a_resumed_run_writes_what_an_uninterrupted_run_writes(tmp_path: Path) -> None:
    from tests.plugins.esper_telemetry.test_tensorboard import accumulator, scalars

    backends = ["jsonl", "csv", "tensorboard", "crash"]
    sets = ("run.checkpoint_every=5", "run.episodes=2")
    whole = tmp_path / "whole" / "run"
    run_tiny(whole, backends, *sets)

    cut = tmp_path / "cut" / "run"
    cut.mkdir(parents=True)
    (cut / CRASH_FILE).write_text("8")  # dies in epoch 8 of the first episode; checkpoint at 5
    with pytest.raises(BaseException) as crash:  # the plugin file is its own module: match by name
        run_tiny(cut, backends, *sets)
    assert type(crash.value).__name__ == "SimulatedCrash"
    interrupted = jsonl_records(cut / "events.jsonl")
    assert [r["kind"] for r in interrupted][-1] == "run_finished"  # written past the checkpoint
    assert max(r["epoch"] for r in interrupted if r["kind"] == "epoch_completed") == 8
    summary = resume_tiny(cut)
    assert summary["status"] == "completed"

    assert jsonl_records(cut / "events.jsonl") == jsonl_records(whole / "events.jsonl")
    assert csv_rows(cut / "metrics.csv") == csv_rows(whole / "metrics.csv")
    full, resumed = accumulator(whole / "tensorboard"), accumulator(cut / "tensorboard")
    assert sorted(resumed.Tags()["scalars"]) == sorted(full.Tags()["scalars"])
    for tag in full.Tags()["scalars"]:
        assert scalars(resumed, tag) == scalars(full, tag), tag
