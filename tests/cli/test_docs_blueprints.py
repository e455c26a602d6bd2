"""Every blueprint the docs name exists in the documented install (requirements.txt: the
first-party plugins), and docs/own-model.md's table lists every one of them (the
table listed `dilated`, which only examples/third-party-plugin registers, and
left out `conv_layer`, `widen` and `widen4x`)."""

from __future__ import annotations

import json
import re

from tests.plugin_set import REPO, plugin_manager

DOCS = ("README.md", "docs/own-model.md")


def installed() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for _, bp in plugin_manager().registry("blueprints").items():
        out.setdefault(bp.topology, set()).add(bp.name)
    return out


def table(text: str) -> dict[str, set[str]]:
    """own-model.md's "Which blueprints fit" table: each topology's backticked names (the
    notes column may name a plugin's, so only the blueprints column)."""
    rows = {}
    for line in text.split("## Which blueprints fit", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in ("cnn", "transformer", "mlp"):
            rows[cells[0]] = set(re.findall(r"`([a-z][a-z0-9_]*)`", cells[1]))
    return rows


def named(text: str) -> set[str]:
    """The names a command line or config in the docs gives as blueprints: the values of
    ``env.blueprints=[...]``, ``NAME@SLOT`` of a schedule, and ``topology/NAME``."""
    names = set()
    for listed in re.findall(r"env\.blueprints=(\[[^\]]*\])", text):
        names |= set(json.loads(listed))
    names |= set(re.findall(r'"([a-z][a-z0-9_]*)@r\d+c\d+"', text))
    names |= set(re.findall(r"`(?:cnn|mlp|transformer)/([a-z][a-z0-9_]*)`", text))
    return names


def test_the_own_model_table_lists_exactly_the_installed_blueprints() -> None:
    text = (REPO / "docs/own-model.md").read_text(encoding="utf-8")
    assert table(text) == installed()


def test_every_blueprint_a_doc_names_is_installed() -> None:
    every = set().union(*installed().values())
    for doc in DOCS:
        names = named((REPO / doc).read_text(encoding="utf-8"))
        assert names, f"{doc}: the patterns found no blueprint name"  # the test still looks
        assert names <= every, f"{doc} names blueprints not installed: {sorted(names - every)}"
