"""Inputs that were taken silently, or refused with a message that points
the wrong way: a compare plan naming a derived baseline twice; ``/dev/zero`` as a charlm
corpus ("does not exist"); ``sys.exit`` in the user's own data function, blamed on the
first-party ``tasks.dataset`` plugin that called it."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper_core.errors import ConfigError
from tests.conftest import Invoke
from tests.reliability.cli_runs import failed_in_one_line
from tests.reliability.test_corpus_attack import CHARLM

OWN = "tests.plugins.esper_tasks.own_data"


def test_a_baseline_named_twice_is_refused() -> None:
    from esper_core.compare.experiment import parse_experiment

    data = {"baselines": ["size-sweep", "size-sweep"], "policies": ["wait"], "tasks": ["digits"]}
    with pytest.raises(ConfigError, match="baselines: 'size-sweep' is named twice"):
        parse_experiment(data)


def test_a_device_as_the_corpus_is_not_called_missing(invoke: Invoke, tmp_path: Path) -> None:
    args = [*CHARLM, "--set", "tasks.charlm.path=/dev/zero", "--out", str(tmp_path / "r")]
    line = failed_in_one_line(invoke(*args))
    assert "/dev/zero is not a regular file" in line and "does not exist" not in line


def test_sys_exit_in_the_users_data_function_names_that_function(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "exiting_data_53.py").write_text("import sys\n\ndef splits():\n    sys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = [
        "run", "--task", "dataset", "--quiet", "--max-epochs", "1",
        "--set", "tasks.dataset.data=exiting_data_53:splits",
        "--set", f"tasks.dataset.model={OWN}:small_cnn",
        "--set", 'tasks.dataset.slots=["0"]',
        "--set", "run.telemetry=[]",
        "--out", str(tmp_path / "r"),
    ]  # fmt: skip
    line = failed_in_one_line(invoke(*args))
    assert line.startswith("error: exiting_data_53:splits (run by plugin tasks.dataset's"), line
    assert "called sys.exit(0)" in line
