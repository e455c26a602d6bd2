"""`esper compare --runner slurm` gives the results.json of the local runner (a 2 policies x 3
seeds study on the tiny task), through submitit's local executor: the same submission,
pickling and polling code as on SLURM, with local processes for nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("submitit")
pytest.importorskip("esper_slurm")

from esper_core.plugins import PluginManager
from tests.plugin_set import FAKE_COMPONENTS

STUDY = [
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
    """`esper` in this process with exactly the plugins the cells load."""
    from click.testing import CliRunner

    from esper_cli.main import build_cli

    group, pm = build_cli(PluginManager(extra=["runners.slurm"], autoload=False))

    def call(*args: str) -> Any:
        return CliRunner().invoke(group, list(args), obj={"pm": pm})

    return call


def _stable(root: Path) -> dict[str, Any]:
    data = json.loads((root / "results.json").read_text(encoding="utf-8"))
    for row in data["rows"]:
        row["metrics"].pop("wall_time")
    for cell in data["cells"]:
        cell.pop("wall_time")
        cell["run_dir"] = str(Path(cell["run_dir"]).relative_to(root))
    return data


@pytest.mark.slow
def test_slurm_runner_gives_the_results_of_the_local_runner(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local = esper("compare", *STUDY, "--out", str(tmp_path / "local"))
    assert local.exit_code == 0, local.output
    experiment = tmp_path / "slurm.toml"
    logs = tmp_path / "logs"
    experiment.write_text(
        f'runner = "slurm"\nrunner_options = {{ cluster = "local", folder = "{logs}" }}\n'
    )
    slurm = esper("compare", str(experiment), *STUDY, "--out", str(tmp_path / "slurm"))
    assert slurm.exit_code == 0, slurm.output
    results = _stable(tmp_path / "local")
    assert len(results["cells"]) == 6 and not results["missing"]
    assert _stable(tmp_path / "slurm") == results
    assert any(logs.iterdir())  # the jobs really went through submitit


def test_bad_slurm_options_fail_before_any_cell(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    experiment = tmp_path / "x.toml"
    experiment.write_text('runner = "slurm"\nrunner_options = { cluster = "pbs" }\n')
    out = tmp_path / "x"
    result = esper("compare", str(experiment), *STUDY, "--out", str(out), "--dry-run")
    assert result.exit_code == 2
    assert "runners.slurm.cluster: expected one of slurm, local, debug" in result.stderr
    assert not out.exists()
