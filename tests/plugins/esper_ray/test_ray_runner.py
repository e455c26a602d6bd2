"""`esper compare --runner ray` gives the results.json of the same study run in this
process (a 2 policies x 2 seeds study on the tiny task), on a private Ray instance the
runner starts and stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytest.importorskip("esper_ray")

from tests.plugins.runner_study import RUNNER_JOBS, STUDY, esper_with, reference, stable_results


@pytest.fixture
def esper() -> Any:
    return esper_with("runners.ray")


@pytest.mark.slow
def test_ray_runner_gives_the_reference_results(esper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    expected = reference(tmp_path / "reference")
    assert expected.exit_code == 0, expected.output
    ray = esper(*STUDY, *RUNNER_JOBS, "--runner", "ray", "--out", str(tmp_path / "ray"))
    assert ray.exit_code == 0, ray.output
    results = stable_results(tmp_path / "reference")
    assert len(results["cells"]) == 4 and not results["missing"]
    assert stable_results(tmp_path / "ray") == results
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
