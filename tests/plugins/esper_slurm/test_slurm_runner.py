"""`esper compare --runner slurm` gives the results.json of the same study run in this
process (a 2 policies x 2 seeds study on the tiny task), through submitit's local
executor: the same submission, pickling and polling code as on SLURM, with local
processes for nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("submitit")
pytest.importorskip("esper_slurm")

from tests.plugins.runner_study import RUNNER_JOBS, STUDY, esper_with, reference, stable_results


@pytest.fixture
def esper() -> Any:
    return esper_with("runners.slurm")


@pytest.mark.slow
def test_slurm_runner_gives_the_reference_results(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    expected = reference(tmp_path / "reference")
    assert expected.exit_code == 0, expected.output
    experiment = tmp_path / "slurm.toml"
    logs = tmp_path / "logs"
    experiment.write_text(
        f'runner = "slurm"\nrunner_options = {{ cluster = "local", folder = "{logs}" }}\n'
    )
    slurm = esper(
        "compare", str(experiment), *STUDY[1:], *RUNNER_JOBS, "--out", str(tmp_path / "slurm")
    )
    assert slurm.exit_code == 0, slurm.output
    results = stable_results(tmp_path / "reference")
    assert len(results["cells"]) == 4 and not results["missing"]
    assert stable_results(tmp_path / "slurm") == results
    assert any(logs.iterdir())  # the jobs really went through submitit


def test_bad_slurm_options_fail_before_any_cell(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    experiment = tmp_path / "x.toml"
    experiment.write_text('runner = "slurm"\nrunner_options = { cluster = "pbs" }\n')
    out = tmp_path / "x"
    result = esper("compare", str(experiment), *STUDY[1:], "--out", str(out), "--dry-run")
    assert result.exit_code == 2
    assert "runners.slurm.cluster: expected one of slurm, local, debug" in result.stderr
    assert not out.exists()
