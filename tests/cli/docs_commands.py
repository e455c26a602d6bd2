"""The shell commands of README.md and docs/: found in their ```bash blocks, one argv each.

A command is what a reader would paste: a line (``\\`` continues it), cut at ``#``
comments and at ``&&``, without the environment assignments before its program
(``OMP_NUM_THREADS=1 esper ...``) and with ``torchrun ... --no-python`` taken off the
command it launches. Only the commands of Esper's own programs are kept (:data:`PROGRAMS`);
``pip`` and ``export`` lines are the reader's shell, not Esper.
"""

from __future__ import annotations

import re
import shlex

from attrs import frozen

from tests.plugin_set import REPO

DOCS = (REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")))
ESPER = ("esper", ".venv/bin/esper")
PYTHON = ("python", "python3.11", ".venv/bin/python")
PROGRAMS = (*ESPER, *PYTHON)
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@frozen
class Documented:
    """One command as a doc shows it: ``text`` is its argv joined back (the key of its
    entry in the docs-commands test), ``where`` the file that shows it."""

    argv: tuple[str, ...]
    where: str

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    @property
    def is_esper(self) -> bool:
        return self.argv[0] in ESPER


def _lines(block: str) -> list[str]:
    return block.replace("\\\n", " ").splitlines()


def _commands(line: str) -> list[tuple[str, ...]]:
    words = shlex.split(line, comments=True)
    out: list[tuple[str, ...]] = []
    while words:
        cut = words.index("&&") if "&&" in words else len(words)
        command, words = words[:cut], words[cut + 1 :]
        while command and _ASSIGNMENT.match(command[0]):
            command = command[1:]
        if command[:1] == ["torchrun"] and "--no-python" in command:
            command = command[command.index("--no-python") + 1 :]
        if command and command[0] in PROGRAMS:
            out.append(tuple(command))
    return out


def documented_commands() -> list[Documented]:
    """Every command of Esper's programs in the ```bash blocks of README.md and docs/, in
    the order the docs show them."""
    found = []
    for path in DOCS:
        for block in _BLOCK.findall(path.read_text(encoding="utf-8")):
            for line in _lines(block):
                for argv in _commands(line):
                    found.append(Documented(argv, str(path.relative_to(REPO))))
    return found


def existing_paths(argv: tuple[str, ...]) -> list[str]:
    """The repository files a command names (an example config, a script): removed or
    renamed, the doc is wrong even where the command is not run."""
    return [w for w in argv if re.fullmatch(r"(examples|docs|benchmarks)/\S+\.(toml|py|json)", w)]
