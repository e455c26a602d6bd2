"""The default heuristic against not growing, on examples/own_model_spirals.py's model.

Runs the example's loop (its data, model, optimizer, rate and epochs) once per policy and
random seed, with ``policy="heuristic"`` at its option defaults and ``policy="wait"``,
and prints JSON: per run the final test accuracy, the epochs of germination and
fossilization, the parameters at the end and the training FLOPs (forward and backward of
every training sample, counted each epoch on the model as it trained that epoch); then
per policy the IQM of the test accuracy and, against ``wait``, the paired difference of
the same random seed (IQM, 95 % percentile bootstrap interval, wins/ties/losses).

    OMP_NUM_THREADS=1 python benchmarks/own_model_spirals.py --seeds 1000-1009
    OMP_NUM_THREADS=1 python benchmarks/own_model_spirals.py --seeds 1000-1009 --layers 2 --hidden 32

CPU budget: about 5 s of one core per run of 24 epochs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

import esper_core
from esper_core.compare.stats import iqm, iqm_interval
from esper_core.env.cost import count_train_flops

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_model_spirals.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("own_model_spirals", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_run(ex: Any, policy: str, seed: int, hidden: int, layers: int, epochs: int) -> dict:
    """The example's loop, as its ``main`` runs it, with the cost counted."""
    torch.manual_seed(seed)
    train, val, test = ex.make_splits(seed)
    train_loader = DataLoader(train, batch_size=64, shuffle=True)
    val_loader = DataLoader(val, batch_size=600)
    model = ex.SpiralMLP(hidden, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=ex.LR)
    grower = esper_core.Grower(
        model,
        slots=ex.slots_of(layers),
        example_input=next(iter(val_loader))[0][:2],
        policy=policy,
        optimizer=opt,
        max_epochs=epochs,
        seed=seed,
    )
    probe_x, probe_y = train.tensors[0][:64], train.tensors[1][:64]
    flops, events = 0, []
    for epoch in range(1, epochs + 1):
        per_sample = count_train_flops(model, nn.functional.cross_entropy, probe_x, probe_y) / 64
        flops += round(per_sample * len(train))
        ex.train_one_epoch(model, opt, train_loader)
        step = grower.end_epoch(val_loader)
        events += [f"{epoch}: {line}" for line in filter(None, map(ex.describe, step.events))]
    test_loader = DataLoader(test, batch_size=600)
    return {
        "policy": policy,
        "seed": seed,
        "test_acc": ex.accuracy(model, test_loader),
        "params": grower.model.host_param_count() + grower.model.seed_param_count(),
        "train_flops": flops,
        "events": events,
    }


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def summary(runs: list[dict]) -> dict:
    by = {p: {r["seed"]: r for r in runs if r["policy"] == p} for p in ("heuristic", "wait")}
    out: dict[str, Any] = {}
    for policy, rs in by.items():
        out[policy] = {
            "test_acc_iqm": float(iqm([r["test_acc"] for r in rs.values()])),
            "params_median": statistics.median(r["params"] for r in rs.values()),
            "train_flops_median": statistics.median(r["train_flops"] for r in rs.values()),
            "grew": sum(bool(r["events"]) for r in rs.values()),
        }
    diffs = [by["heuristic"][s]["test_acc"] - by["wait"][s]["test_acc"] for s in by["wait"]]
    interval = iqm_interval([diffs])
    out["heuristic_minus_wait"] = {
        "iqm": interval.estimate,
        "ci95": [interval.low, interval.high],
        "wins_ties_losses": [
            sum(d > 0 for d in diffs),
            sum(d == 0 for d in diffs),
            sum(d < 0 for d in diffs),
        ],
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("1000-1009"), help="LO-HI")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=24)
    parser.add_argument("--smoke", action="store_true", help="2 random seeds, 3 epochs (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.epochs = [0, 1], 3
    ex = _example()
    runs = []
    for seed in args.seeds:
        for policy in ("heuristic", "wait"):
            runs.append(one_run(ex, policy, seed, args.hidden, args.layers, args.epochs))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"args": vars(args), "runs": runs, "summary": summary(runs)}, indent=1))


if __name__ == "__main__":
    main()
