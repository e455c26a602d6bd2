"""`esper compare --runner ray` gives the results.json of the local runner (a 2 policies x 3
seeds study on the tiny task), on a private Ray instance the runner starts and stops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytest.importorskip("esper_ray")

from esper_core.plugins import PluginManager
from tests.plugin_set import FAKE_COMPONENTS

STUDY = [
    "compare",
    *FAKE_COMPONENTS,  # --policy scripted
    "--plugin",
    "policies.wait",
    "--seeds",
    "3",
    "--max-epochs",
    "3",
    "--set",
    "run.telemetry=[]",
    "--set",
    "lifecycle.min_training_epochs=1",
    "--jobs",
    "2",
    "--quiet",
]


@pytest.fixture
def esper():  # type: ignore[no-untyped-def]
    """`esper` in this process with exactly the plugins the cells load (autoloading is off in
    tests, and a cell must see the blueprints its experiment was validated with)."""
    from click.testing import CliRunner

    from esper_cli.main import build_cli

    group, pm = build_cli(PluginManager(extra=["runners.ray"], autoload=False))

    def call(*args: str) -> Any:
        return CliRunner().invoke(group, list(args), obj={"pm": pm})

    return call


def _stable(root: Path) -> dict[str, Any]:
    """results.json without wall-clock times, run directories relative to the experiment's."""
    data = json.loads((root / "results.json").read_text(encoding="utf-8"))
    for row in data["rows"]:
        row["metrics"].pop("wall_time")
    for cell in data["cells"]:
        cell.pop("wall_time")
        cell["run_dir"] = str(Path(cell["run_dir"]).relative_to(root))
    return data


@pytest.mark.slow
def test_ray_runner_gives_the_results_of_the_local_runner(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local = esper(*STUDY, "--out", str(tmp_path / "local"))
    assert local.exit_code == 0, local.output
    ray = esper(*STUDY, "--runner", "ray", "--out", str(tmp_path / "ray"))
    assert ray.exit_code == 0, ray.output
    results = _stable(tmp_path / "local")
    assert len(results["cells"]) == 6 and not results["missing"]
    assert _stable(tmp_path / "ray") == results
    # The runner stopped the instance it started.
    import ray as ray_module

    assert not ray_module.is_initialized()


def test_an_unknown_runner_or_option_fails_before_any_cell(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "x"
    result = esper(*STUDY, "--runner", "nowhere", "--out", str(out), "--dry-run")
    assert result.exit_code == 2
    assert "unknown runners component 'nowhere'; available: local, ray" in result.stderr
    experiment = tmp_path / "x.toml"
    experiment.write_text('runner = "ray"\nrunner_options = { cpus_per_cell = -1 }\n')
    result = esper("compare", str(experiment), *STUDY[1:], "--out", str(out), "--dry-run")
    assert result.exit_code == 2
    assert "runners.ray.cpus_per_cell: expected a number in (0, 1024]" in result.stderr
    assert not out.exists()
