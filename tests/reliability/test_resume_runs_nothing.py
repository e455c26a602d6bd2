"""``--resume`` holds a run directory's config.toml against its checkpoint
before importing or building anything the config names. A config.toml edited to name
other code (``tasks.dataset.model``/``data``) is refused in one line; the code never runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.errors import RunDirError
from esper_core.plugins import PluginManager
from esper_core.run.api import run
from tests.reliability import named_code

OWN = "tests.plugins.esper_tasks.own_data"
HOSTILE = "tests.reliability.named_code"
DATASET_RUN = [
    "run.task=dataset",
    f"tasks.dataset.model={OWN}:small_cnn",
    f"tasks.dataset.data={OWN}:splits",
    'tasks.dataset.slots=["0", "2"]',
    "tasks.dataset.batch_size=32",
    "run.policy=wait",
    "run.telemetry=[]",
    "env.max_epochs=1",
]


@pytest.mark.parametrize(
    ("option", "function"),
    [("model", "model_it_must_not_build"), ("data", "data_it_must_not_load")],
)
def test_a_config_edited_to_name_other_code_is_refused_before_it_runs(
    pm: PluginManager, tmp_path: Path, option: str, function: str
) -> None:
    run_dir = tmp_path / "r"
    run(load_config(overrides=DATASET_RUN), pm, run_dir=run_dir, quiet=True)
    config_file = run_dir / "config.toml"
    original = "small_cnn" if option == "model" else "splits"
    text = config_file.read_text()
    assert f'"{OWN}:{original}"' in text
    config_file.write_text(text.replace(f'"{OWN}:{original}"', f'"{HOSTILE}:{function}"'))
    named_code.CALLED.clear()
    edited = load_config(config_file, ["run.episodes=2"])
    with pytest.raises(
        RunDirError, match=rf"config changed since the checkpoint \(tasks\.dataset\.{option}"
    ):
        run(edited, pm, run_dir=run_dir, resume=True, quiet=True)
    assert named_code.CALLED == []
