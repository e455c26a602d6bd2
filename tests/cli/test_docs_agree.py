"""The tour's table of shared options (docs/tour.md) says which command takes --config, --set
and --plugin; the commands themselves must agree (the README once promised all three
everywhere)."""

from __future__ import annotations

import re

import click

from esper_cli.main import build_cli
from tests.plugin_set import REPO, plugin_manager

FLAGS = ("--config", "--set", "--plugin")


def _readme_table() -> dict[str, dict[str, bool]]:
    text = (REPO / "docs" / "tour.md").read_text(encoding="utf-8")
    header = "| command | `--config` | `--set` | `--plugin` |"
    assert header in text
    rows: dict[str, dict[str, bool]] = {}
    for line in text[text.index(header) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for command in re.findall(r"`([^`]+)`", cells[0]):
            rows[command] = {flag: cell == "yes" for flag, cell in zip(FLAGS, cells[1:])}
    return rows


def _command(group: click.Group, path: str) -> click.Command:
    command: click.Command = group
    for part in path.split():
        assert isinstance(command, click.Group)
        found = command.commands.get(part)
        assert found is not None, f"docs/tour.md names `{path}`, which does not exist"
        command = found
    return command


def test_readme_option_table_matches_the_commands() -> None:
    group, _ = build_cli(plugin_manager())
    table = _readme_table()
    assert {"run", "train", "compare", "config show", "plugins", "blueprints", "report"} <= set(
        table
    )
    for path, promised in table.items():
        options = {o for p in _command(group, path).params for o in p.opts}
        for flag, yes in promised.items():
            assert (flag in options) == yes, f"`esper {path}`: docs/tour.md says {flag} is {yes}"
    # Every command of the CLI is in the table.
    listed = {path.split()[0] for path in table}
    assert set(group.commands) <= listed, sorted(set(group.commands) - listed)
