"""The core commands: run, train, plugins, blueprints, config show."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from esper_cli.compare import compare
from esper_cli.context import dumps, note_run, plugin_manager
from esper_cli.options import F, build_config, config_options
from esper_cli.paths import output_dir


def _run_or_train(
    ctx: click.Context, mode: str, params: dict[str, Any], extra_run: dict[str, Any]
) -> None:
    from esper_core.plugins import split_selections
    from esper_core.run import api
    from esper_core.run.run_dir import default_run_dir, load_run_config

    pm = plugin_manager(ctx)
    resume = params.get("resume")
    if resume:
        run_dir = Path(resume)
        config = load_run_config(run_dir)
        # The stored config names the components; --plugin values only load modules (a
        # KIND.NAME loads its entry point when autoloading is off, selecting nothing).
        pm.extend(split_selections(params.get("plugins") or ())[0])
    else:
        config = build_config(pm, params, extra_run)
        run_dir = Path(params["out"]) if params.get("out") else default_run_dir(config, mode)
        output_dir(run_dir, "--out")
    note_run(ctx, run_dir, mode)
    quiet = bool(params.get("quiet") or params.get("as_json"))
    fn = api.run if mode == "run" else api.train

    def notify(message: str) -> None:
        click.echo(message, err=True)

    if params.get("nproc") is not None:
        summary = _launch(pm, config, mode, params, run_dir, bool(resume), quiet)
    else:
        summary = fn(config, pm, run_dir=run_dir, resume=bool(resume), quiet=quiet, notify=notify)
        if os.environ.get("RANK", "0") != "0":  # under torchrun only rank 0 reports
            return
    if params.get("as_json"):
        click.echo(dumps(summary))
    else:
        from esper_cli.display import print_summary

        print_summary(summary, str(run_dir))


def _launch(
    pm: Any,
    config: Any,
    mode: str,
    params: dict[str, Any],
    run_dir: Path,
    resume: bool,
    quiet: bool,
) -> dict[str, Any]:
    """``--nproc N``: the executor starts N local processes, each running this run as one rank."""
    from esper_core.errors import ConfigError
    from esper_core.plugins import split_selections
    from esper_core.run.resolve import resolve

    resolved = resolve(config, pm)
    launcher = getattr(resolved.executor.cls, "launch_local", None)
    if launcher is None:
        raise ConfigError(
            [
                f"--nproc: executor {config.run.executor!r} runs in one process; use --executor distributed"
            ]
        )
    loads, _ = split_selections(params.get("plugins") or ())
    # Every rank loads what this process loaded (entry points by name, modules, files), so
    # the ranks resolve the same components even with autoloading off.
    loaded = [i.name for i in pm.plugins() if not i.name.startswith("file:")]
    names = tuple(dict.fromkeys([*loaded, *loads]))
    job = functools.partial(rank_job, mode, config, names, run_dir, resume, quiet)
    summary: dict[str, Any] = launcher(int(params["nproc"]), job, resolved.executor.options)
    return summary


def rank_job(
    mode: str, config: Any, plugins: tuple[str, ...], run_dir: Path, resume: bool, quiet: bool
) -> dict[str, Any]:
    """One rank of a ``--nproc`` run (module level, so worker processes can unpickle it)."""
    from esper_core.plugins import PluginManager
    from esper_core.run import api

    pm = PluginManager()
    pm.extend(list(plugins))
    fn = api.run if mode == "run" else api.train
    return fn(
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
                type=click.Path(file_okay=False),
                help=f"Run directory (default: runs/<task>-<policy>-{mode}-<time>).",
            ),
            click.option(
                "--resume",
                type=click.Path(file_okay=False, exists=True),
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
    extra = {"episodes": params["episodes"]} if params.get("episodes") is not None else {}
    _run_or_train(ctx, "run", params, extra)


@click.command()
@config_options
@click.option(
    "--updates", type=int, help="Policy updates (one rollout = one episode of every env)."
)
@run_options("train")
@click.pass_context
def train(ctx: click.Context, **params: Any) -> None:
    """Train a learnable policy, by default PPO, over parallel envs."""
    sets = list(params.get("sets") or ())
    if params.get("updates") is not None:
        sets.insert(0, f"train.updates={params['updates']}")
    params["sets"] = tuple(sets)
    extra = (
        {}
        if params.get("policy")
        or any(p.startswith("policies.") for p in params.get("plugins") or ())
        else {"policy": "ppo"}
    )
    _run_or_train(ctx, "train", params, extra)


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
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Esper plugins")
    table.add_column("plugin", no_wrap=True)
    table.add_column("distribution")
    table.add_column("version", no_wrap=True)
    table.add_column("components")
    for info in infos:
        # The plugin name already says the kind; list the component names only.
        names = ", ".join(c.split(".", 1)[1] for c in info.components)
        table.add_row(info.name, info.distribution or "(local)", info.version or "-", names)
    Console().print(table)


@click.command()
@click.option("--topology", type=click.Choice(["cnn", "transformer"]), help="Only this topology.")
@click.option(
    "--channels",
    type=click.IntRange(1, 65536),
    default=64,
    show_default=True,
    help="Width for the parameter counts (1..65536).",
)
@click.option("--plugin", "plugins", multiple=True, help="Also load this plugin module or file.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def blueprints(
    ctx: click.Context, topology: str | None, channels: int, plugins: tuple[str, ...], as_json: bool
) -> None:
    """List registered blueprints with their parameter count at a given width."""
    pm = plugin_manager(ctx)
    pm.extend(list(plugins))
    rows = []
    for key, bp in pm.registry("blueprints").items():
        if topology and bp.topology != topology:
            continue
        rows.append(
            {
                "name": bp.name,
                "topology": bp.topology,
                "key": key,
                "params": int(bp.param_estimate(channels)),
                "identity_at_birth": bp.identity_at_birth,
                "description": bp.description,
                "plugin": pm.registry("blueprints").plugin_of(key),
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Blueprints (parameters at {channels} channels)")
    for column in ("name", "topology", "params", "identity at birth", "description", "plugin"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["name"],
            r["topology"],
            f"{r['params']:,}",
            "yes" if r["identity_at_birth"] else "no",
            r["description"],
            r["plugin"],
        )
    Console().print(table)


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
