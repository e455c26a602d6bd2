"""tasks.cifar10 on a small CIFAR-format fixture: loading, splits, errors, augmentation.

The fixture writes the python pickle batches that ``cifar-10-python.tar.gz`` contains.
Their md5 sums cannot match the official ones, so the test that the files are read
exactly as torchvision reads them patches the checksum lists of the real
``torchvision.datasets.CIFAR10`` class to the fixture's sums (``monkeypatch``).
"""

from __future__ import annotations

import hashlib
import pickle
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from esper_tasks.augment import random_crop_flip
from esper_tasks.cifar10 import MEAN, STD, Cifar10Options, Cifar10Task
from torchvision.datasets import CIFAR10

from esper_core.errors import DataError

PER_CLASS_PER_BATCH = 3  # 5 batches x 10 classes x 3 = 150 training images
TEST_PER_CLASS = 2


def _write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    entry = {
        "batch_label": path.name.encode(),
        "labels": labels,
        "data": images.reshape(len(labels), -1),
        "filenames": [f"img{i}.png".encode() for i in range(len(labels))],
    }
    with open(path, "wb") as f:
        pickle.dump(entry, f)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, _ in CIFAR10.train_list:
        labels = [c for c in range(10) for _ in range(PER_CLASS_PER_BATCH)]
        images = rng.integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8)
        _write_batch(folder / name, images, labels)
    labels = [c for c in range(10) for _ in range(TEST_PER_CLASS)]
    _write_batch(
        folder / "test_batch",
        rng.integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8),
        labels,
    )
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": 30}, f)
    return tmp_path


@pytest.fixture
def fixture_checksums(cifar_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cifar_root / CIFAR10.base_folder
    monkeypatch.setattr(
        CIFAR10, "train_list", [[n, _md5(folder / n)] for n, _ in CIFAR10.train_list]
    )
    monkeypatch.setattr(CIFAR10, "test_list", [[n, _md5(folder / n)] for n, _ in CIFAR10.test_list])
    meta = dict(CIFAR10.meta, md5=_md5(folder / "batches.meta"))
    monkeypatch.setattr(CIFAR10, "meta", meta)


def _task(root: Path, **kw: object) -> Cifar10Task:
    return Cifar10Task(Cifar10Options(data_dir=str(root), val_size=30, **kw))


def test_reads_what_torchvision_reads(cifar_root: Path, fixture_checksums: None) -> None:
    task = _task(cifar_root)  # verify_checksums on: passes with the fixture's sums
    data = task.load_data("cpu")
    reference = CIFAR10(root=str(cifar_root), train=True)
    ref_images = torch.from_numpy(reference.data.transpose(0, 3, 1, 2).copy())
    ref_labels = torch.tensor(reference.targets)
    train_idx, val_idx = task.split_indices(np.array(reference.targets))
    assert torch.equal(data.train.inputs, ref_images[torch.from_numpy(train_idx)])
    assert torch.equal(data.val.targets, ref_labels[torch.from_numpy(val_idx)])
    test_ref = CIFAR10(root=str(cifar_root), train=False)
    assert torch.equal(
        data.test.inputs, torch.from_numpy(test_ref.data.transpose(0, 3, 1, 2).copy())
    )
    assert data.train.inputs.dtype == torch.uint8


def test_split_sizes_stratified_disjoint(cifar_root: Path) -> None:
    task = _task(cifar_root, verify_checksums=False)
    data = task.load_data("cpu")
    assert (len(data.train), len(data.val), len(data.test)) == (120, 30, 20)
    assert torch.bincount(data.val.targets, minlength=10).tolist() == [3] * 10
    labels = np.repeat(np.arange(10), 15)
    train_idx, val_idx = task.split_indices(labels)
    assert not set(train_idx) & set(val_idx) and len(train_idx) + len(val_idx) == 150
    again = _task(cifar_root, verify_checksums=False, split_seed=0).split_indices(labels)[1]
    other = _task(cifar_root, verify_checksums=False, split_seed=1).split_indices(labels)[1]
    assert np.array_equal(val_idx, again) and not np.array_equal(val_idx, other)


def test_official_checksums_are_verified_by_default(cifar_root: Path) -> None:
    with pytest.raises(DataError, match="checksums") as info:
        _task(cifar_root).load_data("cpu")
    assert "verify_checksums=false" not in str(info.value)  # never advise skipping it


def test_missing_data_fails_clearly_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(DataError) as info:
        _task(tmp_path / "nowhere").load_data("cpu")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "cifar-10-batches-py") in message
    assert "--set tasks.cifar10.download=true" in message and "data_batch_1" in message


def test_download_only_when_asked(
    cifar_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchvision.datasets

    calls: list[bool] = []
    source = cifar_root / CIFAR10.base_folder

    class FakeDownload(CIFAR10):
        def __init__(self, root: str, train: bool = True, download: bool = False) -> None:
            calls.append(download)
            target = Path(root) / self.base_folder
            target.mkdir(parents=True, exist_ok=True)
            for f in source.iterdir():
                (target / f.name).write_bytes(f.read_bytes())

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeDownload)
    root = tmp_path / "fresh"
    task = _task(root, download=True, verify_checksums=False)
    assert len(task.load_data("cpu").train) == 120
    assert calls == [True]

    class FailingDownload(CIFAR10):
        def __init__(self, root: str, train: bool = True, download: bool = False) -> None:
            raise OSError("network unreachable")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FailingDownload)
    with pytest.raises(DataError, match=r"downloading CIFAR-10 .* failed"):
        _task(tmp_path / "other", download=True).load_data("cpu")


def test_corrupt_batch_fails_clearly(cifar_root: Path) -> None:
    (cifar_root / CIFAR10.base_folder / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3 is unreadable"):
        _task(cifar_root, verify_checksums=False).load_data("cpu")


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8), torch.arange(
        n
    ) % 10


def test_eval_batches_are_normalised_only() -> None:
    task = Cifar10Task()
    x, y = _batch()
    out, targets = task.prepare_batch(x, y, train=False, generator=None)
    expected = (x.float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(
        1, 3, 1, 1
    )
    assert out.dtype == torch.float32 and torch.allclose(out, expected) and targets is y
    assert x.dtype == torch.uint8  # the split's tensor is untouched


def test_augmentation_is_deterministic_per_generator() -> None:
    task = Cifar10Task()
    x, y = _batch()
    rng_state = torch.random.get_rng_state()

    def augment(seed: int) -> torch.Tensor:
        return task.prepare_batch(x, y, train=True, generator=torch.Generator().manual_seed(seed))[
            0
        ]

    a, b, c = augment(0), augment(0), augment(1)
    assert a.shape == (16, 3, 32, 32)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # no global RNG
    with pytest.raises(ValueError, match="Generator"):
        task.prepare_batch(x, y, train=True, generator=None)
    assert torch.equal(
        task.prepare_batch(x, y, train=False, generator=None)[0],
        Cifar10Task(Cifar10Options(augment=False)).prepare_batch(x, y, True, None)[0],
    )


def test_crops_and_flips_are_windows_of_the_padded_image() -> None:
    x = torch.rand(64, 2, 6, 5)
    out = random_crop_flip(x, 2, torch.Generator().manual_seed(3))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    flips = 0
    for i in range(len(x)):  # the test checks per sample; the function is batched
        windows = [
            (padded[i, :, oy : oy + 6, ox : ox + 5], flip)
            for oy in range(5)
            for ox in range(5)
            for flip in (False, True)
        ]
        match = [flip for w, flip in windows if torch.equal(out[i], w.flip(2) if flip else w)]
        assert match, f"sample {i} is not a crop of its padded image"
        flips += match[0]
    assert 10 < flips < 54  # both outcomes occur
