"""``esper benchmark``: the controller benchmark of a suite file (logic in esper_core.benchmark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from esper_cli.context import plugin_manager
from esper_cli.paths import output_dir
from esper_core.command_types import PathArg
from esper_core.config_limits import MAX_COMPARE_SEEDS, MAX_JOBS

SPLITS = ("evaluation", "training")


@click.command()
@click.argument("suite", type=PathArg(dir_okay=False))
@click.option(
    "--split",
    type=click.Choice(SPLITS),
    default="evaluation",
    show_default=True,
    help="Which pairs to run: the evaluation pairs (never used for training or selection) "
    "or the training pairs (for training controllers and choosing their defaults).",
)
@click.option(
    "--until",
    type=click.Choice(["tuning", "menu", "evaluation"]),
    default="evaluation",
    show_default=True,
    help="The last phase to run: tuning (each pair's rate, what `esper train --suite` "
    "needs), menu (and the oracle) or evaluation.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1, MAX_JOBS),
    help="Cells run in parallel processes (default 1).",
)
@click.option(
    "--out",
    type=PathArg(file_okay=False),
    help="Benchmark directory (default: the suite's out, or runs/benchmark-<file stem>, "
    "then /<split>); running again continues it.",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, MAX_COMPARE_SEEDS),
    help="Evaluation seeds (default: the suite's, 10).",
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
    metavar="MODULE|FILE.py",
    help="Load a plugin module or file.",
)
@click.option(
    "--only",
    multiple=True,
    metavar="LABEL",
    help="Run only these policies under test or candidates (wait and the oracle always "
    "run); repeat for several.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the suite, build every pair's oracle menu from its host and print the menus "
    "and the runs each phase would make; train nothing.",
)
@click.pass_context
def benchmark(ctx: click.Context, **params: Any) -> None:
    """Score controllers on a suite of host/task pairs against wait and an oracle.

    Each pair's learning rate is tuned for wait on the tuning seeds; its oracle menu (wait,
    a seed at each slot, host widening and deepening where the host takes them, each at
    the suite's moments) runs on the tuning seeds at that rate and the best entry by
    validation is the oracle; wait, the oracle and each policy under test then run on the
    evaluation seeds. Writes OUT/results.json and OUT/results.md: where growth pays, the
    normalized score (policy - wait) / (oracle - wait); where the oracle is wait, the
    extra training FLOPs and the metric lost against wait; IQM and bootstrap intervals
    over pairs x evaluation seeds, and per pair (docs/results/controller-benchmark.md).
    """
    from esper_core.benchmark.run_suite import benchmark as run_benchmark
    from esper_core.benchmark.run_suite import unfinished
    from esper_core.benchmark.suite import build_suite, load_suite_file
    from esper_core.config import RunConfig
    from esper_core.config_io import apply_overrides
    from esper_core.converter import structure

    pm = plugin_manager(ctx)
    pm.extend(list(params.get("plugins") or ()))
    spec = load_suite_file(params["suite"])
    if params.get("seeds") is not None:
        spec.seeds = params["seeds"]
    data = dict(spec.config)
    if params.get("sets"):
        data = apply_overrides(data, list(params["sets"]))
    suite = build_suite(spec, structure(data, RunConfig))
    if params.get("only"):
        suite = _only(suite, list(params["only"]))
    split = params["split"]
    root = Path(params.get("out") or spec.out or f"runs/benchmark-{Path(params['suite']).stem}")
    out = output_dir(root if params.get("out") else root / split, "--out")
    if params.get("dry_run"):
        _dry_run(suite, split, pm)
        return
    counts = {"done": 0}

    def outcome(o: Any) -> None:
        counts["done"] += 1
        if o.status == "failed":
            click.echo(f"failed: {o.directory}: {(o.error or '').splitlines()[0]}", err=True)

    results = run_benchmark(
        suite,
        pm,
        out,
        split,
        jobs=int(params.get("jobs") or spec.jobs or 1),
        plugins=tuple(params.get("plugins") or ()),
        notify=lambda m: click.echo(m, err=True),
        on_outcome=outcome,
        until=params["until"],
    )
    for line in unfinished(results):
        click.echo(f"unfinished: {line}; run the same command again", err=True)
    click.echo((out / "results.md").read_text(encoding="utf-8"))
    click.echo(f"results: {out / 'results.md'}, {out / 'results.json'}", err=True)


def _only(suite: Any, labels: list[str]) -> Any:
    """The suite with only the policies and candidates named (and the groups of training
    runs all of whose runs are kept)."""
    import attrs

    known = [a.label for a in (*suite.policies, *suite.candidates)]
    unknown = [x for x in labels if x not in known]
    if unknown:
        raise click.UsageError(
            f"--only {', '.join(unknown)}: not a policy or candidate of the suite; "
            f"its labels: {', '.join(known)}"
        )
    return attrs.evolve(
        suite,
        policies=tuple(a for a in suite.policies if a.label in labels),
        candidates=tuple(a for a in suite.candidates if a.label in labels),
        training_runs=tuple(g for g in suite.training_runs if set(g.runs) <= set(labels)),
    )


def _dry_run(suite: Any, split: str, pm: Any) -> None:
    from esper_core.benchmark.phases import evaluation_arms
    from esper_core.benchmark.run_suite import plan_pairs

    plans = plan_pairs(suite, split, pm)
    tuning = sum(len(p.pair.grid) for p in plans) * len(suite.tuning_seeds)
    menu = sum(len(p.menu) - 1 for p in plans) * len(suite.tuning_seeds)
    arms = len(evaluation_arms(suite, None, split)) + 1  # with the oracle's arm where growth pays
    evaluation = len(plans) * arms * len(suite.seeds)
    for p in plans:
        click.echo(
            f"{p.pair.task.label} ({p.pair.task.name}, lr {list(p.pair.grid)}): {len(p.menu)} entries"
        )
        click.echo("  " + ", ".join(e.label for e in p.menu))
        for line in p.left_out:
            click.echo(f"  not on the menu: {line}")
    click.echo(
        f"{len(plans)} {split} pairs: {tuning} tuning runs, {menu} menu runs, "
        f"at most {evaluation} evaluation runs"
    )
