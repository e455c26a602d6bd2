"""Readable terminal output for summaries and listings (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from esper_cli.terminal import output_console, print_table


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _count(value: Any) -> str:
    """A count as every table shows it: rounded, with thousands separators."""
    return "-" if value is None else f"{round(value):,}"


def _short(blueprint: str | None) -> str:
    """``cnn/conv_light`` -> ``conv_light``: the topology is the task's, shown once above."""
    return "-" if not blueprint else blueprint.split("/", 1)[-1]


def growth_clauses(growth: str) -> list[str]:
    """The summary's one-line growth verdict as its clauses (split at the commas outside
    parentheses), one per printed line: no line is long enough for a terminal to wrap it."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(growth):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0 and growth[i + 1 : i + 2] == " ":
            clauses.append(growth[start:i])
            start = i + 2
    return [*clauses, growth[start:]]


# The two measures of a seed's worth, named apart (docs/growth.md, "Contribution and gain").
CONTRIBUTION = (
    "contrib: validation accuracy with the seed minus with it switched off (counterfactual), "
    "at its last measurement"
)
GAIN = (
    "gain: validation accuracy at the end minus just before the seed first touched the "
    "output (it holds the host's own learning meanwhile; the growth line states contrib)"
)


def print_summary(summary: dict[str, Any], run_dir: str, console: Console | None = None) -> None:
    console = console or output_console()
    console.print(
        f"[bold]{summary['mode']}[/bold] {summary['task']} / {summary['policy']} / {summary['reward']}: "
        f"{summary['status']} in {summary['wall_time']:.1f}s"
    )
    table = Table(title="Episodes", title_justify="left", pad_edge=False)
    for column in (
        "env",
        "ep",
        "random\nseed",  # the number; the Seeds table's "seed" is the grown module
        "test%",
        "val%",
        "+params",
        "fossil",
        "prune",
        "rollbk",
        "reward",
    ):
        table.add_column(
            column,
            justify="right",
            no_wrap=True,
            min_width=max(len(w) for w in column.split("\n")),
        )
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
    print_table(console, table)
    if summary["seeds"]:
        seeds = Table(
            title="Seeds (epochs; contrib and gain in accuracy points)", title_justify="left"
        )
        for column in (
            "env",
            "ep",
            "seed",
            "blueprint",
            "born",
            "ended",
            "fate",
            "contrib",
            "gain",
        ):
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
                _fmt(s.get("gain")),
            )
        print_table(console, seeds)
        console.print(f"{CONTRIBUTION}; {GAIN} (points).", style="dim", highlight=False)
    unblended = sum(int(e.get("params_unblended") or 0) for e in summary["episodes"])
    if unblended:
        console.print(
            f"seeds that never reached the output hold {unblended:,} parameters "
            "(not counted in +params)"
        )
    mean = summary.get("final_test_acc_mean")
    added = summary.get("params_added_mean")
    # One fact per line, every count with thousands separators (as in the tables above).
    console.print(f"final test accuracy (mean): [bold]{_fmt(mean)}%[/bold]")
    host_added = summary.get("host_params_added_mean")
    own = f" ({_count(host_added)} of them by the host's own growth)" if host_added else ""
    console.print(
        f"parameters added (mean): {_count(added)} on a host of "
        f"{_count(summary.get('host_params') or 0)}{own}"
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
        first, *rest = growth_clauses(summary["growth"])
        console.print(f"growth: {first}", highlight=False)
        for clause in rest:
            console.print(f"  {clause}", highlight=False)
    console.print(f"run directory: {run_dir}")
