"""Readable terminal output for summaries and listings (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_summary(summary: dict[str, Any], run_dir: str, console: Console | None = None) -> None:
    console = console or Console()
    status = summary["status"]
    console.print(
        f"[bold]{summary['mode']}[/bold] {summary['task']} / {summary['policy']} / {summary['reward']}: "
        f"{status} in {summary['wall_time']:.1f}s"
    )
    table = Table(title="Episodes", show_lines=False)
    for column in (
        "env",
        "episode",
        "seed",
        "test acc %",
        "val acc %",
        "params added",
        "fossilized",
        "pruned",
        "rollbacks",
        "reward",
    ):
        table.add_column(column, justify="right")
    for e in summary["episodes"]:
        table.add_row(
            str(e["env"]),
            str(e["episode"]),
            str(e["seed"]),
            _fmt(e["final_test_acc"]),
            _fmt(e["final_val_acc"]),
            f"{e['params_added']:,}",
            str(e["seeds_fossilized"]),
            str(e["seeds_pruned"]),
            str(e["rollbacks"]),
            _fmt(e["total_reward"]),
        )
    console.print(table)
    if summary["seeds"]:
        seeds = Table(title="Seeds")
        for column in (
            "env",
            "ep",
            "seed",
            "slot",
            "blueprint",
            "germinated",
            "ended",
            "fate",
            "contribution",
        ):
            seeds.add_column(column)
        for s in summary["seeds"]:
            seeds.add_row(
                str(s["env"]),
                str(s["episode"]),
                s["seed_id"],
                s["slot_id"],
                s["blueprint"],
                str(s["germinated_epoch"]),
                _fmt(s["ended_epoch"]),
                s["fate"],
                _fmt(s["contribution"]),
            )
        console.print(seeds)
    mean = summary.get("final_test_acc_mean")
    added = summary.get("params_added_mean")
    console.print(
        f"final test accuracy (mean): [bold]{_fmt(mean)}%[/bold]   parameters added (mean): "
        f"{_fmt(added, 0)} on a host of {summary.get('host_params') or 0:,}"
    )
    console.print(f"run directory: {run_dir}")
