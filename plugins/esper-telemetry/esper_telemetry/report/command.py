"""The ``esper report`` command.

It reads what ``telemetry.jsonl`` writes, so that plugin adds it to the CLI (its
``esper_register_commands`` hook).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import click

from esper_core.command_types import PathArg


@click.command("report")
@click.argument("run_dir", type=PathArg(path_type=Path))
@click.option(
    "--out",
    type=PathArg(file_okay=False, path_type=Path),
    help="Write the figures and report.md here instead of RUN_DIR.",
)
@click.option(
    "--dpi",
    type=click.IntRange(30, 600),
    default=120,
    show_default=True,
    help="Resolution of the PNGs.",
)
@click.option(
    "--curves",
    "max_series",
    type=click.IntRange(1, 50),
    default=8,
    show_default=True,
    help="Env-episodes drawn in the accuracy figure (the last ones).",
)
@click.option(
    "--lanes",
    "max_groups",
    type=click.IntRange(1, 50),
    default=4,
    show_default=True,
    help="Env-episodes drawn as swimlanes in the lifecycle figure (the last ones).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the written files as JSON.")
def report(
    run_dir: Path, out: Path | None, dpi: int, max_series: int, max_groups: int, as_json: bool
) -> None:
    """Plot a run: accuracy curves, per-slot lifecycle swimlanes and reward components
    (PNG), plus report.md listing every seed with its blueprint, slot, lifespan, fate and
    contribution. Reads RUN_DIR/events.jsonl."""
    from esper_core.run.lock import RunDirLock
    from esper_telemetry.report import check_report_dir, load_run, write_report
    from esper_telemetry.report.outcome import outcome_line

    # Writing into a run directory is what a run does: only while no run holds it.
    into_run = run_dir.is_dir() and (out is None or out.resolve() == run_dir.resolve())
    if out is not None and not into_run:
        check_report_dir(out)
    lock = RunDirLock.acquire(run_dir) if into_run else None
    try:
        data = load_run(run_dir)
        target = out if out is not None else run_dir
        written = write_report(data, target, dpi=dpi, max_series=max_series, max_groups=max_groups)
    finally:
        if lock is not None:
            lock.release()
    # On stderr, so --json's output stays one JSON document: the figures of a failed run
    # look like any other's, and report.md's status line is easy to miss.
    outcome = outcome_line(data)
    if outcome is not None:
        click.echo(outcome, err=True)
    if as_json:
        click.echo(json.dumps([str(p) for p in written], indent=2))
        return
    from esper_telemetry.report.run_summary import summary_lines

    # What the run was and how it went, then where to read more: the paths alone said
    # nothing about the run.
    # Wrapped between words at the terminal's width (COLUMNS when piped, 80 by default),
    # a line's continuation indented: a long run directory ran the last line past 80.
    width = shutil.get_terminal_size().columns
    for line in summary_lines(data, written):
        wrapped = textwrap.wrap(
            line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        click.echo("\n".join(wrapped) or line)
