"""The fast data path: TensorSplit, TensorLoader, DataLoaderSource, make_loader, caching."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from esper_core.components.task import TaskData
from esper_core.env.data import (
    Batching,
    BatchSizeError,
    DataLoaderSource,
    TensorLoader,
    TensorSplit,
    canonical_device,
    make_loader,
)
from esper_core.env.device_data import cached_on_device
from esper_core.errors import DataError


def _split(n: int = 103) -> TensorSplit:
    return TensorSplit(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))


def _epoch(loader: TensorLoader | DataLoaderSource) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b)
    )


def test_tensor_split_checks_lengths_and_devices() -> None:
    assert len(_split(7)) == 7
    with pytest.raises(DataError, match="3 inputs and 4 targets"):
        TensorSplit(torch.zeros(3, 2), torch.zeros(4))
    s = _split(5)
    assert s.to("cpu") is s


def test_same_seed_same_batches_different_seed_different() -> None:
    split = _split()

    def epoch(seed: int) -> list:
        gen = torch.Generator().manual_seed(seed)
        return _epoch(TensorLoader(split, Batching(16, shuffle=True), device="cpu", generator=gen))

    assert _same(epoch(0), epoch(0))
    assert not _same(epoch(0), epoch(1))


def test_shuffled_epoch_covers_every_sample_once_and_epochs_differ() -> None:
    split = _split()
    gen = torch.Generator().manual_seed(3)
    loader = TensorLoader(split, Batching(16, shuffle=True), device="cpu", generator=gen)
    first, second = _epoch(loader), _epoch(loader)
    for epoch in (first, second):
        seen = torch.cat([y for _, y in epoch])
        assert torch.equal(seen.sort().values, torch.arange(len(split)))
        for x, y in epoch:
            assert torch.equal(x.squeeze(1).long(), y)  # inputs and targets stay paired
    assert not _same(first, second)


def test_eval_order_is_fixed_and_leaves_generator_alone() -> None:
    split = _split()
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    loader = TensorLoader(split, Batching(10, shuffle=False), device="cpu", generator=gen)
    batches = _epoch(loader)
    assert torch.equal(torch.cat([y for _, y in batches]), torch.arange(len(split)))
    assert _same(batches, _epoch(loader))
    assert torch.equal(gen.get_state(), state)


def test_no_global_rng_is_consumed() -> None:
    state = torch.random.get_rng_state()
    gen = torch.Generator().manual_seed(0)
    _epoch(TensorLoader(_split(), Batching(8, shuffle=True), device="cpu", generator=gen))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_generator_state_resumes_the_same_order() -> None:
    split = _split()
    gen = torch.Generator().manual_seed(5)
    loader = TensorLoader(split, Batching(8, shuffle=True), device="cpu", generator=gen)
    _epoch(loader)
    saved = gen.get_state()
    expected = _epoch(loader)
    resumed_gen = torch.Generator()
    resumed_gen.set_state(saved)
    resumed = TensorLoader(split, Batching(8, shuffle=True), device="cpu", generator=resumed_gen)
    assert _same(_epoch(resumed), expected)


@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_size_is_never_changed(drop_last: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    loader = TensorLoader(
        _split(103), Batching(16, shuffle=True, drop_last=drop_last), device="cpu", generator=gen
    )
    sizes = [len(y) for _, y in loader]
    assert len(sizes) == len(loader) == (6 if drop_last else 7)
    assert all(s == 16 for s in sizes[:6])
    if not drop_last:
        assert sizes[-1] == 103 - 6 * 16


def test_batch_larger_than_split() -> None:
    split = _split(10)
    loader = TensorLoader(split, Batching(32, shuffle=False), device="cpu")
    assert [len(y) for _, y in loader] == [10]  # one short batch; the size is not "fixed up"
    with pytest.raises(BatchSizeError, match=r"batch size 32 .* \(10 samples\)") as info:
        TensorLoader(split, Batching(32, shuffle=False, drop_last=True), device="cpu")
    assert isinstance(info.value, ValueError) and isinstance(info.value, DataError)


def test_max_batches_is_honoured() -> None:
    gen = torch.Generator().manual_seed(0)
    loader = TensorLoader(
        _split(103), Batching(8, shuffle=True, max_batches=3), device="cpu", generator=gen
    )
    assert len(loader) == 3
    assert [len(y) for _, y in loader] == [8, 8, 8]
    eval_loader = TensorLoader(_split(103), Batching(8, shuffle=False, max_batches=2), device="cpu")
    assert torch.equal(torch.cat([y for _, y in eval_loader]), torch.arange(16))
    assert Batching(8, max_batches=100).count(103) == 13


def test_invalid_settings_fail_clearly() -> None:
    with pytest.raises(BatchSizeError, match="at least 1"):
        TensorLoader(_split(), Batching(0), device="cpu")
    with pytest.raises(BatchSizeError, match="max_batches"):
        TensorLoader(_split(), Batching(4, max_batches=0), device="cpu")
    with pytest.raises(ValueError, match="Generator"):
        TensorLoader(_split(), Batching(4, shuffle=True), device="cpu")
    with pytest.raises(DataError, match="empty"):
        TensorLoader(_split(0), Batching(4), device="cpu")


def test_device_data_is_indexed_in_place() -> None:
    split = _split()
    loader = TensorLoader(split, Batching(10, shuffle=False), device="cpu")
    assert loader.split is split  # no copy when the data is already on the device
    x, _ = next(iter(loader))
    assert x.data_ptr() == split.inputs.data_ptr()  # eval batches are views


def test_dataloader_source_matches_interface_and_is_seeded() -> None:
    split = _split(50)
    dataset = TensorDataset(split.inputs, split.targets)

    def epoch(seed: int, **kw: object) -> list:
        gen = torch.Generator().manual_seed(seed)
        batching = Batching(8, shuffle=True, **kw)  # type: ignore[arg-type]
        return _epoch(DataLoaderSource(dataset, batching, device="cpu", generator=gen))

    assert _same(epoch(0), epoch(0))
    assert not _same(epoch(0), epoch(1))
    assert [len(y) for _, y in epoch(0)] == [8] * 6 + [2]
    assert len(epoch(0, max_batches=2)) == 2
    eval_source = DataLoaderSource(dataset, Batching(8, shuffle=False), device="cpu")
    assert torch.equal(torch.cat([y for _, y in eval_source]), torch.arange(50))
    with pytest.raises(BatchSizeError, match="batch size 64"):
        DataLoaderSource(dataset, Batching(64, drop_last=True), device="cpu")


def test_make_loader_dispatches_on_split_type() -> None:
    split = _split(20)
    gen = torch.Generator().manual_seed(0)
    assert isinstance(
        make_loader(split, 4, device="cpu", generator=gen, shuffle=True), TensorLoader
    )
    dataset = TensorDataset(split.inputs, split.targets)
    source = make_loader(dataset, 4, device="cpu", generator=gen, shuffle=True, max_batches=2)
    assert isinstance(source, DataLoaderSource) and len(source) == 2


def test_cached_on_device_loads_once_and_shares_tensors() -> None:
    calls = []

    def load() -> TaskData:
        calls.append(1)
        return TaskData(train=_split(4), val=_split(2), test=_split(2))

    cache: dict[str, TaskData] = {}
    a = cached_on_device(cache, "cpu", load)
    b = cached_on_device(cache, torch.device("cpu"), load)
    assert a is b and len(calls) == 1
    assert canonical_device("cpu") == torch.device("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_split_is_staged_to_cuda() -> None:
    split = _split(100)
    gen = torch.Generator().manual_seed(0)
    loader = TensorLoader(split, Batching(16, shuffle=True), device="cuda", generator=gen)
    assert loader.split.inputs.is_pinned()
    batches = _epoch(loader)
    assert all(x.is_cuda and y.is_cuda for x, y in batches)
    cpu = _epoch(
        TensorLoader(
            split,
            Batching(16, shuffle=True),
            device="cpu",
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert all(torch.equal(xc, xg.cpu()) for (xc, _), (xg, _) in zip(cpu, batches))
