"""``esper compare``: policies x tasks x seeds with robust statistics (logic in esper_core.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from esper_cli.context import dumps, plugin_manager
from esper_cli.paths import output_dir
from esper_core.command_types import PathArg

if TYPE_CHECKING:
    from esper_core.compare.comparison import Plan


def _experiment_data(
    params: dict[str, Any], selections: dict[str, list[str]]
) -> tuple[dict[str, Any], str]:
    """The experiment file's content with the flags applied over it."""
    from esper_core.config_io import read_file
    from esper_core.errors import ConfigError

    source = params.get("experiment")
    data: dict[str, Any] = {}
    if source:
        if not Path(source).is_file():
            raise ConfigError([f"{source}: experiment file not found"])
        data = read_file(source)
    policies = [*params.get("policies", ()), *selections.get("policies", [])]
    tasks = [*params.get("tasks", ()), *selections.get("tasks", [])]
    if policies:  # flags replace the file's lists rather than extend them
        data["policies"] = policies
    if tasks:
        data["tasks"] = tasks
    for key in ("seeds", "baseline", "jobs", "out", "resamples", "runner"):
        if params.get(key) is not None:
            data[key] = params[key]
    if params.get("baselines"):
        data["baselines"] = list(params["baselines"])
    return data, source or "command line"


def _extra(params: dict[str, Any], selections: dict[str, list[str]]) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for kind, field_name in (("rewards", "reward"), ("executors", "executor")):
        if kind in selections:
            run[field_name] = selections[kind][-1]
    for flag in ("reward", "seed", "device"):
        if params.get(flag) is not None:
            run[flag] = params[flag]
    extra: dict[str, Any] = {"run": run} if run else {}
    if params.get("max_epochs") is not None:
        extra["env"] = {"max_epochs": params["max_epochs"]}
    return extra


def print_tables(results: Any, console: Any) -> None:
    from esper_cli.terminal import print_records
    from esper_core.compare.stalls import failed_arms
    from esper_core.compare.tables import (
        describe,
        describe_frontier,
        describe_training_runs,
        frontier_rows,
        sections,
        table_rows,
        training_runs_rows,
    )

    def show(title: str, header: list[str], rows: list[list[str]]) -> None:
        print_records(console, title, header, rows)

    for task, heading in sections(results):
        show(heading, *table_rows(results, task, short=True))
    for line in describe(results):
        note(console, line)
    print_tuning(results, console, show)
    if results.training_groups:
        show("across training runs", *training_runs_rows(results, short=True))
        note(console, describe_training_runs(results))
    for frontier in results.frontier:
        failed = failed_arms(results.failures, frontier.task)
        header, rows, sweep_header, sweep_rows = frontier_rows(frontier, True, failed)
        show(f"frontier: {frontier.task}", header, rows)
        show(f"size sweep: {frontier.task}", sweep_header, sweep_rows)
        note(console, describe_frontier(frontier))
    if results.no_growth:  # last, beside the prompt: no table above tested growth
        note(console, results.no_growth, "yellow")
    for failure in results.failures:
        note(console, f"did not train: {failure.sentence()}", "yellow")
    for caution in results.cautions:
        note(console, f"caution: {caution}", "yellow")


def print_tuning(results: Any, console: Any, show: Any) -> None:
    """What each arm's search chose, or that nothing was tuned (never left unsaid)."""
    from esper_core.compare.tuning_tables import chosen_rows, edge_lines, summary_line

    if results.tuning is None:
        note(console, summary_line(None), "yellow")
        return
    show("tuning: chosen", *chosen_rows(results.tuning))
    note(console, summary_line(results.tuning))
    for line in edge_lines(results.tuning):
        note(console, f"at the edge of the grid: {line}", "yellow")


def note(console: Any, text: str, style: str = "dim") -> None:
    """A paragraph of prose as written: "[tuning]" or "[95% ...]" is text, not rich markup.
    Wrapped between words at the console's width, piped too (``COLUMNS``, 80 by default):
    a 300-character line was cut mid-word by the terminal showing the pipe."""
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=False)


@click.command()
@click.argument("experiment", required=False, type=PathArg(dir_okay=False))
@click.option(
    "--policy",
    "policies",
    multiple=True,
    help="A policy to compare (repeatable): heuristic, random, wait, ppo:DIR/checkpoint.pt.",
)
@click.option(
    "--task", "tasks", multiple=True, help="A task (repeatable; default: the config's run.task)."
)
@click.option(
    "--seeds",
    type=int,
    help="Random seeds per policy and task (default 5): --seed, --seed + 1, ...",
)
@click.option("--seed", type=int, help="First random seed (run.seed).")
@click.option("--jobs", "-j", type=int, help="Cells run in parallel processes (default 1).")
@click.option(
    "--runner",
    help="Where cells run: local (default: --jobs processes here) or a runners.* plugin, e.g. ray.",
)
@click.option("--baseline", help="Policy label for P(policy better than baseline), e.g. wait.")
@click.option(
    "--baselines",
    "baselines",
    multiple=True,
    type=click.Choice(["static-final", "size-sweep"]),
    help="Derived baseline: static-final trains each growing run's final architecture from "
    "scratch; size-sweep trains the experiment file's [[sweep.sizes]] static hosts.",
)
@click.option(
    "--out",
    type=PathArg(file_okay=False),
    help="Experiment directory (default runs/compare-<file stem> or runs/compare-<tasks>-<policies>); "
    "running again continues it.",
)
@click.option(
    "--config",
    "config_path",
    type=PathArg(dir_okay=False),
    help="Shared TOML or JSON run config.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override one shared config value.",
)
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    metavar="KIND.NAME|MODULE|FILE.py",
    help="Load a plugin module or file, or select a component (policies.NAME adds a policy).",
)
@click.option("--reward", help="Reward family (only logged: policies are evaluated, not trained).")
@click.option("--device", help="Device of every cell, e.g. cpu.")
@click.option("--max-epochs", type=int, help="Epochs per episode (default: the task's).")
@click.option("--resamples", type=int, help="Bootstrap resamples (default 2000).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show the cells that would run (grouped by task and arm, copies of another "
    "cell's settings named) and an estimate of the time, from finished runs or, before "
    "any, each task's benchmark; every config and option is checked; run and build nothing.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print results.json to stdout instead of tables."
)
@click.pass_context
def compare(ctx: click.Context, **params: Any) -> None:
    """Compare policies over random seeds (and tasks): IQM, 95% bootstrap CIs, P(improvement).

    Either flags (esper compare --policy heuristic --policy wait --task digits --seeds 5
    --baseline wait) or an experiment file (esper compare experiments/x.toml; flags
    override it). Every (task, policy, random seed) is a run directory under OUT/cells/
    with one episode of one env; finished ones are reused and interrupted ones
    resumed when the command runs again. The whole experiment is checked before any
    run starts. Writes OUT/results.json, OUT/results.md, OUT/intervals.png and
    OUT/pareto.png (the task's metric against parameters and training FLOPs). Runs are
    ranked in the task's metric: test loss for a language model, test accuracy
    otherwise (sweep.metric). With the size-sweep baseline, also the sweep's frontier
    and each policy's verdict against it. With a [tuning] table in the experiment file,
    every arm's recipe is first searched on the tuning random seeds (runs under OUT/tuning/)
    and the evaluation runs use each arm's choice.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from esper_cli.terminal import output_console
    from esper_core.compare.cell_runner import make_runner
    from esper_core.compare.eta import Eta
    from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
    from esper_core.converter import unstructure
    from esper_core.plugins import split_selections

    pm = plugin_manager(ctx)
    loads, selections = split_selections(params.get("plugins") or ())
    pm.extend(loads)
    data, source = _experiment_data(params, selections)
    spec = parse_experiment(data, source)
    base = shared_config(
        spec, params.get("config_path"), _extra(params, selections), params.get("sets") or ()
    )
    experiment = build_experiment(spec, base, loads)
    if spec.out:
        out = Path(spec.out)
    elif params.get("experiment"):
        out = Path(base.run.out_dir) / f"compare-{Path(params['experiment']).stem}"
    else:
        out = experiment.default_out()
    out = output_dir(out, "--out" if params.get("out") else "experiment directory")
    jobs = spec.jobs or 1
    quiet = bool(params.get("quiet") or params.get("as_json"))
    err = Console(stderr=True)
    # Off a terminal (a log, CI) the bar draws nothing until the end: plain lines instead.
    plain = not quiet and not err.is_terminal
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=quiet or plain,
    )
    bar: dict[str, Any] = {}
    counts = {"done": 0, "total": 0}
    eta = Eta(0, jobs)

    def describe_plan(plan: Plan) -> str:
        searched = f" ({plan.tuning} of them tuning runs)" if plan.tuning else ""
        notes = [f"{plan.total} runs{searched} in {plan.directory}"]
        if plan.completed:
            notes.append(f"{plan.completed} already finished")
        if plan.resumable:
            notes.append(f"{plan.resumable} to resume from their checkpoint")
        if plan.broken:
            notes.append(f"{plan.broken} unfinished to run again")
        if plan.stale:
            notes.append(f"{plan.stale} made with another config to run again")
        if plan.duplicates:
            notes.append(
                f"{plan.duplicates} more repeat another run's settings: copied from it, not run "
                "again"
            )
        return "; ".join(notes)

    if params.get("dry_run"):
        from esper_core.compare.cell_runner import threads_per_job
        from esper_core.compare.out_dir import check_out
        from esper_core.compare.preview import preview, preview_lines

        make_runner(pm, spec.runner, spec.runner_options, jobs)  # an unknown runner fails here
        check_out(out)  # a directory of the user's is refused before any work, as by a run
        threads = experiment.base.run.threads or threads_per_job(jobs)
        shown = preview(experiment, pm, out, threads, jobs)
        # Every config and option is checked; tasks, data and policies are built (and so
        # checked) when the experiment runs, before any cell starts: a preview in a second.
        click.echo(f"experiment OK: {shown.runs} runs in {out}")
        for line in preview_lines(shown):
            click.echo(line)
        return

    # Not imported for --dry-run: the cell code, the statistics and the plots.
    from esper_core.compare.comparison import compare as run_compare

    def on_plan(plan: Plan) -> None:
        # Called again once a search has chosen each arm's values (the evaluation's
        # cells are known only then): the same bar, with the new counts.
        if "id" in bar:
            progress.update(bar["id"], total=plan.total, completed=plan.completed)
            if not quiet:
                err.print(f"tuning finished: {describe_plan(plan)}")
        else:
            if not quiet:
                err.print(describe_plan(plan))
            progress.start()
            bar["id"] = progress.add_task("cells", total=plan.total, completed=plan.completed)
        counts.update(done=plan.completed, total=plan.total)
        eta.left = plan.total - plan.completed

    def on_outcome(outcome: Any) -> None:
        if outcome.status == "failed":
            progress.console.print(f"[red]failed[/red] {outcome.directory}: {outcome.error}")
        if outcome.status in ("completed", "skipped", "failed"):
            name = "/".join(Path(outcome.directory).parts[-3:])
            progress.update(bar["id"], advance=1, description=f"last: {name}")
            counts["done"] += 1
            eta.finished(outcome.directory, outcome.status)
            if plain:
                click.echo(
                    f"cells {counts['done']}/{counts['total']}: {name} {outcome.status}; "
                    f"{eta.describe()}",
                    err=True,
                )

    def notify(message: str) -> None:
        progress.console.print(message)

    try:
        report = run_compare(
            experiment,
            pm,
            out,
            jobs=jobs,
            on_plan=on_plan,
            on_outcome=on_outcome,
            notify=notify,
            runner=spec.runner,
            runner_options=spec.runner_options,
        )
    finally:
        progress.stop()
    if params.get("as_json"):
        click.echo(dumps(unstructure(report.results)))
    else:
        console = output_console()
        print_tables(report.results, console)
        # The directory once, the files after it: four whole paths ran to 100 columns.
        console.print(
            f"results in {out}: results.md, results.json, intervals.png, pareto.png",
            markup=False,
            highlight=False,
            soft_wrap=False,
        )
    if report.failed:
        click.echo(
            f"error: {len(report.failed)} run(s) failed (listed above); run the same command again to retry them",
            err=True,
        )
        ctx.exit(1)
