"""An existing output directory's files are never written over.

``esper run``/``esper train --out DIR`` (``--out .`` in a project), ``esper report --out``
and ``esper compare --out`` name directories that may hold the user's own files: one
that shares a name with a file the command writes is refused in one line, the directory
left as it was. A resume, a report written again and a comparison run again continue
what Esper wrote there before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.reliability.cli_runs import TINY, failed_in_one_line

USER_FILE = "user,data\n"


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir() if p.is_file()}


@pytest.mark.parametrize(
    ("name", "telemetry"),
    [("config.toml", "[]"), ("metrics.csv", '["csv"]'), ("events.jsonl", '["jsonl"]')],
)
def test_a_new_run_never_writes_over_a_users_file(
    invoke: Invoke, tmp_path: Path, name: str, telemetry: str
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / name).write_text(USER_FILE)
    args = [*TINY, "--set", f"run.telemetry={telemetry}", "--max-epochs", "2"]
    line = failed_in_one_line(invoke("run", *args, "--out", str(project)))
    assert f"already holds {name!r}" in line and "choose another --out" in line
    assert (project / name).read_text() == USER_FILE
    # Nothing of the run was left behind either (but its lock file).
    assert sorted(p.name for p in project.iterdir()) == sorted([name, ".esper.lock"])


def test_a_run_with_its_files_elsewhere_still_uses_the_directory(
    invoke: Invoke, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "notes.txt").write_text(USER_FILE)
    args = [*TINY, "--set", 'run.telemetry=["jsonl", "csv"]', "--max-epochs", "2"]
    result = invoke("run", *args, "--out", str(project))
    assert result.exit_code == 0, result.output
    assert (project / "notes.txt").read_text() == USER_FILE
    # ...and the run it wrote resumes: its own files are not "someone else's".
    result = invoke("run", "--plugin", TINY[1], "--resume", str(project), "--episodes", "2")
    assert result.exit_code == 0, (result.output, result.exception)


def test_report_out_never_writes_over_a_users_report(invoke: Invoke, tmp_path: Path) -> None:
    run_dir, plots = tmp_path / "run", tmp_path / "plots"
    result = invoke("run", *TINY, "--set", 'run.telemetry=["jsonl"]', "--out", str(run_dir))
    assert result.exit_code == 0, result.output
    plots.mkdir()
    for name in ("report.md", "accuracy.png"):
        (plots / name).write_text(USER_FILE)
        line = failed_in_one_line(invoke("report", str(run_dir), "--out", str(plots)))
        assert repr(name) in line or f"{plots / name} is not a report" in line, line
        assert _snapshot(plots) == {name: USER_FILE}
        (plots / name).unlink()
    # A report written there before is Esper's: writing it again refreshes it.
    for _ in range(2):
        result = invoke("report", str(run_dir), "--out", str(plots), "--dpi", "40")
        assert result.exit_code == 0, result.output


def test_compare_out_never_writes_over_a_users_results(invoke: Invoke, tmp_path: Path) -> None:
    from esper_core.compare.out_dir import check_out
    from esper_core.errors import RunDirError

    project = tmp_path / "proj"
    project.mkdir()
    for name in ("results.md", "pareto.png", "cells"):
        (project / name).write_text(USER_FILE)
        with pytest.raises(RunDirError, match=f"holds {name!r} but no experiment.json"):
            check_out(project)
        (project / name).unlink()
    check_out(project)  # other files of the user's do not stand in the way
    (project / "experiment.json").write_text("{}")
    (project / "results.md").write_text(USER_FILE)
    check_out(project)  # a comparison's own directory: run again, it continues
