"""The shell commands of the docs (README.md, docs/, CONTRIBUTING.md, each plugin's
README and the example plugin's): found in their ```bash blocks, one argv each.

A command is what a reader would paste: a line (``\\`` continues it), cut at ``#``
comments and at ``&&``, without the environment assignments before its program
(``OMP_NUM_THREADS=1 esper ...``) and with ``torchrun ... --no-python`` taken off the
command it launches. The commands of Esper's own programs and of the tools the docs tell
a reader to run on Esper's output are kept (:data:`PROGRAMS`); ``pip install`` lines are
the documented install, checked on their own (:func:`pip_installs`), and ``export`` lines
are the reader's shell. A command in a fenced block of another language would escape all
of this: :func:`untagged_commands` finds them.
"""

from __future__ import annotations

import re
import shlex

from attrs import frozen

from tests.plugin_set import REPO

DOCS = (
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "CONTRIBUTING.md",
    *sorted((REPO / "plugins").glob("*/README.md")),
    REPO / "examples" / "third-party-plugin" / "README.md",
)
ESPER = ("esper", ".venv/bin/esper")
PYTHON = ("python", "python3.11", ".venv/bin/python")
PROGRAMS = (*ESPER, *PYTHON, "tensorboard", "wandb")
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
_FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_PIP = ("pip", ".venv/bin/pip")
# Fences a reader takes for shell commands but that are not ```bash.
_SHELL_TAGS = ("", "sh", "shell", "console", "zsh")
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


def _argvs(line: str) -> list[tuple[str, ...]]:
    """Each command of a line, its environment assignments and a torchrun launch taken off."""
    words = shlex.split(line, comments=True)
    out: list[tuple[str, ...]] = []
    while words:
        cut = words.index("&&") if "&&" in words else len(words)
        command, words = words[:cut], words[cut + 1 :]
        while command and _ASSIGNMENT.match(command[0]):
            command = command[1:]
        if command[:1] == ["torchrun"] and "--no-python" in command:
            command = command[command.index("--no-python") + 1 :]
        if command:
            out.append(tuple(command))
    return out


def _commands(line: str) -> list[tuple[str, ...]]:
    return [argv for argv in _argvs(line) if argv[0] in PROGRAMS]


def _bash_lines() -> list[tuple[str, str]]:
    """Each line of every ```bash block, with the file that shows it."""
    return [
        (line, str(path.relative_to(REPO)))
        for path in DOCS
        for block in _BLOCK.findall(path.read_text(encoding="utf-8"))
        for line in _lines(block)
    ]


def documented_commands() -> list[Documented]:
    """Every command of Esper's programs in the ```bash blocks of README.md and docs/, in
    the order the docs show them."""
    return [Documented(argv, where) for line, where in _bash_lines() for argv in _commands(line)]


def pip_installs() -> list[Documented]:
    """Every ``pip install`` the ```bash blocks show."""
    return [
        Documented(argv, where)
        for line, where in _bash_lines()
        for argv in _argvs(line)
        if argv[0] in _PIP and argv[1:2] == ("install",)
    ]


def untagged_commands() -> list[str]:
    """Lines of untagged or other shell blocks (not ```bash) that start with one of the
    docs' programs (``FILE: LINE``): a command there is neither run nor parsed."""
    found = []
    for path in DOCS:
        for tag, block in _FENCED.findall(path.read_text(encoding="utf-8")):
            if tag not in _SHELL_TAGS:  # ```text, ```python, ```toml: not shell commands
                continue
            for line in _lines(block):
                words = line.split()
                if words and words[0] in (*PROGRAMS, *_PIP, "torchrun"):
                    found.append(f"{path.relative_to(REPO)}: {line.strip()}")
    return found


def existing_paths(argv: tuple[str, ...]) -> list[str]:
    """The repository files a command names (an example config, a script): removed or
    renamed, the doc is wrong even where the command is not run."""
    return [w for w in argv if re.fullmatch(r"(examples|docs|benchmarks)/\S+\.(toml|py|json)", w)]
