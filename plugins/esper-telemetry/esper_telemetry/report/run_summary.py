"""The few lines ``esper report`` prints about the run itself.

The report's files hold everything, but a researcher who just ran ``esper report``
first wants to know, on the terminal, what the run was, how it ended, what grew, what
it cost and where to look next. These lines come from the run's episodes in
events.jsonl, so an interrupted or failed run (which has no summary.json) gets them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from esper_telemetry.report.data import RunData


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def summary_lines(data: RunData, written: Sequence[Path]) -> list[str]:
    """Five lines: the run, its final test metric, what grew, parameters and FLOPs, and
    where the report is (the first written file named report.md, with the figures)."""
    started, episodes = data.started, data.episodes
    what = f"{started.task} / {started.policy} / {started.reward}" if started else "?"
    status = data.finished.status if data.finished else "unfinished"
    count = f"{len(episodes)} episode{'s' if len(episodes) != 1 else ''}"
    lines = [f"run {data.name}: {what} (esper {data.mode}, {status}, {count})"]

    tests = [e.final_test_acc for e in episodes if e.final_test_acc is not None]
    losses = [e.final_test_loss for e in episodes if e.final_test_loss is not None]
    if tests:
        test = f"final test accuracy {_mean(tests):.2f}%"
        if losses:
            test += f", test loss {_mean(losses):.4f}"
        lines.append(test + (f" (mean of {len(tests)} episodes)" if len(tests) > 1 else ""))
    else:
        lines.append("final test accuracy: not measured (no episode finished)")

    if episodes:
        fossilized = sum(e.seeds_fossilized for e in episodes)
        pruned = sum(e.seeds_pruned for e in episodes)
        germinated = sum(e.seeds_germinated for e in episodes)
        kept = sorted(
            {
                record.blueprint.split("/", 1)[-1]
                for record in data.ledger.records.values()
                if record.fate == "fossilized"
            }
        )
        grew = f"grew: {germinated} seeds germinated, {fossilized} fossilized, {pruned} pruned"
        host = sum(1 for e in episodes if e.host_params_added > 0)
        if host:
            grew += f"; the host itself grew in {host} episode(s)"
        if kept:  # the blueprints kept, shortened to stay on one line
            names = ", ".join(kept)
            grew += f"; kept {names if len(names) <= 40 else names[:39] + '…'}"
        lines.append(grew)
        host_params = episodes[0].host_params - episodes[0].host_params_added
        added = _mean([e.params_added for e in episodes])
        share = f" ({added / host_params:+.0%} of the host)" if host_params > 0 else ""
        cost = f"parameters: {added:+,.0f} on a host of {host_params:,}{share}"
        flops = [e.train_flops for e in episodes if e.train_flops > 0]
        if flops:
            cost += f"; {_mean(flops):.3g} training FLOPs per episode"
        lines.append(cost)
    else:
        lines += ["grew: nothing (no episode finished)", "parameters: -"]

    report = next((p for p in written if p.suffix == ".md"), None)
    figures = [p.name for p in written if p.suffix == ".png"]
    where = f"report: {report}" if report is not None else "report: not written"
    if figures:
        where += f" (figures beside it: {', '.join(figures)})"
    lines.append(where)
    return lines
