"""What the plugins register: ``esper plugins`` (each plugin and its components) and
``esper blueprints`` (the blueprints with their parameter counts; ``check`` builds them)."""

from __future__ import annotations

import json

import click

from esper_cli.context import plugin_manager
from esper_core.components.blueprint import TOPOLOGIES


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

    # One table per topology, its plugins in the title: with a topology and a plugin
    # column on every row the table could not fit 80 columns, so piped it was printed
    # at its natural width (~230 columns). Four columns fit, the description wrapping.
    console = output_console()
    for topo in dict.fromkeys(r["topology"] for r in rows):
        members = [r for r in rows if r["topology"] == topo]
        source = ", ".join(dict.fromkeys(r["plugin"] for r in members))
        table = Table(
            title=f"{topo} blueprints ({source}; params at {channels} channels)",
            title_justify="left",
        )
        table.add_column("name", no_wrap=True)
        table.add_column("params", no_wrap=True, justify="right")
        # The header wraps between its words; the cells (yes/no) are short.
        table.add_column("identity at birth")
        table.add_column("description")  # wraps between words
        for r in members:
            table.add_row(
                r["name"],
                f"{r['params']:,}",
                "yes" if r["identity_at_birth"] else "no",
                r["description"],
            )
        print_table(console, table)


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
