"""Issue 21.8 (the central check) and 21.11: every file a run writes stays inside its run
directory; an output directory or a device that cannot be used is one line and exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from esper_telemetry.console import ConsoleBackend, ConsoleOptions
from esper_telemetry.tensorboard_writer import TensorBoardBackend, TensorBoardOptions

from esper_core import TelemetryContext
from esper_core.errors import RunDirError
from tests.plugins.esper_telemetry.helpers import run_tiny
from tests.reliability.cli_runs import TINY, esper_done, one_error_line


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


def run_cli(*args: str) -> str:
    code, out, err = esper_done("run", *TINY, "--max-epochs", "2", *args, timeout=120)
    assert code == 2 and out == "", err
    return one_error_line(err)


def test_an_out_below_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    line = run_cli("--out", str(tmp_path / "afile" / "sub"))
    assert "afile" in line and "choose another --out" in line


def test_an_out_dir_in_proc_is_one_line() -> None:
    line = run_cli("--set", "run.out_dir=/proc/1")
    assert "/proc/1" in line


def test_an_out_on_a_read_only_file_system_is_one_line(tmp_path: Path) -> None:
    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a read-only file system here (needs root)")
    try:
        line = run_cli("--out", str(mount / "run"))
        assert "Read-only file system" in line
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("device", ["cuda", "mps", "xpu"])
def test_a_device_this_machine_lacks_is_one_line(device: str, tmp_path: Path) -> None:
    if device == "cuda" and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.device_count()}"  # one past the last
    line = run_cli("--device", device, "--out", str(tmp_path / "run"))
    assert f"run.device: '{device}'" in line
    assert not (tmp_path / "run").exists(), "the run directory was created anyway"
