"""The CLI's one error boundary: what each kind of failure looks like, --debug, and the
path arguments a user can get wrong."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from esper_cli import config_command, main
from esper_cli.boundary import EXIT_INTERRUPTED, EXIT_USER_ERROR, shown
from esper_cli.context import RunTarget
from esper_core.errors import ConfigError, PluginError
from esper_core.run.interrupts import Interrupted
from tests.plugin_set import FAKE_COMPONENTS

RUN = [
    "run",
    *FAKE_COMPONENTS,
    "--set",
    "run.telemetry=[]",
    "--max-epochs",
    "2",
    "--quiet",
]


def one_line(result: Any) -> str:
    assert result.exit_code == EXIT_USER_ERROR, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    line: str = lines[0]
    return line


def test_user_errors_interrupts_and_bugs_are_told_apart() -> None:
    error = shown(ConfigError(["a:\n  b"]))
    assert error is not None and (error.message, error.code) == ("error: a: b", EXIT_USER_ERROR)
    stop = shown(Interrupted("interrupted; resume with: esper run --resume r"))
    assert stop is not None and stop.code == EXIT_INTERRUPTED
    assert not stop.message.startswith("error")
    assert shown(ZeroDivisionError("a bug")) is None  # raised in no plugin: keep the traceback
    assert shown(KeyboardInterrupt()) is None


def test_a_known_resource_failure_names_the_last_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    result = shown(torch.OutOfMemoryError("CUDA out of memory"), None, RunTarget(tmp_path, "train"))
    assert result is not None and result.code == EXIT_USER_ERROR
    assert "out of device memory" in result.message
    assert f"esper train --resume {tmp_path}" in result.message


def test_debug_lives_in_the_click_context(invoke: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ESPER_DEBUG", raising=False)
    before = dict(os.environ)
    debug = invoke("--debug", "config", "show", "--set", "run.gamma=9")
    assert isinstance(debug.exception, ConfigError), debug.output
    assert dict(os.environ) == before
    # The flag belonged to that invocation only.
    assert "run.gamma" in one_line(invoke("config", "show", "--set", "run.gamma=9"))


def test_a_bug_in_a_command_keeps_its_traceback(
    invoke: Any, fake_plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in esper itself")

    monkeypatch.setattr(config_command, "build_config", broken)
    result = invoke("config", "show", "--plugin", fake_plugin)
    assert isinstance(result.exception, ZeroDivisionError)
    assert "error:" not in result.stderr


def test_plugins_failing_to_load_before_parsing_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise PluginError("plugin 'rewards.x' failed to import: ImportError: no\nsuch thing")

    monkeypatch.setattr(main, "PluginManager", failing)
    with pytest.raises(SystemExit) as info:
        main.main(["plugins"])
    assert info.value.code == EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        "error: plugin 'rewards.x' failed to import: ImportError: no such thing\n"
    )
    with pytest.raises(PluginError):
        main.main(["--debug", "plugins"])


def test_an_output_directory_below_a_file_is_one_line(invoke: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(invoke(*RUN, "--out", str(blocker / "run")))
    assert f"--out {blocker / 'run'}: {blocker} is a file" in line


def test_the_default_run_directory_below_a_file_is_one_line(invoke: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("")
    line = one_line(invoke(*RUN, "--set", f"run.out_dir={str(blocker)!r}"))
    assert f"{blocker} is a file" in line


@pytest.mark.parametrize("where", ["flag", "file"])
def test_a_compare_directory_below_a_file_is_one_line(
    invoke: Any, tmp_path: Path, where: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ["compare", *FAKE_COMPONENTS]
    if where == "flag":
        args += ["--out", str(blocker / "exp")]
    else:
        experiment = tmp_path / "exp.toml"
        experiment.write_text(f"out = {str(blocker / 'exp')!r}\n")
        args.append(str(experiment))
    line = one_line(invoke(*args, "--dry-run"))
    assert f"{blocker} is a file, not a directory" in line


def test_blueprint_width_must_be_positive(invoke: Any) -> None:
    assert "--channels" in one_line(invoke("blueprints", "--channels", "0"))
