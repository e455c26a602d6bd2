"""``esper operators``: the installed growth operators, each with the sites it grows on
its small sample host and their sizes; ``check`` grows, folds and prunes that host."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

from esper_cli.context import plugin_manager
from esper_cli.registry_commands import PLUGIN_OPTION

WIDTH = 80  # a piped listing fits an 80-column terminal


def _chosen(ctx: click.Context, name: str | None, plugins: tuple[str, ...]) -> list[Any]:
    from esper_core.errors import UnknownComponentError

    pm = plugin_manager(ctx)
    pm.extend(list(plugins))
    registry = pm.registry("operators")
    chosen = [(key, op, registry.plugin_of(key)) for key, op in registry.items()]
    chosen = [c for c in chosen if name in (None, c[0])]
    if not chosen:
        raise UnknownComponentError(
            f"unknown growth operator {name!r}; installed: "
            f"{', '.join(registry.names()) or '(none)'}"
        )
    return chosen


def _row(key: str, operator: Any, plugin: str) -> dict[str, Any]:
    from esper_core.errors import PluginError
    from esper_core.lifecycle.blueprint_check import PLUGIN_FAULTS, raised

    try:
        host = operator.sample().host
        sites = [{"name": s.name, "size": s.size} for s in operator.sites(host)]
    except PLUGIN_FAULTS as exc:  # the plugin's code: name it, in one line
        raise PluginError(
            f"growth operator {key!r} (plugin {plugin!r}): its sample host {raised(exc)}; "
            f"fix the plugin or uninstall it"
        ) from None
    return {
        "name": key,
        "kind": operator.kind,
        "plugin": plugin,
        "sample": type(host).__name__,
        "sites": sites,
        "needs": operator.needs,
        "description": operator.description,
    }


@click.group(invoke_without_command=True)
@click.option("--kind", type=click.Choice(["width", "depth"]), help="Only this kind.")
@PLUGIN_OPTION
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def operators(
    ctx: click.Context, kind: str | None, plugins: tuple[str, ...], as_json: bool
) -> None:
    """List the installed growth operators: each one's kind, plugin, and the sites it
    grows on a small host of its kind, with their sizes (--json: what a host needs too).

    `esper operators check [NAME]` grows, folds and prunes that host (for plugin authors).
    A run's growth request names its operator (policies.static.widen_operator) or takes
    the one of its kind that the host declares sites for.
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = [_row(*c) for c in _chosen(ctx, None, plugins) if kind in (None, c[1].kind)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    # By plugin, one line per operator: with its plugin on each line, a CNN's depth
    # sites would not fit 80 columns.
    click.echo("Growth operators by plugin: name, kind, a small host, its sites: sizes")
    name_width = max((len(r["name"]) for r in rows), default=0)
    for plugin in dict.fromkeys(r["plugin"] for r in rows):
        click.echo(plugin)
        for r in (r for r in rows if r["plugin"] == plugin):
            sites = ", ".join(f"{s['name']}: {s['size']}" for s in r["sites"])
            line = f"  {r['name']:<{name_width}}  {r['kind']:<5}  {r['sample']}  {sites}"
            # A long list of sites wraps between its entries, under the host's name.
            indent = " " * (name_width + 11)
            click.echo(textwrap.fill(line, WIDTH, subsequent_indent=indent, break_long_words=False))


@operators.command("check")
@click.argument("name", required=False)
@PLUGIN_OPTION
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def operators_check(
    ctx: click.Context, name: str | None, plugins: tuple[str, ...], as_json: bool
) -> None:
    """Grow each operator's sample host (or NAME's) as a run would: bit for bit the old host
    at birth, the masked host's function folded at alpha 1, the old host back when pruned.
    Exit code 1 when any check fails."""
    from esper_core.lifecycle.operator_check import check_operator

    results = [
        {"name": key, "plugin": plugin, "problems": check_operator(op)}
        for key, op, plugin in _chosen(ctx, name, plugins)
    ]
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        for r in results:
            verdict = "ok  " if not r["problems"] else "FAIL"
            detail = "" if not r["problems"] else ": " + "; ".join(r["problems"])
            click.echo(f"{verdict} {r['name']} (plugin {r['plugin']}){detail}")
    if any(r["problems"] for r in results):
        ctx.exit(1)
