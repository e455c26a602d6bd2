"""A checkpoint whose bytes changed is refused; every refusal
says what is actually wrong; a disk that fills during a large checkpoint is a one-line
disk-full error, not a torch traceback."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from esper_core.errors import CheckpointError
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint
from tests.plugins.esper_telemetry.faulty_plugin import CRASH_FILE
from tests.plugins.esper_telemetry.helpers import resume_tiny, run_tiny

MARK = 1.2345678  # a value whose bytes are easy to find in the file


def flip_a_bit_in_tensor_data(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    at = raw.find(struct.pack("<f", MARK))
    assert at > 0, "tensor data not found"
    raw[at + 1] ^= 0x10
    path.write_bytes(bytes(raw))


def test_flipped_bits_in_tensor_data_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"weights": torch.full((64,), MARK), "step": 3})
    assert load_checkpoint(path)["step"] == 3
    flip_a_bit_in_tensor_data(path)
    with pytest.raises(CheckpointError, match=r"is corrupt: its content does not match") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_a_run_does_not_resume_from_a_checkpoint_with_flipped_bits(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CRASH_FILE).write_text("7")  # killed in epoch 7; checkpoint at epoch 5
    with pytest.raises(BaseException, match="simulated crash"):
        run_tiny(run_dir, ["crash"], "run.checkpoint_every=5")
    path = run_dir / "checkpoint.pt"
    data = load_checkpoint(path)
    weight = data["envs"][0]["model"]["host.head.weight"]
    # Flip one bit of one host weight, where the file stores it.
    raw = bytearray(path.read_bytes())
    at = raw.find(weight.numpy().tobytes())
    assert at > 0
    raw[at + 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="content does not match"):
        resume_tiny(run_dir)


# torch warns when random bytes happen to start like a newer pickle protocol: expected here.
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_random_bytes_are_not_called_pickled_code(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "pickled Python objects" not in message
    assert "neither a PyTorch zip archive nor a pickle" in message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_plain_pickle_is_not_called_code(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(pickle.dumps({"format": 2, "weights": [1.0, 2.0]}))
    with pytest.raises(CheckpointError, match="is a plain pickle, not a checkpoint"):
        load_checkpoint(path)


def test_a_checkpoint_with_only_a_format_says_what_it_lacks(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "env.max_epochs=2")
    save_checkpoint(run_dir / "checkpoint.pt", {})  # a valid file holding nothing of a run
    with pytest.raises(CheckpointError) as info:
        resume_tiny(run_dir)
    message = str(info.value)
    assert "None" not in message
    assert "lacks mode, outer, epoch" in message and "not written by `esper run`" in message


def test_a_checkpoint_of_an_older_format_says_so(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": 1, "mode": "run"}, path)
    with pytest.raises(CheckpointError, match="has format 1; this Esper reads format 2"):
        load_checkpoint(path)
    torch.save({"mode": "run"}, path)
    with pytest.raises(CheckpointError, match=r"not an Esper checkpoint.*without a format entry"):
        load_checkpoint(path)


def test_a_disk_that_fills_during_a_large_checkpoint_is_a_one_line_error(tmp_path: Path) -> None:
    """A real write failure inside torch.save: the process's file-size limit (RLIMIT_FSIZE)
    stops the file at 64 KiB, as a full disk would, while torch's writer is mid-tensor."""
    target = tmp_path / "checkpoint.pt"
    save_checkpoint(target, {"weights": torch.zeros(8), "step": 1})
    before = target.read_bytes()
    script = textwrap.dedent(f"""
        import resource, signal, torch
        from esper_core.run.checkpoint import save_checkpoint
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        save_checkpoint({str(target)!r}, {{"weights": torch.ones(1_000_000), "step": 2}})
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("esper_core.run.checkpoint.DiskFullError: file too large while writing")
    assert "unexpected pos" not in proc.stderr and "RuntimeError" not in proc.stderr
    assert target.read_bytes() == before, "the previous checkpoint changed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"], "temporary files left"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_no_single_bit_flip_loads_changed_content(tmp_path: Path) -> None:
    """Flip one random bit, 300 times: each load either fails with a CheckpointError or
    returns exactly what was saved (flips in bytes torch never reads)."""
    import random

    from esper_core.run.content_digest import content_digest

    payload = {"w": torch.randn(32, 32), "meta": {"epoch": 5, "xs": [1.0, 2.0]}}
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, payload)
    raw, expected = path.read_bytes(), content_digest(payload)
    rng = random.Random(0)
    refused = 0
    for _ in range(300):
        damaged = bytearray(raw)
        at = rng.randrange(len(damaged))
        damaged[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(damaged))
        try:
            data = load_checkpoint(path)
        except CheckpointError:
            refused += 1
            continue
        assert content_digest({k: v for k, v in data.items() if k != "format"}) == expected, at
    assert refused > 200
