"""Batches per second: esper_core.env.data.TensorLoader vs torch.utils.data.DataLoader.

Both iterate the same CPU tensors with the same batch size, shuffled by a seeded
generator, for whole epochs. ``dataloader`` is the usual
``DataLoader(TensorDataset(...), shuffle=True)`` (one ``__getitem__`` per sample, then
collate); ``dataloader_batched`` hands the DataLoader whole index batches, the best it
can do without workers. Prints one JSON object; the target is ratio >= 3.

    python benchmarks/data_loader.py [--seconds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from esper_core.env.data import Batching, TensorLoader, TensorSplit


def _rate(make_epoch: Callable[[], Iterable], min_seconds: float) -> float:
    """Batches per second over whole epochs, for at least ``min_seconds`` (after a warm-up)."""
    for _ in make_epoch():
        break
    batches, start = 0, time.perf_counter()
    while True:
        for x, y in make_epoch():
            batches += 1
            _ = x, y
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return batches / elapsed


def bench(inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, seconds: float) -> dict:
    split = TensorSplit(inputs, targets)
    dataset = TensorDataset(inputs, targets)
    gen = torch.Generator().manual_seed(0)
    loader = TensorLoader(split, Batching(batch_size, shuffle=True), device="cpu", generator=gen)
    plain = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=gen)
    batched = DataLoader(
        dataset,
        sampler=BatchSampler(RandomSampler(dataset, generator=gen), batch_size, drop_last=False),
        batch_size=None,
    )
    tensor_rate = _rate(lambda: loader, seconds)
    plain_rate = _rate(lambda: plain, seconds)
    batched_rate = _rate(lambda: batched, seconds)
    return {
        "samples": len(split),
        "sample_shape": list(inputs.shape[1:]),
        "dtype": str(inputs.dtype).removeprefix("torch."),
        "batch_size": batch_size,
        "batches_per_epoch": len(loader),
        "tensor_loader_batches_per_s": round(tensor_rate, 1),
        "dataloader_batches_per_s": round(plain_rate, 1),
        "dataloader_batched_batches_per_s": round(batched_rate, 1),
        "ratio": round(tensor_rate / plain_rate, 2),
        "ratio_vs_batched": round(tensor_rate / batched_rate, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="minimum time per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from esper_tasks.digits import DigitsTask

    digits = DigitsTask().load_data("cpu").train
    gen = torch.Generator().manual_seed(0)
    cifar_x = torch.randint(0, 256, (50_000, 3, 32, 32), dtype=torch.uint8, generator=gen)
    cifar_y = torch.randint(0, 10, (50_000,), generator=gen)
    result = {
        "torch": torch.__version__,
        "threads": args.threads,
        "device": "cpu",
        "digits": bench(digits.inputs, digits.targets, 64, args.seconds),
        "cifar_sized": bench(cifar_x, cifar_y, 128, args.seconds),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
