"""``esper report RUN_DIR``: figures and report.md from a run's events.jsonl."""

from __future__ import annotations

from pathlib import Path

from esper_core.run.checkpoint import write_text
from esper_telemetry.report.data import RunData, load_run

REPORT_FILE = "report.md"
FIGURES = ("accuracy.png", "training.png", "lifecycle.png", "rewards.png")
LEARNING_FIGURE = "learning.png"  # train runs only: the learning curve

__all__ = [
    "FIGURES",
    "LEARNING_FIGURE",
    "REPORT_FILE",
    "RunData",
    "build_report",
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
    return write_report(data, out, dpi=dpi, max_series=max_series, max_groups=max_groups)


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
