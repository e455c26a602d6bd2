"""How the local launcher names the ranks of a failed job (no processes: fake ones)."""

from __future__ import annotations

import attrs
from esper_streams.launch import Failure, _Outcome


@attrs.define
class FakeProcess:
    exitcode: int | None


def test_a_rank_that_reported_but_was_slow_to_exit_is_not_called_silent() -> None:
    # Rank 1 hangs; rank 0 times out waiting for it and reports, but on a loaded machine
    # is still running when the grace ends. Only rank 1 did not answer.
    outcome = _Outcome(2)
    outcome._add(("failed", 0, Failure(0, "DistributedError", "rank 1 did not answer", peer=True)))
    outcome.note_stopped([FakeProcess(None), FakeProcess(None)])
    assert outcome.stopped == [1]
    message = str(outcome.error(45))
    assert message.startswith("rank 1 of 2 did not answer within 45 s and was stopped")
    assert "Rank 0 reported: rank 1 did not answer" in message


def test_ranks_that_exited_are_not_stopped() -> None:
    outcome = _Outcome(3)
    outcome._add(("failed", 2, Failure(2, "RuntimeError", "boom")))
    outcome.note_stopped([FakeProcess(None), FakeProcess(0), FakeProcess(1)])
    assert outcome.stopped == [0]
