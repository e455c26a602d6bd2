"""The plugin manager: discovery, extra modules, registries and failures that name plugins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from esper_core.errors import DuplicateComponentError, PluginError, UnknownComponentError
from esper_core.plugins import PluginManager, split_selections

REWARD_PLUGIN = """
from typing import Any, ClassVar
from attrs import define
from esper_core import hookimpl

@define
class Options:
    scale: float = 1.0

class {cls}:
    name: ClassVar[str] = "{name}"
    description: ClassVar[str] = "test reward"
    Options: ClassVar[type] = Options

@hookimpl
def esper_register_rewards(register: Any) -> None:
    register({cls})
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def make_dist(root: Path, dist: str, module: str, entry_name: str, body: str) -> None:
    """A minimal installed distribution: a module plus a dist-info with an entry point."""
    (root / f"{module}.py").write_text(body)
    info = root / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[esper]\n{entry_name} = {module}\n")


def test_entry_point_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist(
        tmp_path,
        "esper-fake-dist",
        "esper_fake_mod",
        "rewards.fake",
        REWARD_PLUGIN.format(cls="Fake", name="fake"),
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = PluginManager(autoload=True)
    info = next(i for i in pm.plugins() if i.name == "rewards.fake")
    assert (info.distribution, info.version, info.components) == (
        "esper-fake-dist",
        "1.2.3",
        ("rewards.fake",),
    )
    assert pm.get("rewards", "fake").description == "test reward"


def test_autoload_can_be_disabled_and_an_entry_point_loaded_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(
        tmp_path,
        "esper-fake-dist",
        "esper_fake_mod2",
        "rewards.fake2",
        REWARD_PLUGIN.format(cls="Fake", name="fake2"),
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ESPER_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = PluginManager()
    assert "fake2" not in pm.registry("rewards")
    pm = PluginManager(extra=["rewards.fake2"])
    assert "fake2" in pm.registry("rewards")


def test_plugin_file_and_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "myplugin.py", REWARD_PLUGIN.format(cls="FromFile", name="from_file"))
    write(
        tmp_path / "my_module_plugin.py", REWARD_PLUGIN.format(cls="FromModule", name="from_module")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = PluginManager(autoload=False, extra=[str(path), "my_module_plugin"])
    assert pm.get("rewards", "from_file").__name__ == "FromFile"
    assert pm.get("rewards", "from_module").__name__ == "FromModule"
    assert pm.registry("rewards").plugin_of("from_module") == "my_module_plugin"


def test_misspelled_hook_fails_at_load(tmp_path: Path) -> None:
    path = write(
        tmp_path / "typo.py",
        """
        from esper_core import hookimpl

        @hookimpl
        def esper_register_reward(register):
            pass
    """,
    )
    with pytest.raises(PluginError, match=r"typo\.py.*unknown hook.*esper_register_reward"):
        PluginManager(autoload=False, extra=[str(path)])


def test_duplicate_component_names_both_plugins(tmp_path: Path) -> None:
    a = write(tmp_path / "a.py", REWARD_PLUGIN.format(cls="A", name="same"))
    b = write(tmp_path / "b.py", REWARD_PLUGIN.format(cls="B", name="same"))
    with pytest.raises(DuplicateComponentError) as info:
        PluginManager(autoload=False, extra=[str(a), str(b)])
    message = str(info.value)
    assert "'same'" in message and "a.py" in message and "b.py" in message


def test_raising_hook_names_the_plugin(tmp_path: Path) -> None:
    path = write(
        tmp_path / "broken.py",
        """
        from esper_core import hookimpl

        @hookimpl
        def esper_register_policies(register):
            raise RuntimeError("boom")
    """,
    )
    with pytest.raises(
        PluginError, match=r"broken\.py.*esper_register_policies.*RuntimeError: boom"
    ):
        PluginManager(autoload=False, extra=[str(path)])


def test_import_error_names_the_plugin(tmp_path: Path) -> None:
    path = write(tmp_path / "badimport.py", "import does_not_exist_anywhere\n")
    with pytest.raises(
        PluginError, match=r"badimport\.py.*failed to import.*does_not_exist_anywhere"
    ):
        PluginManager(autoload=False, extra=[str(path)])


def test_component_without_options_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path / "shapeless.py",
        """
        from esper_core import hookimpl

        class NoOptions:
            name = "x"
            description = "y"

        @hookimpl
        def esper_register_rewards(register):
            register(NoOptions)
    """,
    )
    with pytest.raises(PluginError, match="lacks Options"):
        PluginManager(autoload=False, extra=[str(path)])


def test_unknown_name_lists_available() -> None:
    pm = PluginManager(autoload=False)
    with pytest.raises(
        UnknownComponentError, match="unknown executors component 'nope'; available: serial"
    ):
        pm.get("executors", "nope")


def test_an_unknown_first_party_component_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Installed (the test requirements install esper-ray) but not loaded: name it.
    pm = PluginManager(autoload=False)
    with pytest.raises(UnknownComponentError) as info:
        pm.get("runners", "ray")
    assert str(info.value) == (
        "unknown runners component 'ray' (installed but not loaded: add --plugin runners.ray, "
        "or unset ESPER_DISABLE_PLUGIN_AUTOLOAD); available: local"
    )
    # Not installed (what requirements.txt alone gives): the package to install.
    for package, kind, name, home in (
        ("esper_ray", "runners", "ray", "plugins/esper-ray"),
        ("esper_slurm", "runners", "slurm", "plugins/esper-slurm"),
        ("esper_streams", "executors", "streams", "plugins/esper-streams"),
    ):
        monkeypatch.setitem(sys.modules, package, None)  # find_spec: not importable
        with pytest.raises(UnknownComponentError) as info:
            pm.get(kind, name)
        message = str(info.value)
        assert f"(it comes with {home}, not installed: pip install -e {home})" in message
        assert "\n" not in message
    # A name that is not ours gets no guess.
    with pytest.raises(UnknownComponentError, match=r"^unknown runners component 'nope'; avail"):
        pm.get("runners", "nope")


def test_the_first_party_table_matches_the_plugins_entry_points() -> None:
    import tomllib

    from esper_core.plugins import FIRST_PARTY_PLUGINS

    repo = Path(__file__).resolve().parents[2]
    declared = {}
    for pyproject in sorted((repo / "plugins").glob("*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        for plugin in data.get("project", {}).get("entry-points", {}).get("esper", {}):
            if not plugin.startswith("blueprints."):  # blueprints register by topology/name
                declared[plugin] = f"plugins/{pyproject.parent.name}"
    table = {plugin: home for home, plugins in FIRST_PARTY_PLUGINS for plugin in plugins}
    assert table == declared


def test_unknown_plugin_module() -> None:
    with pytest.raises(PluginError, match="no module, file or installed plugin"):
        PluginManager(autoload=False, extra=["no_such_module_xyz"])
    with pytest.raises(PluginError, match="no such file"):
        PluginManager(autoload=False, extra=["missing/plugin.py"])


def test_selections_are_split_from_loads() -> None:
    loads, selections = split_selections(
        ["rewards.pbrs", "telemetry.tensorboard", "x/y.py", "pkg.mod.sub"]
    )
    assert selections == {"rewards": ["pbrs"], "telemetry": ["tensorboard"]}
    assert "x/y.py" in loads and "pkg.mod.sub" in loads


def test_listing_does_not_import_torch() -> None:
    code = "import sys; from esper_core.plugins import PluginManager; PluginManager(autoload=True); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "a plugin module imports torch at import time"


def test_a_missing_optional_dependency_is_one_config_error_saying_how_to_install_it() -> None:
    from esper_core.errors import ConfigError
    from esper_core.plugins import require_module

    assert require_module("json", "x", "y").dumps([]) == "[]"
    with pytest.raises(ConfigError) as info:
        require_module("no_such_module_esper", "runners.nowhere", "pip install nowhere")
    assert str(info.value) == "runners.nowhere needs no_such_module_esper: pip install nowhere"
