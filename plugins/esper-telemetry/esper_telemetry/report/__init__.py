"""``esper report RUN_DIR``: figures and report.md from a run's events.jsonl."""

from __future__ import annotations

from pathlib import Path

from esper_core.errors import RunDirError
from esper_core.run.checkpoint import write_text
from esper_telemetry.report.data import RunData, load_run
from esper_telemetry.report.markdown import REPORT_TITLE

REPORT_FILE = "report.md"
FIGURES = ("accuracy.png", "training.png", "lifecycle.png", "rewards.png")
LEARNING_FIGURE = "learning.png"  # train runs only: the learning curve

__all__ = [
    "FIGURES",
    "LEARNING_FIGURE",
    "REPORT_FILE",
    "RunData",
    "build_report",
    "check_report_dir",
    "load_run",
    "write_report",
]


def build_report(
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    dpi: int = 120,
    max_series: int = 8,
    max_groups: int = 4,
) -> list[Path]:
    """Write the four figures (five for a train run) and report.md; return their paths."""
    data = load_run(Path(run_dir))
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    if out.resolve() != Path(run_dir).resolve():
        check_report_dir(out)
    return write_report(data, out, dpi=dpi, max_series=max_series, max_groups=max_groups)


def check_report_dir(out: Path) -> None:
    """Refuse an ``--out`` whose report.md or figures are not a report Esper wrote.

    Writing the report again over an earlier one is how a report is refreshed; a
    report.md (or a figure, without a report of ours beside it) that is the user's own
    is never written over.
    """
    report = out / REPORT_FILE
    try:
        with report.open(encoding="utf-8", errors="replace") as fh:
            ours = fh.readline().startswith(REPORT_TITLE)
    except FileNotFoundError:
        ours = False
    except OSError:
        ours = False  # a directory or an unreadable file in its place: not a report
    if ours:
        return
    for name in (REPORT_FILE, *FIGURES, LEARNING_FIGURE):
        if (out / name).exists() or (out / name).is_symlink():
            what = (
                f"{report} is not a report that esper report wrote"
                if name == REPORT_FILE
                else f"{out} holds {name!r} without a report.md of esper report beside it"
            )
            raise RunDirError(
                f"{what}: it would be written over; choose another --out (a new or empty "
                "directory), or move that file away"
            )


def write_report(
    data: RunData, out: Path, *, dpi: int = 120, max_series: int = 8, max_groups: int = 4
) -> list[Path]:
    """:func:`build_report` of a run already read (:func:`load_run`) into ``out``."""
    from esper_telemetry.report import figures, learning_curve, markdown, training_figures

    out.mkdir(parents=True, exist_ok=True)
    written = [
        figures.save(figures.accuracy_figure(data, max_series=max_series), out / FIGURES[0], dpi),
        figures.save(training_figures.training_figure(data), out / FIGURES[1], dpi),
        figures.save(figures.lifecycle_figure(data, max_groups=max_groups), out / FIGURES[2], dpi),
        figures.save(figures.reward_figure(data), out / FIGURES[3], dpi),
    ]
    if learning_curve.has_training(data):
        curve = learning_curve.training_figure(data)
        written.append(figures.save(curve, out / LEARNING_FIGURE, dpi))
    report = out / REPORT_FILE
    write_text(report, markdown.render(data, [p.name for p in written]))
    return [*written, report]
