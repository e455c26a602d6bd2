"""Batches per second: esper_core.env.data.TensorLoader vs torch.utils.data.DataLoader.

Both iterate the same CPU tensors with the same batch size, shuffled by a seeded
generator, for whole epochs. ``dataloader`` is the usual
``DataLoader(TensorDataset(...), shuffle=True)`` (one ``__getitem__`` per sample, then
collate); ``dataloader_batched`` hands the DataLoader whole index batches, the best it
can do without workers. Prints one JSON object; the target is ratio >= 3.

Each of ``--reps`` repetitions measures the three loaders back to back (order
alternating) for at least ``--seconds`` each; ``ratio`` is the median of the
per-repetition ratios and ``ratio_spread`` their spread (interquartile range, bootstrap
interval of the median). ``--smoke`` measures a small CIFAR-sized set for a few
milliseconds: the same path and JSON keys, figures of no meaning.

    python benchmarks/data_loader.py [--seconds 1] [--reps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from esper_core.env.data import Batching, TensorLoader, TensorSplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread


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


def bench(
    inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, seconds: float, reps: int
) -> dict:
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
    loaders = {"tensor": loader, "plain": plain, "batched": batched}
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for rep in range(reps):
        for name in list(loaders) if rep % 2 == 0 else reversed(list(loaders)):
            rates[name].append(_rate(lambda name=name: loaders[name], seconds))
    tensor_rate, plain_rate, batched_rate = (statistics.median(rates[n]) for n in loaders)
    ratios = spread(paired_ratios(rates["tensor"], rates["plain"]), digits=2)
    return {
        "samples": len(split),
        "sample_shape": list(inputs.shape[1:]),
        "dtype": str(inputs.dtype).removeprefix("torch."),
        "batch_size": batch_size,
        "batches_per_epoch": len(loader),
        "tensor_loader_batches_per_s": round(tensor_rate, 1),
        "dataloader_batches_per_s": round(plain_rate, 1),
        "dataloader_batched_batches_per_s": round(batched_rate, 1),
        "ratio": ratios["median"],
        "ratio_spread": ratios,
        "ratio_vs_batched": round(
            statistics.median(paired_ratios(rates["tensor"], rates["batched"])), 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum time per measurement")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    cifar_samples = 50_000
    if args.smoke:
        args.seconds, args.reps, cifar_samples = 0.01, 2, 2_000
    torch.set_num_threads(args.threads)

    from esper_tasks.digits import DigitsTask

    digits = DigitsTask().load_data("cpu").train
    gen = torch.Generator().manual_seed(0)
    cifar_x = torch.randint(0, 256, (cifar_samples, 3, 32, 32), dtype=torch.uint8, generator=gen)
    cifar_y = torch.randint(0, 10, (cifar_samples,), generator=gen)
    result = {
        "torch": torch.__version__,
        "threads": args.threads,
        "device": "cpu",
        "reps": args.reps,
        "seconds_per_measurement": args.seconds,
        "digits": bench(digits.inputs, digits.targets, 64, args.seconds, args.reps),
        "cifar_sized": bench(cifar_x, cifar_y, 128, args.seconds, args.reps),
        "load_average": list(os.getloadavg()),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
