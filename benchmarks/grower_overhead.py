"""What the library API costs in the user's own loop: an epoch with a ``Grower(policy="wait")``
vs the same plain PyTorch epoch (target <= 1.03x).

Both sides train torchvision's resnet18 (no weights) on the generated data of
``examples/own_model_resnet18.py`` with the same loop, then validate once: the plain side
with its own validation pass, the grown side with ``grower.end_epoch(val_loader)``
(validation with counterfactuals, governor, observation, the policy's action; the forward
hooks on three slots and the sample counter run in every training batch, and the model
holds the slots as its ``esper_slots`` submodule, so ``model.parameters()`` and
``model.train()`` walk them). No seed is ever active: the JSON's ``germinated`` is 0, or
the script fails. The two sides' epochs are
interleaved, so machine noise hits both alike. Prints one JSON object: the median of the
per-repetition ratios and a 95% bootstrap interval of that median.

Times are CPU time of the process by default (``--clock wall`` for elapsed time): on a
shared machine other processes inflate wall time at random, CPU time much less.

    OMP_NUM_THREADS=1 python benchmarks/grower_overhead.py [--reps 7] [--clock wall]
    OMP_NUM_THREADS=1 python benchmarks/grower_overhead.py --smoke   # a few seconds
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Subset

import esper_core

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_model_resnet18.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("own_model_resnet18", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@torch.no_grad()
def _validate(model: nn.Module, loader: DataLoader[Any]) -> float:
    """The plain loop's own validation pass (accuracy, as a user's loop computes it)."""
    model.eval()
    correct = 0
    for x, y in loader:
        correct += int((model(x).argmax(dim=1) == y).sum())
    return correct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="epochs per side")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that checks it works")
    args = parser.parse_args()
    reps = 2 if args.smoke else args.reps
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    example = _example()
    train, val, _ = example.make_splits(0)
    if args.smoke:
        train, val = Subset(train, range(8)), Subset(val, range(4))  # one batch each
    batch = 8 if args.smoke else 32
    train_loader = DataLoader(train, batch_size=batch, shuffle=True)
    val_loader = DataLoader(val, batch_size=128)

    load_before = os.getloadavg()[0]
    sides: dict[str, dict[str, Any]] = {}
    for name in ("plain", "grower"):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        grower = None
        if name == "grower":
            grower = esper_core.Grower(
                model,
                slots=["layer1", "layer2", "layer3"],
                example_input=next(iter(val_loader))[0][:2],
                policy="wait",
                optimizer=opt,
                max_epochs=reps + 1,
            )
        sides[name] = {"model": model, "opt": opt, "grower": grower, "times": [], "train": []}

    for rep in range(reps):
        # Alternate which side goes first, so neither always runs on a warmer cache.
        order = list(sides.values()) if rep % 2 == 0 else list(sides.values())[::-1]
        for side in order:
            torch.manual_seed(1)  # the same data order on both sides
            start = clock()
            example.train_one_epoch(side["model"], side["opt"], train_loader)
            trained = clock()
            if side["grower"] is None:
                _validate(side["model"], val_loader)
            else:
                side["grower"].end_epoch(val_loader)
            end = clock()
            side["times"].append(end - start)
            side["train"].append(trained - start)

    grower = sides["grower"]["grower"]
    germinated = grower.env.stats.n_germinated
    if germinated or grower.model.seed_parameters():
        raise SystemExit("a seed grew under policy='wait': the benchmark measures none")
    plain, grown = sides["plain"]["times"], sides["grower"]["times"]
    ratios = paired_ratios(grown, plain)
    train_ratios = paired_ratios(sides["grower"]["train"], sides["plain"]["train"])
    ends = [t - tr for t, tr in zip(grown, sides["grower"]["train"])]
    validations = [t - tr for t, tr in zip(plain, sides["plain"]["train"])]
    print(
        json.dumps(
            {
                "benchmark": "grower_overhead",
                "smoke": args.smoke,
                "clock": args.clock,
                "reps": reps,
                "train_batches": len(train_loader),
                "plain_epoch_s_median": statistics.median(plain),
                "grower_epoch_s_median": statistics.median(grown),
                # Median, IQR and a bootstrap 95% interval of the median (benchmarks/_spread.py).
                "ratio": spread(ratios),
                # Where the difference is: the training epoch (forward hooks on three
                # slots, the optimizer's step pre-hook) and the end of the epoch
                # (grower.end_epoch vs the plain loop's validation pass).
                "train_ratio": spread(train_ratios),
                "end_epoch_s_median": statistics.median(ends),
                "plain_validation_s_median": statistics.median(validations),
                "target": 1.03,
                "germinated": germinated,
                "torch_threads": torch.get_num_threads(),
                # 1-minute load average: above the core count, the benchmark waited for one.
                "load_before": round(load_before, 2),
                "load_after": round(os.getloadavg()[0], 2),
                "cores": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
