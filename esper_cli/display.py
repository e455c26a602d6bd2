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


def _short(blueprint: str | None) -> str:
    """``cnn/conv_light`` -> ``conv_light``: the topology is the task's, shown once above."""
    return "-" if not blueprint else blueprint.split("/", 1)[-1]


def print_summary(summary: dict[str, Any], run_dir: str, console: Console | None = None) -> None:
    console = console or Console()
    console.print(
        f"[bold]{summary['mode']}[/bold] {summary['task']} / {summary['policy']} / {summary['reward']}: "
        f"{summary['status']} in {summary['wall_time']:.1f}s"
    )
    table = Table(title="Episodes", title_justify="left", pad_edge=False)
    for column in (
        "env",
        "ep",
        "seed",
        "test%",
        "val%",
        "+params",
        "fossil",
        "prune",
        "rollbk",
        "reward",
    ):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
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
        seeds = Table(title="Seeds (epochs; contribution in accuracy points)", title_justify="left")
        for column in ("env", "ep", "seed", "blueprint", "born", "ended", "fate", "contrib"):
            # Names fold onto more lines on a narrow terminal; none is cut off.
            names = column in ("seed", "blueprint", "fate")
            seeds.add_column(column, overflow="fold" if names else "ellipsis", no_wrap=not names)
        for s in summary["seeds"]:
            seeds.add_row(
                str(s["env"]),
                str(s["episode"]),
                s["seed_id"],
                _short(s["blueprint"]),
                str(s["germinated_epoch"]),
                _fmt(s["ended_epoch"]),
                s["fate"],
                _fmt(s["contribution"]),
            )
        console.print(seeds)
    unblended = sum(int(e.get("params_unblended") or 0) for e in summary["episodes"])
    if unblended:
        console.print(
            f"seeds that never reached the output hold {unblended:,} parameters "
            "(not counted in +params)"
        )
    mean = summary.get("final_test_acc_mean")
    added = summary.get("params_added_mean")
    console.print(
        f"final test accuracy (mean): [bold]{_fmt(mean)}%[/bold]   parameters added (mean): "
        f"{_fmt(added, 0)} on a host of {summary.get('host_params') or 0:,}"
    )
    loss = summary.get("final_test_loss_mean")
    if loss is not None:
        # A language model is judged by its loss and perplexity, not by accuracy.
        ppl = summary.get("final_test_perplexity_mean")
        shown = (
            f", perplexity [bold]{ppl:.3f}[/bold]" if summary.get("language_model") and ppl else ""
        )
        console.print(f"final test loss (mean): [bold]{loss:.4f}[/bold]{shown}")
    if summary.get("growth"):
        console.print(f"growth: {summary['growth']}")
    console.print(f"run directory: {run_dir}")
