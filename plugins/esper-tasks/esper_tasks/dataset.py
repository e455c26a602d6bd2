"""``tasks.dataset``: any dataset and any model, as an Esper task.

The data is a function named by a dotted path, ``package.module:function``, that returns
the fixed ``(train, validation, test)`` datasets (each item ``(input, target)``), or an
``ImageFolder`` directory with ``train/``, ``val/`` and ``test/`` subdirectories. The host
is the ``nn.Module`` a factory (``package.module:function``, called with no arguments)
returns, with slots on the named submodules' outputs (``esper_core.host_from_module``):
the run seeds the factory's initialisation, rewards and gates use validation, and
reported results use test, as with every task.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define, field

from esper_core import TaskContext, TaskData, hookimpl
from esper_core.components.blueprint import TOPOLOGIES
from esper_core.config_limits import MAX_BATCH, MAX_EPOCHS
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import ConfigError, DataError
from esper_core.run.watchdog import supervised
from esper_tasks.common import CrossEntropyTask
from esper_tasks.dataset_images import SPLITS, image_folder_splits

if TYPE_CHECKING:
    import torch
    from torch import nn


@define
class DatasetOptions:
    data: str | None = options_field(
        None,
        doc="package.module:function returning (train, val, test) datasets of (input, target).",
    )
    image_folder: str | None = options_field(
        None, doc="A directory with train/, val/ and test/ ImageFolder subdirectories."
    )
    image_size: int = options_field(
        32,
        in_range(1, 1024, integer=True),
        "ImageFolder: images are resized to this square size, at most 1024 (every image is "
        "held in memory as float32: 12 MiB each at 1024).",
    )
    model: str = options_field(
        "", doc="package.module:function returning the host nn.Module (called without arguments)."
    )
    slots: list[str] = options_field(
        [], doc="Names of the model's submodules whose outputs get a slot (named_modules())."
    )
    topology: str = options_field(
        "cnn",
        one_of(*TOPOLOGIES),
        "The slots' kind: cnn for [B, C, H, W] outputs, transformer for [B, T, D], mlp for [B, D].",
    )
    max_epochs: int = options_field(
        30, in_range(1, MAX_EPOCHS, integer=True), "Default episode length."
    )
    batch_size: int = options_field(64, in_range(1, MAX_BATCH, integer=True), "Default batch size.")

    def __esper_validate__(self) -> list[str]:
        if self.data is not None and self.image_folder is not None:
            return ["name the data with one of data=MODULE:FUNCTION or image_folder=DIR, not both"]
        return []

    def missing(self) -> list[str]:
        """What a run needs and the options lack (checked when the task is used, so the
        defaults still build a component, as every component's must)."""
        problems = []
        if self.data is None and self.image_folder is None:
            problems.append(
                "tasks.dataset: name the data with data=package.module:function or image_folder=DIR"
            )
        if not self.model:
            problems.append("tasks.dataset.model: name the host factory as package.module:function")
        if not self.slots:
            problems.append(
                "tasks.dataset.slots: name at least one submodule of the model, e.g. ['layer1']"
            )
        return problems


def _require(options: DatasetOptions) -> None:
    problems = options.missing()
    if problems:
        raise ConfigError(problems)


def _import_here_or_installed(module_name: str) -> Any:
    """Import ``module_name`` as ``python -m`` would from the current directory.

    The ``esper`` console script puts its own bin/ directory first on ``sys.path``, not the
    current one, so a ``mydata.py`` beside the user's config would not be found. The
    current directory is put on the path for this import only (after what is installed,
    so it never shadows a package) and taken off again: the module's own imports of its
    neighbours run during the import and find them."""
    top = module_name.split(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != top or here in sys.path or "" in sys.path:
            raise
    sys.path.append(here)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(here)


def load_object(path: str, what: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names; a one-line ConfigError otherwise."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError([f"tasks.dataset.{what}: {path!r} is not package.module:function"])
    try:
        module = _import_here_or_installed(module_name)
    except ImportError as exc:
        top = module_name.split(".")[0]
        hint = (
            f"no {top}.py or {top}/ in the current directory {os.getcwd()} nor on sys.path: run "
            "esper from the directory that holds it, or add that directory to PYTHONPATH"
            if getattr(exc, "name", None) == top
            else "it was found but failed to import"
        )
        raise ConfigError(
            [f"tasks.dataset.{what}: cannot import {module_name!r} ({exc}); {hint}"]
        ) from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(
            [f"tasks.dataset.{what}: module {module_name!r} has no function {attr!r}"]
        )
    return function  # type: ignore[no-any-return]


def _checked_splits(result: Any, source: str) -> tuple[Any, Any, Any]:
    if not isinstance(result, tuple | list) or len(result) != 3:
        kind = type(result).__name__
        raise DataError(
            f"{source} returned a {kind}; return (train, val, test): three datasets of "
            "(input, target) items"
        )
    for name, split in zip(SPLITS, result):
        if not hasattr(split, "__len__") or not hasattr(split, "__getitem__") or len(split) == 0:
            raise DataError(
                f"{source}: its {name} split ({type(split).__name__}) is not a non-empty "
                "dataset with __len__ and __getitem__"
            )
        item = split[0]
        if not isinstance(item, tuple | list) or len(item) < 2:
            raise DataError(
                f"{source}: {name}[0] is a {type(item).__name__}; items must be (input, target)"
            )
    shapes = [
        _input_shape(split[0][0], f"{source}: {name}[0]") for name, split in zip(SPLITS, result)
    ]
    for name, split in zip(SPLITS, result):
        _check_target(split[0][1], f"{source}: {name}[0]")
    if len(set(shapes)) > 1:
        # The model is built for the training inputs; another shape in validation or
        # test fails in the middle of the first epoch, inside the model.
        shown = ", ".join(f"{n} {list(s)}" for n, s in zip(SPLITS, shapes))
        raise DataError(
            f"{source}: the splits' inputs differ in shape ({shown}); every split must hold "
            "inputs of one shape"
        )
    return result[0], result[1], result[2]


def _input_shape(value: Any, where: str) -> tuple[int, ...]:
    import torch

    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DataError(
            f"{where}: its input is a {type(value).__name__}, not a tensor or array ({exc})"
        ) from None
    if not (tensor.is_floating_point() or tensor.dtype in (torch.int64, torch.int32)):
        raise DataError(f"{where}: its input has dtype {tensor.dtype}; expected numbers")
    return tuple(tensor.shape)


def _check_target(value: Any, where: str) -> None:
    import torch

    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    if (
        tensor is None
        or tensor.is_floating_point()
        or tensor.is_complex()
        or tensor.dtype == torch.bool
    ):
        raise DataError(
            f"{where}: its target is {value!r:.40}; a target is a class index (an integer)"
        )


def _fast(split: Any) -> Any:
    """A TensorDataset of (inputs, targets) as a TensorSplit: indexed batches, no workers."""
    from torch.utils.data import TensorDataset

    from esper_core.env.data import TensorSplit

    if isinstance(split, TensorDataset) and len(split.tensors) == 2:
        return TensorSplit(split.tensors[0], split.tensors[1])
    return split


@define
class DatasetTask(CrossEntropyTask):
    """Your dataset and your model (classification, or a next-token LM's ``[B, T, V]``)."""

    name: ClassVar[str] = "dataset"
    description: ClassVar[str] = "any dataset (MODULE:FUNCTION or ImageFolder) and any model"
    Options: ClassVar[type] = DatasetOptions
    default_eval_batch_size: ClassVar[int] = 256

    options: DatasetOptions = field(factory=DatasetOptions)
    context: TaskContext = field(factory=TaskContext)
    _cache: dict[str, TaskData] = field(factory=dict, init=False, repr=False)
    _classes: int | None = field(default=None, init=False, repr=False)
    # The model's layer pairs that can widen, and why the rest cannot: found on the first
    # build (every build of the factory has the same layers), so a width growth
    # (policies.static.widen_at, policies.ppo.host_growth=widen) widens them as a
    # Grower's does.
    _widths: tuple[tuple[Any, ...], tuple[str, ...]] | None = field(
        default=None, init=False, repr=False
    )

    @property
    def topology(self) -> str:
        return self.options.topology

    @property
    def default_max_epochs(self) -> int:
        return self.options.max_epochs

    @property
    def default_batch_size(self) -> int:
        return self.options.batch_size

    @property
    def num_classes(self) -> int:  # type: ignore[override]
        """The last dimension of the model's output on a training example."""
        if self._classes is None:
            import torch

            with torch.random.fork_rng(devices=[]):
                self.build_host()
        assert self._classes is not None
        return self._classes

    def _example(self) -> torch.Tensor:
        import torch

        from esper_core.env.data import TensorSplit

        train = self.load_data(torch.device("cpu")).train
        if isinstance(train, TensorSplit):
            return train.inputs[:2]
        first = [train[i][0] for i in range(min(2, len(train)))]
        return torch.stack([torch.as_tensor(x) for x in first])

    def build_host(self) -> nn.Module:
        from torch import nn

        from esper_core.grow.module_host import host_from_module

        _require(self.options)
        model = load_object(self.options.model, "model")()
        if not isinstance(model, nn.Module):
            raise ConfigError(
                [
                    f"tasks.dataset.model: {self.options.model} returned a {type(model).__name__}, not an nn.Module"
                ]
            )
        example = self._example()
        host = host_from_module(model, self.options.slots, example)
        if host.topology != self.options.topology:
            raise ConfigError(
                [
                    f"tasks.dataset: the slots are {host.topology} outputs; set tasks.dataset.topology={host.topology}"
                ]
            )
        if host.output_features < 2:
            raise ConfigError(
                [
                    f"tasks.dataset.model: {self.options.model} returns no [batch, classes] "
                    "(or [batch, seq, vocab]) logits, e.g. one number per example; the task "
                    "trains with cross-entropy over the output's last dimension"
                ]
            )
        if self._classes is None:
            self._check_data(host.output_features)
        self._classes = host.output_features
        if self._widths is None:
            self._widths = _layer_pairs(model, example)
        host.enable_width(*self._widths)
        return host

    def _check_data(self, classes: int) -> None:
        """Labels within the model's outputs; inputs finite and within float32's reach
        (images read by ImageFolder are in 0..1: not read a second time to check)."""
        import torch

        from esper_tasks.dataset_labels import check_labels
        from esper_tasks.dataset_values import check_values

        data = self.load_data(torch.device("cpu"))
        source = (
            f"tasks.dataset.image_folder {self.options.image_folder}"
            if self.options.image_folder is not None
            else f"tasks.dataset.data {self.options.data}"
        )
        splits = list(zip(SPLITS, (data.train, data.val, data.test)))
        check_labels(splits, classes, source, f"tasks.dataset.model {self.options.model}")
        if self.options.image_folder is None:
            check_values(splits, source)

    def _load_cpu(self) -> TaskData:
        _require(self.options)
        if self.options.image_folder is not None:
            splits = image_folder_splits(self.options.image_folder, self.options.image_size)
        else:
            assert self.options.data is not None
            source = f"tasks.dataset.data {self.options.data}"
            function = load_object(self.options.data, "data")
            with supervised("loading the data (tasks.dataset.data)"):  # it may never return
                result = function()
            splits = _checked_splits(result, source)
        return TaskData(*(_fast(s) for s in splits))


def _layer_pairs(
    model: nn.Module, example: torch.Tensor
) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The pairs of ``model`` a width growth may widen, and why its other layers cannot
    (:func:`esper_core.grow.layer_growth.widenable_layers`). The check widens a copy with
    fresh random weights: the random state is forked, so a run draws what it drew before."""
    import torch

    from esper_core.errors import HostError
    from esper_core.grow.layer_growth import widenable_layers

    try:
        with torch.random.fork_rng(devices=[]):
            report = widenable_layers(model, example)
    except HostError as exc:  # a model that cannot be copied: it grows with seeds only
        return (), (str(exc),)
    return report.pairs, report.refused


@hookimpl
def esper_register_tasks(register: Any) -> None:
    register(DatasetTask)
