"""The esper-tasks distribution: entry points, registration, lazy imports."""

from __future__ import annotations

import subprocess
import sys

from esper_core.components.task import Task
from esper_core.plugins import PluginManager
from esper_core.run.summary import is_language_model

NAMES = ["tasks.digits", "tasks.cifar10", "tasks.charlm", "tasks.dataset"]


def test_tasks_register_through_entry_points() -> None:
    # Named entry points only, so a broken plugin of another distribution cannot fail this.
    pm = PluginManager(NAMES, autoload=False)
    registry = pm.registry("tasks")
    assert {"digits", "cifar10", "charlm", "dataset"} <= set(registry.names())
    for name in ("digits", "cifar10", "charlm", "dataset"):
        assert registry.plugin_of(name) == f"tasks.{name}"
        cls = registry.get(name)
        assert cls.name == name and cls.description
    infos = {info.name: info for info in pm.plugins()}
    assert infos["tasks.digits"].distribution == "esper-tasks"
    assert infos["tasks.digits"].components == ("tasks.digits",)
    assert isinstance(registry.get("digits")(), Task)
    # Judged by loss and perplexity (summaries, the size-sweep frontier): the LM only.
    assert [n for n in ("digits", "cifar10", "charlm") if is_language_model(registry.get(n))] == [
        "charlm"
    ]


def test_only_the_named_plugin_loads_without_autoload() -> None:
    pm = PluginManager(extra=["tasks.cifar10"], autoload=False)
    assert pm.registry("tasks").names() == ["cifar10"]


def test_plugin_modules_do_not_import_heavy_libraries() -> None:
    # Only this distribution's plugins: others installed alongside are not under test.
    code = (
        "import sys\n"
        "import esper_tasks.digits, esper_tasks.cifar10, esper_tasks.charlm, esper_tasks.dataset\n"
        "from esper_core.plugins import PluginManager\n"
        "names = ['tasks.digits', 'tasks.cifar10', 'tasks.charlm', 'tasks.dataset']\n"
        "pm = PluginManager(names, autoload=False)\n"
        "assert pm.registry('tasks').names() == ['charlm', 'cifar10', 'dataset', 'digits']\n"
        "heavy = [m for m in ('torch', 'torchvision', 'sklearn', 'numpy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
