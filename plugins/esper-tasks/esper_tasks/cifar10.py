"""``tasks.cifar10``: CIFAR-10 through torchvision, downloaded only when asked.

The data stays uint8 ``[N, 3, 32, 32]`` in memory (150 MB for the training set);
``prepare_batch`` converts, normalises and augments each batch on its device.

Loading: torchvision's ``CIFAR10`` class supplies the folder and file names, the
checksums and the download. The batches themselves are read here, in the same pickle
format, because ``CIFAR10`` refuses any file whose md5 differs from the official one:
that makes it impossible to test the loading path on a small fixture, and it would
re-hash 180 MB at every construction. Checksums are still verified (with torchvision's
``check_integrity``) unless ``verify_checksums = false``. Either way the batches are read
with an unpickler that builds numpy arrays and nothing else: a data file cannot run code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
from attrs import define, field

from esper_core import TaskContext, TaskData, hookimpl
from esper_core.config_limits import MAX_SEED
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import DataError
from esper_core.recipe import CNN_RECIPE, Recipe
from esper_tasks.common import CNNPresetTask, stratified_split
from esper_tasks.presets import (
    CNNPreset,
    base_channels_option,
    cnn_host_problems,
    convs_after_pool_option,
    convs_per_block_option,
    slots_before_pool_option,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

PRESETS: dict[str, CNNPreset] = {
    "base": CNNPreset(base_channels=32, n_blocks=3, convs_per_block=2),
    "small": CNNPreset(base_channels=16, n_blocks=3, convs_per_block=1),
    # Two shallow blocks see ~10x10 pixel patches before the global pool: seeds add
    # the depth (receptive field) it lacks, as for the digits impaired preset.
    "impaired": CNNPreset(base_channels=16, n_blocks=2, convs_per_block=1),
}
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
DEFAULT_DATA_DIR = "~/.cache/esper/cifar10"
MAX_VAL_SIZE = 45_000


@define
class Cifar10Options:
    data_dir: str = options_field(
        DEFAULT_DATA_DIR, doc="Directory holding cifar-10-batches-py/ (created by download)."
    )
    download: bool = options_field(False, doc="Download CIFAR-10 (170 MB) if it is absent.")
    verify_checksums: bool = options_field(True, doc="Check the batches' md5 sums when loading.")
    preset: str = options_field("base", one_of(*PRESETS), "Host preset: base, small or impaired.")
    base_channels: int | None = base_channels_option()
    n_blocks: int | None = options_field(
        None, in_range(1, 5, integer=True), "Override the preset: blocks (= slots), at most 5."
    )
    convs_per_block: int | None = convs_per_block_option()
    convs_after_pool: int | None = convs_after_pool_option()
    slots_before_pool: bool | None = slots_before_pool_option()
    split_seed: int = options_field(
        0, in_range(0, MAX_SEED, integer=True), "Seed of the fixed stratified validation split."
    )
    val_size: int = options_field(
        5000,
        in_range(1, MAX_VAL_SIZE, integer=True),
        "Training images held out for validation, at most 45,000 (CIFAR-10 has 50,000 "
        "training images; at least 5,000 stay for training).",
    )
    augment: bool = options_field(True, doc="Random crop (4-pixel padding) and flip in training.")

    def __esper_validate__(self) -> list[str]:
        return cnn_host_problems(PRESETS, self, Cifar10Task.in_channels)


def _batch_names() -> tuple[str, list[tuple[str, str]], list[tuple[str, str]], str]:
    from torchvision.datasets import CIFAR10

    train = [(name, md5) for name, md5 in CIFAR10.train_list]
    test = [(name, md5) for name, md5 in CIFAR10.test_list]
    return CIFAR10.base_folder, train, test, str(CIFAR10.meta["filename"])


def _batch_unpickler(f: Any) -> Any:
    """A ``pickle.Unpickler`` that builds only what a CIFAR python batch holds.

    A batch is a dict of lists, strings and one numpy array. Rebuilding that array needs
    ``_reconstruct``, ``ndarray`` and ``dtype``; every other global is refused, so a
    tampered file (``__reduce__`` calling ``os.system``, say) fails to load instead of
    running code. The path in numpy 1 (``numpy.core``) and 2 (``numpy._core``) both map
    to the function the installed numpy uses.
    """
    import pickle

    import numpy as np

    reconstruct = np.empty(0, dtype=np.uint8).__reduce__()[0]
    allowed: dict[tuple[str, str], Any] = {
        ("numpy.core.multiarray", "_reconstruct"): reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    class BatchUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            try:
                return allowed[(module, name)]
            except KeyError:
                raise pickle.UnpicklingError(
                    f"it refers to {module}.{name}, which a CIFAR-10 batch never holds"
                ) from None

    return BatchUnpickler(f, encoding="latin1")


def _read_batches(folder: Path, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images ``[N, 3, 32, 32]`` and int64 labels from CIFAR python batches."""
    import numpy as np

    images, labels = [], []
    for name in names:
        try:
            with open(folder / name, "rb") as f:
                entry = _batch_unpickler(f).load()
            images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.append(np.asarray(entry["labels"], dtype=np.int64))
        except Exception as exc:  # a corrupt pickle raises any of a dozen types
            raise DataError(
                f"CIFAR-10 batch {folder / name} is unreadable ({type(exc).__name__}: {exc}); "
                "delete the folder and download again with --set tasks.cifar10.download=true"
            ) from None
    return np.concatenate(images), np.concatenate(labels)


@define
class Cifar10Task(CNNPresetTask):
    """Classify CIFAR-10 (32x32 colour images, 10 classes) with a CNN host."""

    name: ClassVar[str] = "cifar10"
    description: ClassVar[str] = "CIFAR-10 via torchvision (download on request), CNN host"
    Options: ClassVar[type] = Cifar10Options

    topology: ClassVar[str] = "cnn"
    in_channels: ClassVar[int] = 3
    image_side: ClassVar[int] = 32
    presets: ClassVar[dict[str, CNNPreset]] = PRESETS
    num_classes: ClassVar[int] = 10
    default_max_epochs: ClassVar[int] = 150
    default_batch_size: ClassVar[int] = 128
    default_eval_batch_size: ClassVar[int] = 1000
    # The ResNet recipe for CIFAR-10 (SGD, Nesterov momentum 0.9, lr 0.1 at batch 128,
    # weight decay 5e-4, cosine); not tuned here: the data set needs a download.
    default_recipe: ClassVar[Recipe] = attrs.evolve(CNN_RECIPE, lr=0.1)
    padding: ClassVar[int] = 4

    options: Cifar10Options = field(factory=Cifar10Options)
    context: TaskContext = field(factory=TaskContext)
    _cache: dict[str, TaskData] = field(factory=dict, init=False, repr=False)
    _norm: dict[str, Any] = field(factory=dict, init=False, repr=False)

    @property
    def root(self) -> Path:
        return Path(os.path.expanduser(self.options.data_dir))

    # ------------------------------------------------------------ data

    def _ensure_present(self) -> Path:
        base_folder, train, test, meta = _batch_names()
        folder = self.root / base_folder
        wanted = [name for name, _ in train + test] + [meta]
        missing = [name for name in wanted if not (folder / name).is_file()]
        if missing and self.options.download:
            self._download()
            missing = [name for name in wanted if not (folder / name).is_file()]
        if missing:
            raise DataError(
                f"CIFAR-10 not found: looked in {folder} and found no {', '.join(missing)}. "
                "Download it with --set tasks.cifar10.download=true (needs network), or place "
                "the python-format batches (data_batch_1..5, test_batch, batches.meta from "
                f"cifar-10-python.tar.gz) in {folder}; --set tasks.cifar10.data_dir=DIR "
                "points elsewhere"
            )
        if self.options.verify_checksums:
            from torchvision.datasets.utils import check_integrity

            bad = [
                name for name, md5 in train + test if not check_integrity(str(folder / name), md5)
            ]
            if bad:
                raise DataError(
                    f"CIFAR-10 batches in {folder} do not match the official checksums "
                    f"({', '.join(bad)}): delete them and download again with "
                    "--set tasks.cifar10.download=true"
                )
        return folder

    def _download(self) -> None:
        from torchvision.datasets import CIFAR10

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            # Constructing the test split downloads and extracts the whole archive.
            CIFAR10(root=str(self.root), train=False, download=True)
        except Exception as exc:  # urllib, tarfile and checksum failures have no common base
            raise DataError(
                f"downloading CIFAR-10 into {self.root} failed ({type(exc).__name__}: {exc}); "
                "check the network, or place the python-format batches there by hand"
            ) from exc

    def split_sizes(self) -> tuple[int, int, int]:
        """CIFAR-10's 50,000 training images less the validation split, and its 10,000 tests."""
        return 50_000 - self.options.val_size, self.options.val_size, 10_000

    def split_indices(self, train_labels: Any) -> tuple[Any, Any]:
        """Training and validation indices into the official training set."""
        n = len(train_labels)
        if self.options.val_size >= n:
            raise DataError(
                f"val_size {self.options.val_size} leaves no training images out of {n}; "
                "lower tasks.cifar10.val_size"
            )
        sizes = (n - self.options.val_size, self.options.val_size)
        train_idx, val_idx = stratified_split(train_labels, sizes, self.options.split_seed)
        return train_idx, val_idx

    def _load_cpu(self) -> TaskData:
        import torch

        from esper_core.env.data import TensorSplit

        folder = self._ensure_present()
        _, train, test, _ = _batch_names()
        x_train, y_train = _read_batches(folder, [name for name, _ in train])
        x_test, y_test = _read_batches(folder, [name for name, _ in test])
        train_idx, val_idx = self.split_indices(y_train)
        images, labels = torch.from_numpy(x_train), torch.from_numpy(y_train)

        def take(idx: Any) -> TensorSplit:
            index = torch.from_numpy(idx)
            return TensorSplit(images[index].contiguous(), labels[index].contiguous())

        return TaskData(
            train=take(train_idx),
            val=take(val_idx),
            test=TensorSplit(torch.from_numpy(x_test), torch.from_numpy(y_test)),
        )

    # ------------------------------------------------------------ batches

    def _mean_std(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        key = str(device)
        if key not in self._norm:
            mean = torch.tensor(MEAN).view(1, 3, 1, 1).to(device)
            std = torch.tensor(STD).view(1, 3, 1, 1).to(device)
            self._norm[key] = (mean, std)
        return self._norm[key]

    def prepare_batch(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        train: bool,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 -> float in [0, 1] -> (train) crop and flip -> normalise with CIFAR statistics.

        Padding happens before normalisation, so padded pixels are black, as with
        torchvision's ``RandomCrop(32, padding=4)`` on images.
        """
        x = inputs.float() / 255.0  # not in place: eval batches are views of the split
        if train and self.options.augment:
            if generator is None:
                raise ValueError("cifar10 training batches need the env's torch.Generator")
            from esper_tasks.augment import random_crop_flip

            x = random_crop_flip(x, self.padding, generator)
        mean, std = self._mean_std(x.device)
        return (x - mean) / std, targets


@hookimpl
def esper_register_tasks(register: Any) -> None:
    register(Cifar10Task)
