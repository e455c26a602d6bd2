"""How a run ended, in one line for whoever reads its report.

``summary.json`` is written only by a run that finished (``esper compare`` takes it as
the mark of a finished cell), so a run that failed, was interrupted or was killed is
known by its ``events.jsonl`` alone: the ``run_finished`` event's status and, for a
failure, the line the CLI printed (schema 3), or no ``run_finished`` at all.
"""

from __future__ import annotations

from esper_telemetry.report.data import RunData


def outcome_line(data: RunData) -> str | None:
    """A line saying the run did not complete, and why; None for a completed run."""
    where, finished = data.run_dir, data.finished
    resume = f"esper {data.mode} --resume {where}"
    if finished is None:
        return (
            f"{where}: the run did not finish (events.jsonl has no run_finished event): it is "
            f"still running, or its process was killed; {resume} continues it from its last "
            "checkpoint"
        )
    if finished.status == "failed":
        reason = finished.error or "its reason was not recorded (written before event schema 3)"
        return f"{where}: the run failed: {reason}"
    if finished.status == "interrupted":
        return f"{where}: the run was interrupted; continue it with: {resume}"
    return None
