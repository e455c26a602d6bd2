"""CONTRIBUTING.md's "Writing a plugin" shows a reward, a blueprint and a task; each is
loaded from the text as a plugin file and used, so the section cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

from esper_core.config import load_config
from esper_core.lifecycle.blueprint_check import check_blueprint
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.plugin_set import REPO


def _examples(tmp_path: Path) -> list[str]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("## Writing a plugin")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    paths = []
    for i, code in enumerate(blocks):
        path = tmp_path / f"contributing_{i}.py"
        path.write_text(code, encoding="utf-8")
        paths.append(str(path))
    return paths


def test_the_reward_blueprint_and_task_of_contributing_run(tmp_path: Path) -> None:
    files = _examples(tmp_path)
    assert len(files) == 3
    pm = PluginManager(autoload=False, extra=[*files, "policies.random"])
    assert pm.registry("rewards").names() == ["accuracy_gain"]
    assert pm.registry("blueprints").names() == ["cnn/dilated"]
    assert pm.registry("tasks").names() == ["stripes"]
    assert check_blueprint(pm.get("blueprints", "cnn/dilated"), 8) == []
    config = load_config(
        overrides=[
            "run.task=stripes",
            "tasks.stripes.n_train=64",
            "run.reward=accuracy_gain",
            "run.policy=random",
            "run.telemetry=[]",
            "run.threads=1",
            "env.max_epochs=3",
            "lifecycle.min_training_epochs=1",
        ]
    )
    summary = run(config, pm, run_dir=tmp_path / "run", quiet=True)
    assert summary["episodes_completed"] == 1
