"""The commands that run: run and train (a job built from the flags and config, launched on
one process or many); the list of every core command, the others from their modules."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import click

from esper_cli.benchmark import benchmark
from esper_cli.compare import compare
from esper_cli.config_command import config
from esper_cli.context import dumps, note_run, plugin_manager
from esper_cli.operator_commands import operators
from esper_cli.options import F, build_config, config_options
from esper_cli.paths import output_dir
from esper_cli.registry_commands import blueprints, plugins
from esper_core.command_types import PathArg


@attrs.frozen
class Job:
    """What ``esper run`` and ``esper train`` were asked for, ready to drive."""

    mode: str
    pm: Any
    config: Any
    run_dir: Path
    resume: bool
    quiet: bool
    params: dict[str, Any]
    # Said once the checkpoint has been verified (a refused resume changes nothing).
    resume_notes: list[str] = attrs.field(factory=list)

    def options(self) -> dict[str, Any]:
        """The keyword options of :func:`esper_core.run.api.drive`."""
        return {
            "run_dir": self.run_dir,
            "resume": self.resume,
            "quiet": self.quiet,
            "notify": lambda message: click.echo(message, err=True),
            "opened": self._opened,
        }

    def _opened(self) -> None:
        for note in self.resume_notes:
            click.echo(note, err=True)


def _job(ctx: click.Context, mode: str, params: dict[str, Any], extra_run: dict[str, Any]) -> Job:
    from esper_cli.resume import resumed_config
    from esper_core.plugins import split_selections
    from esper_core.run.run_dir import default_run_dir

    pm = plugin_manager(ctx)
    resume = params.get("resume")
    notes: list[str] = []
    if resume:
        run_dir = Path(resume)
        config = resumed_config(run_dir, params, mode, notes.append)
        # The stored config names the components; --plugin values only load modules (a
        # KIND.NAME loads its entry point when autoloading is off, selecting nothing).
        pm.extend(split_selections(params.get("plugins") or ())[0])
    else:
        config = build_config(pm, params, extra_run)
        run_dir = Path(params["out"]) if params.get("out") else default_run_dir(config, mode)
        output_dir(run_dir, "--out")
    note_run(ctx, run_dir, mode)
    quiet = bool(params.get("quiet") or params.get("as_json"))
    return Job(mode, pm, config, run_dir, bool(resume), quiet, params, notes)


def _report(job: Job, summary: dict[str, Any]) -> None:
    if job.params.get("nproc") is None and os.environ.get("RANK", "0") != "0":
        return  # under torchrun only rank 0 reports
    if job.params.get("as_json"):
        click.echo(dumps(summary))
    else:
        from esper_cli.display import print_summary

        print_summary(summary, str(job.run_dir))


def _launch(job: Job, loop_class: type) -> dict[str, Any]:
    """``--nproc N``: the executor starts N local processes, each running this run as one rank."""
    from esper_core.errors import ConfigError
    from esper_core.plugins import split_selections
    from esper_core.run.resolve import resolve

    pm, config = job.pm, job.config
    resolved = resolve(config, pm)
    launcher = getattr(resolved.executor.cls, "launch_local", None)
    if launcher is None:
        raise ConfigError(
            [
                f"--nproc: executor {config.run.executor!r} runs in one process; use --executor distributed"
            ]
        )
    loads, _ = split_selections(job.params.get("plugins") or ())
    # Every rank loads what this process loaded (entry points by name, modules, files), so
    # the ranks resolve the same components even with autoloading off.
    loaded = [i.name for i in pm.plugins() if not i.name.startswith("file:")]
    names = tuple(dict.fromkeys([*loaded, *loads]))
    rank = functools.partial(
        rank_job, loop_class, config, names, job.run_dir, job.resume, job.quiet
    )
    summary: dict[str, Any] = launcher(int(job.params["nproc"]), rank, resolved.executor.options)
    return summary


def rank_job(
    loop_class: type,
    config: Any,
    plugins: tuple[str, ...],
    run_dir: Path,
    resume: bool,
    quiet: bool,
) -> dict[str, Any]:
    """One rank of a ``--nproc`` run (module level, so worker processes can unpickle it)."""
    from esper_core.plugins import PluginManager
    from esper_core.run import api

    pm = PluginManager()
    pm.extend(list(plugins))
    return api.drive(
        loop_class,
        config,
        pm,
        run_dir=run_dir,
        resume=resume,
        quiet=quiet,
        notify=lambda msg: click.echo(msg, err=True),
    )


def run_options(mode: str) -> Callable[[F], F]:
    """--out, --resume, --nproc, --quiet and --json of ``esper run`` and ``esper train``."""

    def decorate(fn: F) -> F:
        decorators = [
            click.option(
                "--out",
                type=PathArg(file_okay=False),
                help=f"Run directory (default: runs/<task>-<policy>-{mode}-<time>).",
            ),
            click.option(
                "--resume",
                type=PathArg(file_okay=False, exists=True),
                help="Continue the run in this directory.",
            ),
            click.option(
                "--nproc",
                type=click.IntRange(min=1),
                help="Start N local processes, one rank each (with --executor distributed).",
            ),
            click.option("--quiet", is_flag=True, help="No live display."),
            click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
        ]
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return decorate


@click.command()
@config_options
@click.option("--episodes", type=int, help="Episodes per env.")
@run_options("run")
@click.pass_context
def run(ctx: click.Context, **params: Any) -> None:
    """Run episodes of a policy (default: the heuristic on digits)."""
    from esper_core.run.api import drive
    from esper_core.run.loops import EpisodeLoop

    extra = {"episodes": params["episodes"]} if params.get("episodes") is not None else {}
    job = _job(ctx, "run", params, extra)
    # The epoch is reached through drive() straight from here (docs/architecture.md).
    if params.get("nproc") is not None:
        _report(job, _launch(job, EpisodeLoop))
    else:
        _report(job, drive(EpisodeLoop, job.config, job.pm, **job.options()))


@click.command()
@config_options
@click.option(
    "--updates",
    type=int,
    help="Policy updates (train.updates); each learns from one rollout of "
    "policies.ppo.rollout_episodes episodes of every env (4 by default).",
)
@click.option(
    "--suite",
    type=PathArg(dir_okay=False, exists=True),
    help="Train on a benchmark suite's training pairs, one drawn per episode, each at "
    "its tuned rate (run `esper benchmark SUITE --split training` first).",
)
@run_options("train")
@click.pass_context
def train(ctx: click.Context, **params: Any) -> None:
    """Train a learnable policy, by default PPO, over parallel envs."""
    from esper_core.run.api import drive
    from esper_core.run.loops import TrainLoop

    sets = list(params.get("sets") or ())
    if params.get("updates") is not None and not params.get("resume"):
        sets.insert(0, f"train.updates={params['updates']}")
    params["sets"] = tuple(sets)
    extra = (
        {}
        if params.get("policy")
        or any(p.startswith("policies.") for p in params.get("plugins") or ())
        else {"policy": "ppo"}
    )
    if params.get("suite") and params.get("resume"):
        raise click.UsageError("--suite starts a run; a resumed run keeps the pairs it had")
    job = _job(ctx, "train", params, extra)
    if params.get("suite"):
        from esper_cli.suite_pairs import with_suite_pairs

        job = attrs.evolve(job, config=with_suite_pairs(job.config, params["suite"], job.pm))
    if params.get("nproc") is not None:
        _report(job, _launch(job, TrainLoop))
    else:
        _report(job, drive(TrainLoop, job.config, job.pm, **job.options()))


COMMANDS = [run, train, compare, benchmark, plugins, blueprints, operators, config]
