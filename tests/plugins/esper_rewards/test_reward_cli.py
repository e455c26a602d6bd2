"""End to end: ``esper run --plugin rewards.<family>`` on the fake tiny task."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.plugins import DISABLE_AUTOLOAD_ENV, PluginManager
from tests.plugins.esper_rewards.builders import FAMILIES

FAKE_PLUGIN = Path(__file__).resolve().parents[2] / "fake_plugin.py"


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.name)
def test_run_with_each_family(cls: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Load only what the command names, so other installed plugins cannot interfere;
    # --plugin rewards.<name> then loads this family through its entry point.
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    group, pm = build_cli()
    out = tmp_path / "run"
    args = [
        "run",
        "--plugin", f"rewards.{cls.name}",
        "--plugin", str(FAKE_PLUGIN),
        "--task", "tiny",
        "--policy", "scripted",
        "--max-epochs", "4",
        "--set", "run.telemetry=[]",
        "--out", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(group, args, obj={"pm": pm}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["reward"] == cls.name
    components = set(summary["reward_components"])
    # the env adds governor_penalty itself on a rollback; nothing else may appear
    assert set(cls.components) <= components <= set(cls.components) | {"governor_penalty"}
    episode = summary["episodes"][0]
    assert episode["total_reward"] == pytest.approx(sum(episode["reward_components"].values()))


def test_entry_points_register_the_five_families() -> None:
    names = [f"rewards.{cls.name}" for cls in FAMILIES]
    available = {ep.name: ep.value for ep in entry_points(group="esper")}
    for cls, name in zip(FAMILIES, names):
        assert available[name] == cls.__module__
    pm = PluginManager(extra=names, autoload=False)
    registry = pm.registry("rewards")
    assert sorted(registry.names()) == sorted(cls.name for cls in FAMILIES)
    for cls in FAMILIES:
        assert registry.get(cls.name) is cls
        assert pm.registry("rewards").plugin_of(cls.name) == f"rewards.{cls.name}"
