"""The esper-blueprints distribution: entry points, registration, lazy imports."""

from __future__ import annotations

import subprocess
import sys

from esper_core.components.blueprint import Blueprint
from esper_core.plugins import PluginManager


def test_blueprints_register_through_entry_points() -> None:
    # Named entry points only, so a broken plugin of another distribution cannot fail this.
    pm = PluginManager(["blueprints.cnn", "blueprints.transformer"], autoload=False)
    cnn = [bp.name for bp in pm.blueprints_for("cnn")]
    transformer = [bp.name for bp in pm.blueprints_for("transformer")]
    assert set(cnn) >= {
        "noop", "norm", "attention", "depthwise", "bottleneck", "conv_small", "conv_light", "conv_heavy",
    }  # fmt: skip
    assert set(transformer) >= {
        "noop",
        "norm",
        "lora",
        "lora_large",
        "attention",
        "mlp_small",
        "mlp",
    }
    assert cnn == sorted(cnn)  # a stable order for the policy's blueprint head
    registry = pm.registry("blueprints")
    assert registry.plugin_of("cnn/conv_light") == "blueprints.cnn"
    assert registry.plugin_of("transformer/lora") == "blueprints.transformer"
    assert isinstance(registry.get("transformer/mlp"), Blueprint)
    infos = {info.name: info for info in pm.plugins()}
    assert infos["blueprints.cnn"].distribution == "esper-blueprints"


def test_plugin_modules_do_not_import_torch() -> None:
    # Only this distribution's plugins: others installed alongside are not under test.
    code = (
        "import sys\n"
        "import esper_blueprints.cnn, esper_blueprints.transformer\n"
        "from esper_core.plugins import PluginManager\n"
        "pm = PluginManager(['blueprints.cnn', 'blueprints.transformer'], autoload=False)\n"
        "assert len(pm.blueprints_for('cnn')) >= 8\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
