"""The time left in a running comparison, for its progress lines.

Measured, not guessed: the mean wall time of the runs this comparison has finished so far
(each run's own ``summary.json``, so a remote runner's cells count the same), times the
runs still to do, ``jobs`` at a time. Copies of another run's settings and runs finished
before this invocation took no time now, so they shorten what is left but do not enter
the mean.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from pathlib import Path

from attrs import define, field

from esper_core.compare.preview import duration, wall_time
from esper_core.errors import RunDirError

DONE = ("completed", "skipped", "failed")  # statuses that end a run's turn in the plan


@define
class Eta:
    left: int  # runs of the plan still to do
    jobs: int = 1
    _times: list[float] = field(factory=list)

    def finished(self, directory: str | Path, status: str) -> None:
        if status not in DONE:
            return
        self.left = max(0, self.left - 1)
        if status == "completed":
            # A damaged summary is named when the comparison reads the cell.
            with contextlib.suppress(RunDirError):
                self._times.append(wall_time(Path(directory)))

    @property
    def seconds(self) -> float | None:
        """Seconds until the last run is done; None before any run was measured."""
        if not self._times:
            return None
        rounds = math.ceil(self.left / max(1, self.jobs))
        return rounds * statistics.fmean(self._times)

    def describe(self) -> str:
        """``about 12 min left``, ``done``, or that no run has been measured yet."""
        if self.left == 0:
            return "done"
        seconds = self.seconds
        if seconds is None:
            return "time left: measured once a run finishes"
        return f"about {duration(seconds)} left"
