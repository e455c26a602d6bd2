"""The layout's rules, read from the source with ``ast`` (nothing is imported):

- no import cycle among the modules of esper_core, esper_cli and each plugin's package,
  counting every import that runs, wherever it stands: a lazy import inside a function only
  hides a cycle. Imports under ``if TYPE_CHECKING:`` never run and are left out here;
- no module of esper_core, esper_cli or a plugin longer than 400 lines;
- every stage set is spelled in esper_core/lifecycle/rules.py alone;
- the layers are core <- plugins and core <- cli: no module under plugins/ imports
  esper_cli (not even lazily, nor for type checking: a plugin installs without the CLI
  package's internals being its API);
- counting the type-checking imports as well, no circle of more than two modules (they
  cost nothing at run time, but a circle of types is a sign that a value type lives above
  its users): the env's helpers take what they read of it through narrow protocols.

Run as a script (``python -m tests.test_architecture``) it prints the cycles of esper_core,
esper_cli and the plugins twice: the runtime ones and those that the type-checking imports
close as well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.plugin_set import REPO

PACKAGES = ("esper_core", "esper_cli")
MAX_LINES = 400
RULES = Path("esper_core/lifecycle/rules.py")
MAX_TYPE_CIRCLE = 2


def module_name(path: Path, base: Path = REPO) -> str:
    """``esper_core/run/runner.py`` -> ``esper_core.run.runner``; a package's __init__ is the
    package. ``base`` is the folder the package stands in (a plugin's distribution folder)."""
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(*roots: str) -> dict[str, Path]:
    """The modules of each package folder in ``roots`` (relative to the repository), by the
    name they are imported as."""
    return {
        module_name(path, (REPO / root).parent): path
        for root in roots
        for path in sorted((REPO / root).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


# Each plugin distribution's package: plugins/<distribution>/<package>/.
PLUGIN_PACKAGES = tuple(
    str(p.parent.relative_to(REPO))
    for p in sorted((REPO / "plugins").glob("*/*/__init__.py"))
    if "tests" not in p.parts
)
MODULES = modules(*PACKAGES)
ALL_MODULES = modules(*PACKAGES, *PLUGIN_PACKAGES)


def imported(name: str, path: Path, known: dict[str, Path], types: bool = False) -> set[str]:
    """The known modules that ``name`` imports anywhere in its body: ``import a.b``,
    ``from a import b`` (``b`` a submodule or a name in ``a``) and relative imports;
    with ``types``, those under ``if TYPE_CHECKING:`` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree) if types else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {t for t in targets if t in known and t != name}


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``) without an else."""
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(c for c in ast.iter_child_nodes(node) if not _type_checking_only(c))


def import_graph(types: bool = False) -> dict[str, set[str]]:
    """Who imports whom among esper_core, esper_cli and the plugins' packages."""
    return {name: imported(name, path, ALL_MODULES, types) for name, path in ALL_MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path) for every strongly connected component that has one."""
    return [_path_back(graph, min(c), c) for c in components(graph) if len(c) > 1]


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph``: the modules of one component all
    reach each other; a component of more than one module is a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            found.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _path_back(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest path start -> ... -> start inside one strongly connected component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & within):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start} is in a cycle but no path leads back to it")


def test_the_graph_sees_lazy_submodule_and_relative_imports(tmp_path: Path) -> None:
    """The walker itself: a cycle hidden in a function, through ``from pkg import mod``
    and a relative import, is found and printed as a path; a type-only import is not one."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from .c import thing\n")
    (pkg / "c.py").write_text("import os\nthing = 1\ndef g():\n    import pkg.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.e import E\n"
    )
    (pkg / "e.py").write_text("from pkg import d\n")
    known = {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
        for p in pkg.glob("*.py")
    }
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == set() and graph["pkg.e"] == {"pkg.d"}  # types only: no cycle
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    with_types = {name: imported(name, path, known, True) for name, path in known.items()}
    circles = sorted(sorted(c) for c in components(with_types) if len(c) > 1)
    assert circles == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"]]


def test_no_import_cycles() -> None:
    assert {name.partition(".")[0] for name in MODULES} == set(PACKAGES)
    assert {"esper_tasks.common", "esper_telemetry.console"} <= set(ALL_MODULES)
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_type_checking_circle_of_more_than_two_modules() -> None:
    """Counting the type-checking imports too, no circle takes in more than two modules (a
    value type used by both sides lives below them); the env's helpers read it through
    narrow protocols."""
    found = [sorted(c) for c in components(import_graph(types=True)) if len(c) > MAX_TYPE_CIRCLE]
    assert not found, "circles of type-checking imports:\n" + "\n".join(", ".join(c) for c in found)


def test_no_long_modules() -> None:
    offenders = {
        str(path.relative_to(REPO)): lines
        for path in ALL_MODULES.values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not offenders, f"modules over {MAX_LINES} lines (split them by job): " + ", ".join(
        f"{p} ({n})" for p, n in sorted(offenders.items())
    )


def _is_stage(node: ast.expr) -> bool:
    """``Stage.X`` (or ``anything.Stage.X``)."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "Stage") or (
        isinstance(owner, ast.Attribute) and owner.attr == "Stage"
    )


def stage_set_literals(path: Path) -> Iterator[int]:
    """Lines of set or tuple displays (``{...}``, ``(...)``, ``frozenset([...])``) that list
    two or more ``Stage.X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        elements: list[ast.expr] = []
        if isinstance(node, ast.Set | ast.Tuple):
            elements = node.elts
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("set", "frozenset", "tuple")
            and node.args
            and isinstance(node.args[0], ast.List)
        ):
            elements = node.args[0].elts
        if sum(_is_stage(e) for e in elements) >= 2:
            yield node.lineno


def test_stage_sets_live_in_rules_only() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in ALL_MODULES.values()
        if path.relative_to(REPO) != RULES
        for line in stage_set_literals(path)
    ]
    assert not offenders, (
        f"stage sets spelled outside {RULES} (import them from there): " + ", ".join(offenders)
    )


def test_the_stage_set_check_sees_the_spellings(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "a = {Stage.A, Stage.B}\n"
        "b = frozenset({Stage.A, Stage.B})\n"
        "c = x in (stages.Stage.A, stages.Stage.B)\n"
        "d = frozenset([Stage.A, Stage.B])\n"
        "e = (Stage.A, 3)\n"
        "f = {Stage.A: 1, Stage.B: 2}\n"
    )
    assert list(sorted(set(stage_set_literals(path)))) == [1, 2, 3, 4]


def cli_imports(path: Path) -> Iterator[int]:
    """Lines where ``path`` imports ``esper_cli`` or a module of it, in any form, anywhere
    (a lazy import in a function, ``if TYPE_CHECKING:``, ``importlib.import_module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
        ):
            names = [node.args[0].value]
        if any(n == "esper_cli" or n.startswith("esper_cli.") for n in names):
            yield node.lineno


def test_no_plugin_imports_the_cli() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "plugins").rglob("*.py"))
        if "__pycache__" not in path.parts
        for line in cli_imports(path)
    ]
    assert not offenders, (
        "plugins import esper_cli (the layers are core <- plugins, core <- cli; move what "
        "the plugin needs into esper_core or into the plugin): " + ", ".join(offenders)
    )


def test_the_cli_import_check_sees_every_spelling(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import esper_cli\n"
        "from esper_cli.paths import output_dir\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import esper_cli.main as m\n"
        "def f():\n"
        "    from esper_cli import commands\n"
        "    importlib.import_module('esper_cli.options')\n"
        "import esper_cli_other\n"
        "from esper_core.command_types import PathArg\n"
        "from . import esper_cli\n"
    )
    assert sorted(cli_imports(path)) == [1, 2, 5, 7, 8]


def _print_cycles() -> None:
    for label, types in (("runtime", False), ("with type-checking imports", True)):
        found = cycles(import_graph(types))
        print(f"{label}: {len(found)} cycle(s)")
        for cycle in found:
            print("  " + " -> ".join(cycle))


if __name__ == "__main__":
    _print_cycles()
