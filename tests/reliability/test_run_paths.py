"""Every file a run writes stays inside its run directory (the central check); an output
directory or a device that cannot be used is one line and exit 2."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from esper_telemetry.console import ConsoleBackend, ConsoleOptions
from esper_telemetry.tensorboard_writer import TensorBoardBackend, TensorBoardOptions

from esper_core import TelemetryContext
from esper_core.errors import RunDirError
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.helpers import run_tiny
from tests.reliability.cli_runs import TINY, failed_in_one_line


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/etc/x", "."])
def test_paths_that_leave_the_run_directory_are_refused(tmp_path: Path, relative: str) -> None:
    from esper_core.run.paths import inside_run_dir

    with pytest.raises(RunDirError, match="outside the run directory"):
        inside_run_dir(tmp_path / "run", relative, "file")
    assert inside_run_dir(tmp_path / "run", "a/b.txt", "file") == tmp_path / "run" / "a/b.txt"


def test_a_symbolic_link_cannot_take_a_write_outside(tmp_path: Path) -> None:
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    (run_dir / "tensorboard").symlink_to(outside)
    with pytest.raises(RunDirError, match="outside the run directory"):
        TensorBoardBackend(TensorBoardOptions(), TelemetryContext(run_dir=run_dir))
    victim = outside / "precious.txt"
    victim.write_text("keep me")
    (run_dir / "events.jsonl").symlink_to(victim)
    with pytest.raises(RunDirError, match=r"'events\.jsonl' resolves to .*outside"):
        run_tiny(run_dir, ["jsonl"], "env.max_epochs=2")
    assert victim.read_text() == "keep me"


def test_backend_options_cannot_name_paths_outside(tmp_path: Path) -> None:
    """Options built in code skip config validation; the backends still check."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    context = TelemetryContext(run_dir=run_dir)
    with pytest.raises(RunDirError, match="outside the run directory"):
        TensorBoardBackend(TensorBoardOptions(subdir="../escaped"), context)
    with pytest.raises(RunDirError, match="outside the run directory"):
        ConsoleBackend(ConsoleOptions(file="../console.log"), context)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def run_cli(invoke: Invoke, *args: str) -> str:
    result = invoke("run", *TINY, "--max-epochs", "2", *args)
    assert result.stdout == ""
    return failed_in_one_line(result)


def test_an_out_below_a_file_is_one_line(invoke: Invoke, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    line = run_cli(invoke, "--out", str(tmp_path / "afile" / "sub"))
    assert f"{tmp_path / 'afile'} is a file" in line


def test_an_out_dir_in_proc_is_one_line(invoke: Invoke) -> None:
    line = run_cli(invoke, "--set", "run.out_dir=/proc/1")
    assert "/proc/1" in line


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a read-only file system here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_out_on_a_read_only_file_system_is_one_line(invoke: Invoke, read_only_dir: Path) -> None:
    line = run_cli(invoke, "--out", str(read_only_dir / "run"))
    assert str(read_only_dir) in line


@pytest.mark.parametrize("where", ["below_a_file", "proc", "read_only"])
def test_the_library_refuses_an_unwritable_run_directory_in_one_line(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """Callers of the library (compare cells, notebooks) get the same one-line error as the CLI."""
    if where == "below_a_file":
        (tmp_path / "afile").write_text("")
        run_dir, expected = tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is a file"
    elif where == "proc":
        run_dir, expected = Path("/proc/1/run"), "/proc/1 does not accept new directories"
    else:
        mount = request.getfixturevalue("read_only_dir")
        run_dir, expected = mount / "run", "Read-only file system"
    with pytest.raises(RunDirError, match="cannot write the run directory") as info:
        run_tiny(run_dir, [], "env.max_epochs=2")
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("device", ["cuda", "mps", "xpu"])
def test_a_device_this_machine_lacks_is_one_line(
    invoke: Invoke, device: str, tmp_path: Path
) -> None:
    if device == "cuda" and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.device_count()}"  # one past the last
    line = run_cli(invoke, "--device", device, "--out", str(tmp_path / "run"))
    assert f"run.device: '{device}'" in line
    assert not (tmp_path / "run").exists(), "the run directory was created anyway"


@pytest.mark.parametrize("flag", ["--config", "--out", "--resume"])
def test_a_nul_byte_in_a_path_is_a_usage_error(invoke: Invoke, flag: str) -> None:
    """click's path check let os.stat's ValueError out as a traceback (found by the fuzzer)."""
    line = failed_in_one_line(invoke("run", flag, "a\x00b"))
    assert f"Invalid value for '{flag}'" in line and "contains a NUL byte" in line
