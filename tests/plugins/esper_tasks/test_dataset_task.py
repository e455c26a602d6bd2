"""tasks.dataset: any dataset and any model as a task that `esper run` trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.errors import ConfigError, DataError, EsperError
from esper_core.plugins import PluginManager
from esper_core.run.api import run

MODULE = "tests.plugins.esper_tasks.own_data"
BASE = [
    "run.task=dataset",
    f"tasks.dataset.model={MODULE}:small_cnn",
    'tasks.dataset.slots=["0", "2"]',
    "tasks.dataset.batch_size=16",
    "run.policy=random",
    "run.telemetry=[]",
    "env.max_epochs=3",
]


def _run(pm: PluginManager, tmp_path: Path, *extra: str, data: str = f"{MODULE}:splits") -> dict:
    named = [f"tasks.dataset.data={data}"] if data else []
    config = load_config(overrides=[*BASE, *named, *extra])
    return run(config, pm, run_dir=tmp_path / "r", quiet=True)


def test_a_user_dataset_and_model_run_as_a_task(pm: PluginManager, tmp_path: Path) -> None:
    summary = _run(pm, tmp_path)
    assert summary["episodes_completed"] == 1
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert written["status"] == "completed"
    episode = written["episodes"][0]
    assert episode["final_test_acc"] is not None  # reported results use the test split
    assert {seed["slot_id"] for seed in written["seeds"]} <= {"0", "2"}


def test_datasets_served_item_by_item_run_too(pm: PluginManager, tmp_path: Path) -> None:
    summary = _run(pm, tmp_path, data=f"{MODULE}:item_splits")
    assert summary["episodes_completed"] == 1


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (f"{MODULE}:nothing", ConfigError, f"module '{MODULE}' has no function 'nothing'"),
        ("no_such_package.mod:splits", ConfigError, "cannot import 'no_such_package.mod'"),
        ("splits", ConfigError, "is not package.module:function"),
        (f"{MODULE}:two_splits", DataError, "returned a tuple; return (train, val, test)"),
    ],
)
def test_a_missing_function_or_a_wrong_return_is_one_clear_line(
    pm: PluginManager, tmp_path: Path, data: str, error: type[EsperError], message: str
) -> None:
    with pytest.raises(error) as info:
        _run(pm, tmp_path, data=data)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_module_in_the_current_directory_is_found_without_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`esper` (a console script) does not put the current directory on sys.path; a
    mydata.py beside the user's config is found anyway, and sys.path is left as it was."""
    import sys

    from esper_tasks.dataset import load_object

    name = f"mydata_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}_helpers.py").write_text("N = 3\n")
    (tmp_path / f"{name}.py").write_text(
        f"from {name}_helpers import N\n\ndef splits():\n    return N\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    try:
        assert load_object(f"{name}:splits", "data")() == 3
        assert sys.path == before
    finally:
        for module in (name, f"{name}_helpers"):
            sys.modules.pop(module, None)
    with pytest.raises(ConfigError) as info:
        load_object("not_here_at_all:splits", "data")
    message = str(info.value)
    assert "\n" not in message
    assert (
        f"no not_here_at_all.py or not_here_at_all/ in the current directory {tmp_path}" in message
    )
    assert "add that directory to PYTHONPATH" in message


def test_an_image_folder_without_its_splits_says_what_it_needs(
    pm: PluginManager, tmp_path: Path
) -> None:
    (tmp_path / "images" / "train" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="lacks val/, test/"):
        _run(pm, tmp_path, f"tasks.dataset.image_folder={tmp_path / 'images'}", data="")


def test_an_image_folder_is_a_dataset(pm: PluginManager, tmp_path: Path) -> None:
    from PIL import Image

    for split, n in (("train", 4), ("val", 2), ("test", 2)):
        for label, colour in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
            folder = tmp_path / "images" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (12, 10), colour).save(folder / f"{i}.png")
    summary = _run(
        pm,
        tmp_path,
        f"tasks.dataset.image_folder={tmp_path / 'images'}",
        "tasks.dataset.image_size=8",
        "env.max_epochs=2",
        data="",
    )
    assert summary["episodes_completed"] == 1


def test_a_run_without_data_or_model_says_which_option_to_set(
    pm: PluginManager, tmp_path: Path
) -> None:
    config = load_config(overrides=["run.task=dataset", "run.telemetry=[]"])
    with pytest.raises(ConfigError) as info:
        run(config, pm, run_dir=tmp_path / "r", quiet=True)
    message = str(info.value)
    assert "tasks.dataset: name the data with data=package.module:function" in message
    assert "tasks.dataset.model:" in message and "\n" not in message


def test_esper_report_reads_a_dataset_tasks_run(pm: PluginManager, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from esper_cli.main import build_cli
    from tests.plugin_set import plugin_manager

    _run(pm, tmp_path, 'run.telemetry=["jsonl", "csv"]')
    group, cli_pm = build_cli(plugin_manager())
    result = CliRunner().invoke(group, ["report", str(tmp_path / "r")], obj={"pm": cli_pm})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "report.md").is_file()
