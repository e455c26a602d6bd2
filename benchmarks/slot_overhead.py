"""What the seed slots cost: forward+backward time of MorphogeneticModel vs plain networks.

Prints one JSON object with two ratios, each of medians over interleaved repetitions
(so machine noise hits both sides alike), measured on the same batch in one process:

* ``empty_ratio``: the model with every slot empty / the bare host (target <= 1.03);
* ``isolation_ratio``: the model with one TRAINING seed (isolated: the seed reads
  ``h.detach()`` and joins through the straight-through ``h + (s - s.detach())``) /
  the same host and the same seed wired in as an ordinary layer, ``h = seed(h)``, with
  no isolation (target <= 1.10).

The host is the digits ``base`` CNN (esper-tasks) when installed, else the test fake
scaled to the same widths; the seed is the ``cnn/conv_light`` blueprint (esper-blueprints)
when installed, else an equivalent 3x3 conv+BN+ReLU residual.

Times are CPU time of the measuring thread by default (``--clock wall`` for elapsed
time): on a shared machine other processes inflate wall time at random, CPU time much less.

    OMP_NUM_THREADS=1 python benchmarks/slot_overhead.py [--reps 100] [--number 3] [--clock wall]

Each side's ``paired_ratio`` is the spread of the per-repetition ratios (median,
interquartile range, bootstrap interval of the median). ``--smoke`` runs a few
repetitions only: the same code path and JSON keys, figures of no meaning.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.benchmark import Timer

from esper_core.components.blueprint import Blueprint
from esper_core.lifecycle.gates import GateThresholds
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot import SlotSettings
from esper_core.lifecycle.stages import Stage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread


class _ConvLight(nn.Module):
    """Fallback seed: ``x + relu(bn(conv3x3(x)))``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def _host() -> tuple[nn.Module, str, int]:
    """(host, description, number of classes)."""
    try:
        from esper_tasks.digits import DigitsOptions, DigitsTask
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.fakes import TinyCNNHost

        return (
            TinyCNNHost(in_channels=1, width=32, blocks=3, classes=10),
            "fake TinyCNNHost width 32",
            10,
        )
    task = DigitsTask(DigitsOptions(preset="base"))  # digits defaults to impaired now
    return task.build_host(), "digits base (esper-tasks CNNHost)", task.num_classes


def _blueprint() -> Blueprint:
    try:
        from esper_blueprints.cnn import conv_light
    except ImportError:
        conv_light = _ConvLight  # type: ignore[assignment]
    return Blueprint("conv_light", "cnn", conv_light, lambda c: 9 * c * c + 2 * c)


class _PlainWithSeed(nn.Module):
    """The host with the seed as an ordinary layer after segment ``segment``: no isolation."""

    def __init__(self, host: nn.Module, seed: nn.Module, segment: int) -> None:
        super().__init__()
        self.host, self.seed, self.segment = host, seed, segment

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.host.num_segments()):
            x = self.host.forward_segment(i, x)
            if i == self.segment:
                x = self.seed(x)
        return self.host.forward_head(x)


def _step_fn(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    module.train()

    def step() -> None:
        module.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(module(x), y).backward()

    return step


def _interleaved(
    variants: dict[str, Callable[[], None]], reps: int, number: int, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """Seconds per call of each variant, one measurement per variant per repetition.

    The order alternates between repetitions so neither side always runs first.
    """
    timers = {
        name: Timer(stmt="step()", globals={"step": fn}, timer=clock)
        for name, fn in variants.items()
    }
    for timer in timers.values():  # warm-up: allocator, autograd graph caches
        timer.timeit(max(1, number // 2))
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else reversed(names):
            times[name].append(timers[name].timeit(number).median)
    return times


def _summary(times: dict[str, list[float]], num: str, den: str) -> dict[str, Any]:
    a, b = statistics.median(times[num]), statistics.median(times[den])
    paired = paired_ratios(times[num], times[den])
    return {
        f"{num}_ms": round(a * 1e3, 4),
        f"{den}_ms": round(b * 1e3, 4),
        "ratio": round(a / b, 4),
        # Best-of is the least disturbed by other processes on a shared machine.
        "ratio_of_minimums": round(min(times[num]) / min(times[den]), 4),
        "paired_ratio": spread(paired),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100, help="interleaved repetitions")
    parser.add_argument(
        "--number", type=int, default=3, help="forward+backward calls per measurement"
    )
    parser.add_argument("--batch", type=int, default=64, help="batch size (digits default: 64)")
    parser.add_argument("--slot", default="r0c0", help="slot of the TRAINING seed")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--clock",
        choices=("thread", "wall"),
        default="thread",
        help="thread: CPU time of this thread (robust on a shared machine; valid with one "
        "intra-op thread, as CPU autograd runs in the calling thread); wall: elapsed time",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.reps, args.number = 3, 1
    if args.clock == "thread" and args.threads != 1:
        parser.error("--clock thread measures one thread; use --threads 1 or --clock wall")
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    host, host_name, classes = _host()
    blueprint = _blueprint()
    resolve = {blueprint.key: blueprint}.__getitem__
    # The lifecycle's default is no isolation (a new seed blends at once); this benchmark
    # measures the isolated TRAINING stage, so it asks for isolation explicitly.
    settings = SlotSettings(
        gates=GateThresholds(min_training_epochs=0),
        isolation="full",
        isolation_non_identity="full",
    )
    x = torch.randn(args.batch, 1, 8, 8)
    y = torch.randint(0, classes, (args.batch,))

    bare = copy.deepcopy(host)
    empty = MorphogeneticModel(copy.deepcopy(host), resolve, settings)
    seeded = MorphogeneticModel(copy.deepcopy(host), resolve, settings)
    slot = seeded.slot(args.slot)
    slot.germinate("bench", blueprint, "linear_add", init_seed=0)
    slot.advance()
    if slot.stage != Stage.TRAINING or slot.seed is None:
        raise SystemExit(f"the seed at {args.slot} is {slot.stage.name}, not TRAINING")
    plain = _PlainWithSeed(copy.deepcopy(host), copy.deepcopy(slot.seed), slot.spec.segment)

    times = _interleaved(
        {
            "empty_model": _step_fn(empty, x, y),
            "bare_host": _step_fn(bare, x, y),
            "training_seed_isolated": _step_fn(seeded, x, y),
            "seed_as_plain_layer": _step_fn(plain, x, y),
        },
        args.reps,
        args.number,
        clock,
    )
    empty_summary = _summary(times, "empty_model", "bare_host")
    isolation_summary = _summary(times, "training_seed_isolated", "seed_as_plain_layer")
    result = {
        "host": host_name,
        "host_params": sum(p.numel() for p in host.parameters()),
        "seed": f"{blueprint.key} at {args.slot} ({slot.seed_param_count()} params)",
        "batch": args.batch,
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "reps": args.reps,
        "calls_per_measurement": args.number,
        "empty_ratio": empty_summary["ratio"],
        "empty_target": 1.03,
        "empty_ok": empty_summary["ratio"] <= 1.03,
        "isolation_ratio": isolation_summary["ratio"],
        "isolation_target": 1.10,
        "isolation_ok": isolation_summary["ratio"] <= 1.10,
        "load_average": list(os.getloadavg()),
        "empty": empty_summary,
        "isolation": isolation_summary,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
