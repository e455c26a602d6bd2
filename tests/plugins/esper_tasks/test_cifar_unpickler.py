"""CIFAR-10 batches are read without running code from the file (RELIABILITY.md).

A data file is input from the network or the user's disk; with ``verify_checksums =
false`` nothing vouches for it. The batches are unpickled by an unpickler that builds
numpy arrays and plain containers only; a pickled ``__reduce__`` is refused by name.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from esper_tasks.cifar10 import _read_batches
from torchvision.datasets import CIFAR10

from esper_core.errors import DataError
from tests.plugins.esper_tasks.test_cifar10 import _task, _write_batch

N_IMAGES = 30  # per training batch


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The six CIFAR python batches and the meta file, in the format of the real archive."""
    folder = tmp_path / CIFAR10.base_folder
    folder.mkdir()
    rng = np.random.default_rng(1)
    labels = [i % 10 for i in range(N_IMAGES)]
    for name, _ in [*CIFAR10.train_list, *CIFAR10.test_list]:
        images = rng.integers(0, 256, (N_IMAGES, 3, 32, 32), dtype=np.uint8)
        _write_batch(folder / name, images, labels)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    return folder


class WritesFile:
    """Unpickling this calls ``open(path, "w")``: the file appears if the pickle runs code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


class RunsShell:
    """Unpickling this runs a shell command that creates a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("payload", [WritesFile, RunsShell])
def test_a_pickled_callable_in_a_batch_never_runs(
    folder: Path, tmp_path: Path, payload: type
) -> None:
    marker = tmp_path / "pwned"
    entry = {"data": payload(marker), "labels": [0] * N_IMAGES}
    (folder / "data_batch_2").write_bytes(pickle.dumps(entry))
    # verify_checksums=false is exactly when nothing else stands between file and unpickler.
    task = _task(folder.parent, verify_checksums=False)
    with pytest.raises(DataError) as info:
        task.load_data("cpu")
    assert not marker.exists()
    message = str(info.value)
    assert "\n" not in message
    assert str(folder / "data_batch_2") in message and "is unreadable" in message
    assert "never holds" in message  # says why: the global it refused
    assert "verify_checksums" not in message


def test_a_raw_global_is_refused_before_it_is_called(folder: Path, tmp_path: Path) -> None:
    """A hand-written pickle (no class of ours needed): GLOBAL posix system + REDUCE."""
    marker = tmp_path / "pwned"
    raw = b"cposix\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    (folder / "test_batch").write_bytes(raw)
    with pytest.raises(DataError, match=r"test_batch is unreadable .*posix\.system"):
        _read_batches(folder, ["test_batch"])
    assert not marker.exists()


def test_a_batch_that_is_not_a_table_fails_as_data(folder: Path) -> None:
    (folder / "data_batch_1").write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(DataError, match="data_batch_1 is unreadable"):
        _read_batches(folder, ["data_batch_1"])


def test_the_fixture_format_still_loads(folder: Path) -> None:
    images, labels = _read_batches(folder, ["data_batch_1", "test_batch"])
    assert images.shape == (2 * N_IMAGES, 3, 32, 32) and images.dtype == np.uint8
    assert labels.tolist() == [i % 10 for i in range(N_IMAGES)] * 2
    task = _task(folder.parent, verify_checksums=False)
    assert len(task.load_data("cpu").test) == N_IMAGES


def _python2_style_pickle(entry: dict[str, Any]) -> bytes:
    """Protocol 2 with the array bytes as a latin-1 string, as Python 2's cPickle wrote
    ``cifar-10-python.tar.gz``; globals are the numpy 1 paths (``numpy.core``)."""

    reconstruct = np.empty(0).__reduce__()[0]  # numpy's own _reconstruct

    class Py2Pickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, np.ndarray):
                state = (1, obj.shape, obj.dtype, False, obj.tobytes().decode("latin1"))
                return (reconstruct, (np.ndarray, (0,), "b"), state)
            return NotImplemented

    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(entry)
    # Protocol 2 names globals as text lines: rewrite numpy 2's module path to numpy 1's.
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def test_the_python2_format_of_the_real_archive_loads(folder: Path) -> None:
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (N_IMAGES, 3 * 32 * 32), dtype=np.uint8)
    labels = list(range(10)) * 3
    entry = {"batch_label": "training batch 1 of 5", "labels": labels, "data": images}
    raw = _python2_style_pickle(entry)
    assert b"numpy.core.multiarray\n_reconstruct" in raw and b"_codecs" not in raw
    (folder / "data_batch_1").write_bytes(raw)
    got_images, got_labels = _read_batches(folder, ["data_batch_1"])
    assert np.array_equal(got_images, images.reshape(-1, 3, 32, 32))
    assert got_labels.tolist() == labels
