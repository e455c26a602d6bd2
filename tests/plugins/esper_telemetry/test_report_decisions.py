"""report.md lists each decision with the policy's reason."""

from __future__ import annotations

from pathlib import Path

import attrs
from esper_telemetry.jsonl import JsonlBackend, JsonlOptions
from esper_telemetry.report import load_run
from esper_telemetry.report.markdown import render

from esper_core import TelemetryContext
from tests.plugins.esper_telemetry.helpers import epoch_event, run_started

WAITING = "no capacity limit: loss 0.310 < 0.8 x chance 2.303"
GROWING = "r0c0: cnn/res: capacity limit: loss 2.100 falls 0.5%/epoch < 5.0%, chance 2.303"


def write(run_dir: Path, reasons: list[tuple[str, str]]) -> None:
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=run_dir, quiet=True))
    backend.handle([run_started(n_envs=1, episodes=1, max_epochs=len(reasons))])
    for epoch, (action, reason) in enumerate(reasons, start=1):
        backend.handle([attrs.evolve(epoch_event(0, 0, epoch), action=action, reason=reason)])
    backend.close()


def test_report_md_lists_each_run_of_decisions_with_its_reason(tmp_path: Path) -> None:
    germinate = "GERMINATE r0c0 cnn/res linear_add tempo=5"
    write(tmp_path, [("WAIT", WAITING)] * 3 + [(germinate, GROWING)] + [("WAIT", WAITING)])
    report = render(load_run(tmp_path), [])
    section = report.split("## Decisions", 1)[1]
    assert f"| 1–3 | WAIT | {WAITING} |" in section
    assert f"| 4 | {germinate} | {GROWING} |" in section
    assert f"| 5 | WAIT | {WAITING} |" in section


def test_a_run_without_reasons_has_no_decisions_section(tmp_path: Path) -> None:
    write(tmp_path, [("WAIT", "")] * 3)  # events of schema 1, or a policy that gives none
    assert "## Decisions" not in render(load_run(tmp_path), [])


def test_every_text_of_the_lifecycle_figure_lies_inside_the_figure(tmp_path: Path) -> None:
    """The footer's reasons ran off the image's right edge."""
    from esper_telemetry.report.lifecycle_figure import lifecycle_figure

    long = GROWING + "; " + "the loss has fallen slower than the window allows " * 2
    germinate = "GERMINATE r0c0 cnn/res linear_add tempo=5 (refused: r0c0 is not DORMANT)"
    write(tmp_path, [(germinate, long)] * 14)
    figure = lifecycle_figure(load_run(tmp_path))
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    box = figure.bbox
    texts = [t for t in figure.findobj(lambda a: hasattr(a, "get_text")) if a_text(t)]
    footer = [t for t in texts if t.get_text().startswith("Why ")]
    assert footer and len(footer[0].get_text().splitlines()) > 14  # wrapped, not cut
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, text.get_text()[:60]
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, text.get_text()[:60]


def a_text(artist: object) -> bool:
    from matplotlib.text import Text

    return isinstance(artist, Text) and artist.get_visible() and bool(artist.get_text())
