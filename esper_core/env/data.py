"""Batches for one epoch: the fast in-memory path and a DataLoader path for large datasets.

Datasets that fit in memory are :class:`TensorSplit` values. A :class:`TensorLoader`
batches them by indexing whole tensors that already live on the env's device, so an
epoch costs one permutation and one gather per batch, with no per-sample Python and
no worker processes. Datasets that do not fit go through :class:`DataLoaderSource`, a
thin wrapper of ``torch.utils.data.DataLoader`` with the same iteration interface.

Both sources take their randomness only from the ``torch.Generator`` they are given
(one per env), so checkpointing ``generator.get_state()`` is enough to resume a run
with the same data order. Neither changes the batch size it was given: a split smaller
than one batch is either one short batch (``drop_last=False``) or a
:class:`BatchSizeError` (``drop_last=True``, where the epoch would be empty).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeAlias, runtime_checkable

import torch
from attrs import frozen
from torch.utils.data import DataLoader, Dataset

from esper_core.errors import DataError

Batch: TypeAlias = tuple[torch.Tensor, torch.Tensor]


class BatchSizeError(DataError, ValueError):
    """A batch size (or batch cap) that a split cannot honour."""


@frozen(eq=False)  # tensors have no truthful ``==``; identity is what matters
class TensorSplit:
    """An in-memory split: ``inputs[i]`` is sample ``i`` and ``targets[i]`` its target."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def __attrs_post_init__(self) -> None:
        if self.inputs.ndim == 0 or self.targets.ndim == 0:
            raise DataError("a TensorSplit needs tensors with a sample dimension, got scalars")
        if self.inputs.shape[0] != self.targets.shape[0]:
            raise DataError(
                f"a TensorSplit needs as many targets as inputs, got {self.inputs.shape[0]} "
                f"inputs and {self.targets.shape[0]} targets"
            )
        if self.inputs.device != self.targets.device:
            raise DataError(
                f"a TensorSplit keeps inputs and targets on one device, got {self.inputs.device} "
                f"and {self.targets.device}"
            )

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def device(self) -> torch.device:
        return self.inputs.device

    def to(self, device: torch.device | str) -> TensorSplit:
        """This split on ``device`` (itself when it is already there: no copy)."""
        target = canonical_device(device)
        if self.device == target:
            return self
        return TensorSplit(self.inputs.to(target), self.targets.to(target))

    def pin_memory(self) -> TensorSplit:
        if self.inputs.is_pinned() and self.targets.is_pinned():
            return self
        return TensorSplit(self.inputs.pin_memory(), self.targets.pin_memory())


Split: TypeAlias = TensorSplit | Dataset


@runtime_checkable
class BatchSource(Protocol):
    """One epoch of ``(inputs, targets)`` batches on the target device per ``iter()``."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Batch]: ...


def canonical_device(device: torch.device | str) -> torch.device:
    """``cuda`` and ``cuda:0`` name one device; give it one name (a tensor's ``.device``)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


@frozen
class Batching:
    """How a split is cut into the batches of one epoch."""

    batch_size: int
    shuffle: bool = False  # a fresh order per epoch, drawn from the env's generator
    drop_last: bool = False  # drop a short last batch
    max_batches: int | None = None  # cap on batches per epoch

    def count(self, n: int) -> int:
        """Batches in one epoch of ``n`` samples, after ``drop_last`` and ``max_batches``."""
        full = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return full if self.max_batches is None else min(full, self.max_batches)

    def check(self, n: int, generator: torch.Generator | None, what: str = "split") -> None:
        """Refuse settings under which an epoch would be empty, naming the numbers involved."""
        if self.batch_size < 1:
            raise BatchSizeError(f"batch size must be at least 1, got {self.batch_size}")
        if self.max_batches is not None and self.max_batches < 1:
            raise BatchSizeError(
                f"max_batches must be at least 1 (or unset), got {self.max_batches}"
            )
        if n == 0:
            raise DataError(f"the {what} is empty: there is nothing to iterate")
        if self.drop_last and self.batch_size > n:
            raise BatchSizeError(
                f"batch size {self.batch_size} is larger than the {what} ({n} samples) and "
                f"drop_last is on, so an epoch would have no batch; use a batch size of at "
                f"most {n} or turn drop_last off (which gives one short batch)"
            )
        if self.shuffle and generator is None:
            raise ValueError("shuffling batches needs the env's torch.Generator")


def _order(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    # Drawn on the generator's own device, then moved: the same seed gives the same
    # order whichever device holds the data.
    perm = torch.randperm(n, generator=generator, device=generator.device)
    return perm.to(device, non_blocking=True)


class TensorLoader:
    """Batches of a :class:`TensorSplit` by indexing, on ``device``.

    ``batching.shuffle`` draws one permutation per epoch (per ``iter()``) from
    ``generator``; without it the split's order is kept and the generator never
    touched, so evaluation does not perturb the training data order. Batches have
    exactly ``batch_size`` samples except, without ``drop_last``, the last one.

    A split already on ``device`` is indexed in place (shared by every loader that uses
    it). A CPU split bound for CUDA is pinned once here, and each batch is gathered
    into pinned memory and copied with ``non_blocking=True``; the caching host
    allocator keeps a pinned buffer alive until its copy has finished.
    """

    def __init__(
        self,
        split: TensorSplit,
        batching: Batching,
        *,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> None:
        batching.check(len(split), generator)
        self.batching = batching
        self.device = canonical_device(device)
        self.generator = generator
        self._staged = split.device.type == "cpu" and self.device.type == "cuda"
        self.split = split.pin_memory() if self._staged else split.to(self.device)

    def __len__(self) -> int:
        return self.batching.count(len(self.split))

    def _batch_bounds(self) -> Iterator[tuple[int, int]]:
        n, size = len(self.split), self.batching.batch_size
        for b in range(len(self)):
            yield b * size, min((b + 1) * size, n)

    def __iter__(self) -> Iterator[Batch]:
        inputs, targets = self.split.inputs, self.split.targets
        if not self.batching.shuffle:
            for start, stop in self._batch_bounds():
                yield self._deliver(inputs[start:stop], targets[start:stop])
            return
        assert self.generator is not None
        order = _order(len(self.split), self.generator, self.split.device)
        for start, stop in self._batch_bounds():
            idx = order[start:stop]
            if self._staged:
                yield self._deliver(
                    _take(inputs, idx, pinned=True), _take(targets, idx, pinned=True)
                )
            else:
                yield _take(inputs, idx), _take(targets, idx)

    def _deliver(self, inputs: torch.Tensor, targets: torch.Tensor) -> Batch:
        if self._staged:
            return (
                inputs.to(self.device, non_blocking=True),
                targets.to(self.device, non_blocking=True),
            )
        return inputs, targets


def _take(source: torch.Tensor, idx: torch.Tensor, pinned: bool = False) -> torch.Tensor:
    """``source[idx]`` along dim 0, as whole-row copies.

    ``index_select`` over rows flattened to one dimension copies each sample as one
    block; advanced indexing (``source[idx]``) walks elements and is ~40x slower on a
    CIFAR-sized uint8 batch. With ``pinned``, the rows land in pinned memory, so the
    following ``non_blocking`` copy is really asynchronous (pageable memory is not).
    """
    shape = (idx.numel(), *source.shape[1:])
    flat = source.reshape(source.shape[0], -1) if source.is_contiguous() else source
    if pinned:
        out = torch.empty((idx.numel(), *flat.shape[1:]), dtype=source.dtype, pin_memory=True)
        rows = torch.index_select(flat, 0, idx, out=out)
    else:
        rows = torch.index_select(flat, 0, idx)
    return rows.view(shape)


class DataLoaderSource:
    """The :class:`TensorLoader` interface over any map-style ``Dataset``.

    Shuffling is seeded from ``generator`` (``DataLoader`` draws its per-epoch seed and
    its worker base seed from it), batches are pinned under CUDA and moved to ``device``
    with ``non_blocking=True``. Use it for datasets that do not fit on the device.
    """

    def __init__(
        self,
        dataset: Dataset,
        batching: Batching,
        *,
        num_workers: int = 0,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> None:
        try:
            n = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise DataError(
                f"{type(dataset).__name__} has no length; Esper needs map-style datasets"
            ) from None
        batching.check(n, generator, what="dataset")
        if generator is not None and generator.device.type != "cpu":
            raise ValueError("DataLoader shuffling needs a CPU torch.Generator")
        self.device = canonical_device(device)
        self.max_batches = batching.max_batches
        self.loader = DataLoader(
            dataset,
            batch_size=batching.batch_size,
            shuffle=batching.shuffle,
            drop_last=batching.drop_last,
            num_workers=num_workers,
            pin_memory=self.device.type == "cuda",
            generator=generator,
            persistent_workers=num_workers > 0,
        )

    def __len__(self) -> int:
        full = len(self.loader)
        return full if self.max_batches is None else min(full, self.max_batches)

    def __iter__(self) -> Iterator[Batch]:
        limit = len(self)
        for i, (inputs, targets) in enumerate(self.loader):
            if i >= limit:
                break
            yield (
                inputs.to(self.device, non_blocking=True),
                targets.to(self.device, non_blocking=True),
            )


def make_loader(
    split: Split,
    batch_size: int,
    *,
    device: torch.device | str,
    generator: torch.Generator | None,
    shuffle: bool,
    drop_last: bool = False,
    max_batches: int | None = None,
    num_workers: int = 0,
) -> TensorLoader | DataLoaderSource:
    """The batch source for ``split``: indexed tensors when it is a :class:`TensorSplit`."""
    batching = Batching(batch_size, shuffle, drop_last, max_batches)
    if isinstance(split, TensorSplit):
        return TensorLoader(split, batching, device=device, generator=generator)
    return DataLoaderSource(
        split, batching, num_workers=num_workers, device=device, generator=generator
    )
