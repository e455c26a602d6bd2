"""The lines ``esper report`` prints about the run: what it was, its
final test metric, what grew, its parameters and FLOPs, and where the report is."""

from __future__ import annotations

from itertools import chain
from pathlib import Path

from esper_telemetry.report.data import index_events
from esper_telemetry.report.run_summary import summary_lines

from tests.plugins.esper_telemetry.helpers import synthetic_batches


def test_five_lines_say_what_the_run_was_and_where_its_report_is(tmp_path: Path) -> None:
    events = list(chain.from_iterable(synthetic_batches(n_envs=2, episodes=2, max_epochs=3)))
    data = index_events(tmp_path, events)
    written = [tmp_path / "accuracy.png", tmp_path / "lifecycle.png", tmp_path / "report.md"]
    lines = summary_lines(data, written)
    assert lines == [
        "run synthetic: tiny / scripted / acc_delta (esper run, completed, 4 episodes)",
        "final test accuracy 81.00%, test loss 0.5000 (mean of 4 episodes)",
        "grew: 4 seeds germinated, 0 fossilized, 0 pruned",
        "parameters: +10 on a host of 100 (+10% of the host)",
        f"report: {tmp_path / 'report.md'} (figures beside it: accuracy.png, lifecycle.png)",
    ]


def test_a_run_with_no_finished_episode_still_gets_five_lines(tmp_path: Path) -> None:
    batches = synthetic_batches(n_envs=1, episodes=1, max_epochs=3)
    events = [e for e in chain.from_iterable(batches) if e.kind != "episode_finished"][:-1]
    lines = summary_lines(index_events(tmp_path, events), [])
    assert len(lines) == 5
    assert "unfinished, 0 episodes" in lines[0] and lines[-1] == "report: not written"
