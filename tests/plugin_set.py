"""Which plugins a test loads: the first-party ones (plugins/ of this repository) and the
fake components, named explicitly because autoloading is off in tests (see conftest.py)."""

from __future__ import annotations

import functools
import os
import tomllib
from pathlib import Path

from esper_core.plugins import DISABLE_AUTOLOAD_ENV, PluginManager

REPO = Path(__file__).resolve().parents[1]
# The fake components, loaded through the `tests` package (importable from the repository
# root: pytest's rootdir, or the working directory of `python -m esper_cli`).
FAKE_PLUGIN = "tests.fake_plugin"
# The same module loaded as a file, as `--plugin path/to/file.py` does.
FAKE_PLUGIN_FILE = REPO / "tests" / "fake_plugin.py"
# Command-line arguments selecting the fake components (tiny task, scripted policy,
# acc_delta reward): what most CLI tests run.
FAKE_COMPONENTS = (
    "--plugin",
    FAKE_PLUGIN,
    "--task",
    "tiny",
    "--policy",
    "scripted",
    "--reward",
    "acc_delta",
)


@functools.cache
def first_party() -> tuple[str, ...]:
    """The entry-point names of the plugin distributions under plugins/."""
    names: list[str] = []
    for pyproject in sorted((REPO / "plugins").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        names += sorted(project.get("entry-points", {}).get("esper", {}))
    return tuple(names)


def plugin_manager(*extra: str) -> PluginManager:
    """The first-party plugins and ``extra``; nothing else installed can interfere."""
    return PluginManager(extra=[*first_party(), *extra], autoload=False)


def subprocess_env(autoload: bool = False) -> dict[str, str]:
    """The environment of an ``esper`` subprocess: one torch thread; plugin autoloading
    only for tests of entry-point discovery."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if autoload:
        env.pop(DISABLE_AUTOLOAD_ENV, None)
    else:
        env[DISABLE_AUTOLOAD_ENV] = "1"
    return env


def write_broken_plugin(path: Path, kind: str, name: str, method: str, message: str) -> Path:
    """A plugin file registering ``KIND.broken``: the fake component ``name`` whose ``method``
    raises ValueError(message), for the tests of failures blamed on a plugin."""
    path.write_text(
        "from esper_core import hookimpl\n"
        "from esper_core.plugins import PluginManager\n"
        f"def _boom(self, *a, **k):\n    raise ValueError({message!r})\n"
        f"@hookimpl\ndef esper_register_{kind}(register):\n"
        f"    base = PluginManager(autoload=False, extra=[{FAKE_PLUGIN!r}]).get({kind!r}, {name!r})\n"
        f"    register(type('Broken', (base,), {{'name': 'broken', {method!r}: _boom}}))\n"
    )
    return path
