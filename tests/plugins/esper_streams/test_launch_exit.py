"""A worker whose job succeeded ends without the interpreter's teardown (real processes)."""

from __future__ import annotations

import atexit
import os

import pytest
from esper_streams.launch import launch_local


def _aborts_at_teardown() -> str:
    # Stands in for a C++ destructor that aborts during finalization (gloo's threads):
    # the job itself has finished and reported.
    atexit.register(os.abort)
    return f"rank {os.environ['RANK']} done"


@pytest.mark.slow
def test_a_rank_that_reported_success_is_not_failed_by_an_abort_at_teardown() -> None:
    assert launch_local(2, _aborts_at_teardown, timeout=60) == "rank 0 done"
