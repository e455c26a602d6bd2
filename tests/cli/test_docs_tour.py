"""Every command of the tour (docs/tour.md, and the README's examples) shows a few lines of
what it prints and how long it takes; each that takes under a minute is run here as shown
and its output must still start its lines the way the shown lines do.

A tour command is a ```bash block of one esper command followed by a ```text block (what
it prints; ``...`` marks lines left out). Its comment gives its time, ``(N s)`` of one
core, or says ``over a minute``: those are run only at a tiny scale, by
test_docs_commands.py. The shape check compares first words (``episode``, ``final``,
``growth:``, a table's ``│``): numbers change with the code, the lines a reader is told to
expect should not disappear unnoticed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from attrs import frozen

from tests.cli.test_docs_commands import COMMANDS, MODULES, SETUP_RUN, Run, esper
from tests.plugin_set import REPO

TOUR = REPO / "docs" / "tour.md"
README = REPO / "README.md"
_BLOCK = re.compile(r"^```bash\n(.*?)^```\n(?:\n```text\n(.*?)^```)?", re.M | re.S)
_SECONDS = re.compile(r"\((\d+) s\)\s*$")
LONG = "over a minute"
ELIDED = "..."


@frozen
class Shown:
    """One tour command: its docs-commands key, where it is shown, its time in seconds
    (None: over a minute) and the lines shown of its output."""

    text: str
    where: str
    seconds: int | None
    lines: tuple[str, ...]


def _blocks(path: Path) -> list[tuple[str, str | None]]:
    """Each ```bash block of a doc and the ```text block right after it (or None)."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(path.read_text(encoding="utf-8"))]


def _shown(block: str, output: str | None, where: str) -> Shown:
    (line,) = [x for x in block.splitlines() if x.strip()]  # one command a block
    argv = shlex.split(line, comments=True)
    assert output is not None, f"{where}: `{line}` shows no output (a ```text block after it)"
    seconds = None if LONG in line else _SECONDS.search(line)
    assert seconds or LONG in line, f"{where}: `{line}` says neither (N s) nor '{LONG}'"
    return Shown(
        shlex.join(argv),
        where,
        int(seconds.group(1)) if seconds else None,
        tuple(x for x in output.splitlines() if x.strip() and x.strip() != ELIDED),
    )


def tour() -> list[Shown]:
    """Every tour command: each block of docs/tour.md; of the README's, those of esper
    (the install lines are not part of the tour)."""
    shown = [_shown(block, out, "docs/tour.md") for block, out in _blocks(TOUR)]
    for block, out in _blocks(README):
        if block.startswith("esper "):
            shown.append(_shown(block, out, "README.md"))
    return shown


SHOWN = {s.text: s for s in tour()}


def test_the_tour_shows_every_command_with_its_output_and_time() -> None:
    """Parsing asserts each block's shape; here, that the tour still is one, and that every
    command shown as quick is one the docs-commands test runs (not a NotRun)."""
    assert len([s for s in SHOWN.values() if s.where == "docs/tour.md"]) >= 15
    assert any(s.where == "README.md" for s in SHOWN.values())
    for s in SHOWN.values():
        assert s.lines, f"{s.where}: `{s.text}` shows an empty output"
        if s.seconds is not None:
            assert s.seconds < 60, f"{s.where}: `{s.text}` takes {s.seconds} s: say '{LONG}'"
            assert isinstance(COMMANDS[s.text], Run), s.text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs-tour")
    (root / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    for name, source in MODULES.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(source, encoding="utf-8")
    return root


@pytest.fixture
def in_workdir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(workdir)
    yield workdir


def _first_words(text: str) -> set[str]:
    return {x.split()[0] for x in text.splitlines() if x.split()}


@pytest.mark.slow
@pytest.mark.parametrize("text", [t for t, s in SHOWN.items() if s.seconds is not None])
def test_a_quick_tour_command_prints_what_the_tour_shows(text: str, in_workdir: Path) -> None:
    """Run as shown (its ``needs`` and a ``runs/<run>`` it reads made first, at the tiny
    scale of the docs-commands test); every shown line's first word starts a real line."""
    way = COMMANDS[text]
    assert isinstance(way, Run)
    if way.needs is not None:
        need = COMMANDS[way.needs]
        assert isinstance(need, Run)
        made = esper([*shlex.split(way.needs)[1:], *need.tiny])
        assert made.exit_code == 0, made.output
    argv = shlex.split(text)[1:]
    if way.placeholder is not None:
        shown, real = way.placeholder
        if not (in_workdir / real / "summary.json").exists():
            assert esper(SETUP_RUN.split()[1:]).exit_code == 0
        argv = [real if a == shown else a for a in argv]
    result = esper(argv)
    assert result.exit_code == 0, f"{text}\n{result.output}\n{result.exception!r}"
    printed = _first_words(result.output)
    missing = [x for x in SHOWN[text].lines if x.split()[0] not in printed]
    assert missing == [], f"{SHOWN[text].where}: `{text}` no longer prints lines like {missing}"
