"""The core commands: run, train, plugins, blueprints, config show."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import click

from esper_cli.compare import compare
from esper_cli.context import dumps, note_run, plugin_manager
from esper_cli.options import F, build_config, config_options
from esper_cli.paths import output_dir
from esper_core.command_types import PathArg
from esper_core.components.blueprint import TOPOLOGIES


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
    job = _job(ctx, "train", params, extra)
    if params.get("nproc") is not None:
        _report(job, _launch(job, TrainLoop))
    else:
        _report(job, drive(TrainLoop, job.config, job.pm, **job.options()))


@click.command()
@click.option("--plugin", "plugins", multiple=True, help="Also load this plugin module or file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def plugins(ctx: click.Context, plugins: tuple[str, ...], as_json: bool) -> None:
    """List plugins: name, distribution, version and the components each registers."""
    from attrs import asdict

    pm = plugin_manager(ctx)
    pm.extend(list(plugins))
    infos = pm.plugins()
    if as_json:
        click.echo(json.dumps([asdict(i) for i in infos], indent=2))
        return
    from rich.table import Table

    from esper_cli.terminal import output_console, print_table

    table = Table(title="Esper plugins", title_justify="left")
    # Names never wrap; the distribution's version and the list of components wrap between
    # words, so the table fits 80 columns with every name whole.
    table.add_column("plugin", no_wrap=True)
    table.add_column("distribution")
    table.add_column("components")
    for info in infos:
        # The plugin name already says the kind; list the component names only.
        names = ", ".join(c.split(".", 1)[1] for c in info.components)
        source = (
            f"{info.distribution} {info.version or ''}".strip() if info.distribution else "(local)"
        )
        table.add_row(info.name, source, names)
    print_table(output_console(), table)


CHANNELS_OPTION = click.option(
    "--channels",
    type=click.IntRange(1, 65536),
    default=64,
    show_default=True,
    help="Width for the parameter counts and the checks (1..65536).",
)
PLUGIN_OPTION = click.option(
    "--plugin", "plugins", multiple=True, help="Also load this plugin module or file."
)


@click.group(invoke_without_command=True)
@click.option("--topology", type=click.Choice(TOPOLOGIES), help="Only this topology.")
@CHANNELS_OPTION
@PLUGIN_OPTION
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def blueprints(
    ctx: click.Context, topology: str | None, channels: int, plugins: tuple[str, ...], as_json: bool
) -> None:
    """List registered blueprints with their parameter count at a given width.

    `esper blueprints check [NAME]` builds and checks them (for plugin authors).
    """
    if ctx.invoked_subcommand is not None:
        return
    from esper_core.lifecycle.blueprint_check import (
        PLUGIN_FAULTS,
        blueprint_error,
        raised,
        sample_spec,
    )

    pm = plugin_manager(ctx)
    pm.extend(list(plugins))
    registry = pm.registry("blueprints")
    rows = []
    for key, bp in registry.items():
        if topology and bp.topology != topology:
            continue
        plugin = registry.plugin_of(key)
        try:
            params = bp.estimate_for(sample_spec(bp, channels))
        except PLUGIN_FAULTS as exc:  # the plugin's code: name it, in one line
            raise blueprint_error(
                bp, plugin, channels, f"its param_estimate {raised(exc)}"
            ) from None
        rows.append(
            {
                "name": bp.name,
                "topology": bp.topology,
                "key": key,
                "params": params,
                "identity_at_birth": bp.identity_at_birth,
                "description": bp.description,
                "plugin": plugin,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    from esper_cli.terminal import output_console, print_table

    table = Table(title=f"Blueprints (parameters at {channels} channels)", title_justify="left")
    for column in ("name", "topology", "params", "identity at birth", "description", "plugin"):
        # Only the description wraps (between words); names and numbers stay whole.
        table.add_column(column, no_wrap=column != "description")
    for r in rows:
        table.add_row(
            r["name"],
            r["topology"],
            f"{r['params']:,}",
            "yes" if r["identity_at_birth"] else "no",
            r["description"],
            r["plugin"],
        )
    print_table(output_console(), table)


@blueprints.command("check")
@click.argument("name", required=False)
@CHANNELS_OPTION
@PLUGIN_OPTION
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def blueprints_check(
    ctx: click.Context, name: str | None, channels: int, plugins: tuple[str, ...], as_json: bool
) -> None:
    """Build each blueprint (or NAME: a name or a topology/name key) and check it as a run
    would at first use: output shape at two sizes, finite output, parameter count against
    param_estimate, identity at birth when claimed. Exit code 1 when any check fails."""
    from esper_core.errors import UnknownComponentError
    from esper_core.lifecycle.blueprint_check import check_blueprint

    pm = plugin_manager(ctx)
    pm.extend(list(plugins))
    registry = pm.registry("blueprints")
    chosen = [(k, bp) for k, bp in registry.items() if name in (None, k, bp.name)]
    if not chosen:
        raise UnknownComponentError(
            f"unknown blueprint {name!r}; available: {', '.join(registry.names()) or '(none)'}"
        )
    results = [
        {"key": key, "plugin": registry.plugin_of(key), "problems": check_blueprint(bp, channels)}
        for key, bp in chosen
    ]
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        for r in results:
            verdict = "ok  " if not r["problems"] else "FAIL"
            detail = "" if not r["problems"] else ": " + "; ".join(r["problems"])
            click.echo(f"{verdict} {r['key']} (plugin {r['plugin']}, {channels} channels){detail}")
    if any(r["problems"] for r in results):
        ctx.exit(1)


@click.group()
def config() -> None:
    """Inspect configuration."""


@config.command("show")
@config_options
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every key, unset ones too, with its default and description (see docs/configuration.md).",
)
@click.pass_context
def config_show(ctx: click.Context, show_all: bool, **params: Any) -> None:
    """Print the fully resolved config (defaults and component options filled in) as TOML."""
    from esper_core.config import dump_toml
    from esper_core.run.resolve import resolve

    pm = plugin_manager(ctx)
    resolved = resolve(build_config(pm, params), pm)
    if not show_all:
        click.echo(dump_toml(resolved.config), nl=False)
        return
    from esper_core.config_docs import annotated_toml

    run = resolved.config.run
    components = {
        f"tasks.{run.task}": resolved.task.options,
        f"rewards.{run.reward}": resolved.reward.options,
        f"policies.{resolved.policy_ref.name}": resolved.policy.options,
        f"executors.{run.executor}": resolved.executor.options,
        **{
            f"telemetry.{name}": c.options
            for name, c in zip(dict.fromkeys(run.telemetry), resolved.telemetry)
        },
    }
    click.echo(annotated_toml(resolved.config, components))


COMMANDS = [run, train, compare, plugins, blueprints, config]
