"""The shipped ``ppo:pretrained`` on user models it never saw, through the Grower.

Each run is a user's own loop that knows nothing of Esper but one
``grower.end_epoch(val_loader)`` per epoch. Two user models, neither a host nor a task
the pretrained policy was trained on (PRETRAINED.md):

* ``mlp``: the tabular MLP of ``examples/own_model_mlp.py`` (its data, loop, optimizer,
  24 epochs and slots; an MLP host: the policy was trained on CNN hosts only);
* ``cnn``: a user's three-block CNN on generated 3x16x16 images of 6 classes (a pattern
  per class, shifted, under noise), three slots, SGD, 20 epochs.

Per model, policy and seed: final test accuracy of the grown model, the parameters it
holds at the end (host and seeds, ``params_held``) and its training FLOPs (forward and
backward of every epoch's samples, counted at the start of each epoch with
``count_train_flops`` on one batch, so a seed counts from the epoch it is born). Then,
per model, the IQM of each metric with a 95 % bootstrap interval and each policy's
paired difference from the baseline (same seed: same data and initial weights), W/T/L.

    OMP_NUM_THREADS=1 python benchmarks/ppo_pretrained_grower.py --model mlp \\
        --seeds 3000-3009 --out /work/scratch/pretrained/grower-mlp.json

The heuristic runs as the example runs it for the MLP (``trigger=slowdown``, ``tempo=3``,
the example author's settings for that model) and with its defaults for the CNN.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("ppo:pretrained", "heuristic", "wait")
# The documented install's CNN blueprints (requirements.txt): a third-party package that
# happens to be installed (the example plugin's cnn/dilated) is left out of the choice.
CNN_BLUEPRINTS = (
    'env.blueprints=["cnn/noop","cnn/norm","cnn/attention","cnn/depthwise","cnn/bottleneck",'
    '"cnn/conv_small","cnn/conv_light","cnn/conv_heavy","cnn/conv_layer","cnn/widen",'
    '"cnn/widen4x"]'
)


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "own_model_mlp", REPO / "examples/own_model_mlp.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class UserCNN(nn.Module):
    """A user's CNN: three conv blocks (8, 16, 32 channels), global pool, linear head."""

    def __init__(self, classes: int = 6) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.ReLU())
        self.block3 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.block3(self.block2(self.block1(x))))
        return out


def cnn_splits(seed: int) -> tuple[TensorDataset, ...]:
    """Train / validation / test (2000 / 500 / 500): a random pattern per class, shifted
    by up to 3 pixels, under noise of the pattern's own scale."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(6, 3, 16, 16, generator=g)

    def split(n: int) -> TensorDataset:
        y = torch.randint(0, 6, (n,), generator=g)
        shifts = torch.randint(-3, 4, (n, 2), generator=g)
        x = torch.stack(
            [
                torch.roll(patterns[c], (int(s[0]), int(s[1])), dims=(1, 2))
                for c, s in zip(y, shifts)
            ]
        )
        return TensorDataset(x + 1.0 * torch.randn(x.shape, generator=g), y)

    return split(2000), split(500), split(500)


def _setup(model_name: str, seed: int, policy: str) -> dict[str, Any]:
    torch.manual_seed(seed)
    if model_name == "mlp":
        ex = _example()
        train, val, test = ex.make_splits(seed)
        model: nn.Module = ex.TabularMLP()
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        heuristic = ["policies.heuristic.trigger=slowdown", "policies.heuristic.tempo=3"]
        return {
            "data": (train, val, test),
            "model": model,
            "opt": opt,
            "slots": ["body.1", "body.3"],
            "epochs": 24,
            "batch": 64,
            "overrides": heuristic if policy == "heuristic" else [],
        }
    train, val, test = cnn_splits(seed)
    model = UserCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    return {
        "data": (train, val, test),
        "model": model,
        "opt": opt,
        "slots": ["block1", "block2", "block3"],
        "epochs": 20,
        "batch": 64,
        "overrides": [CNN_BLUEPRINTS],
    }


def one_run(model_name: str, seed: int, policy: str, epochs: int | None = None) -> dict[str, Any]:
    import esper_core
    from esper_core.env.cost import count_train_flops, params_held

    s = _setup(model_name, seed, policy)
    if epochs is not None:
        s["epochs"] = epochs
    train, val, test = s["data"]
    model, opt = s["model"], s["opt"]
    loader = DataLoader(train, batch_size=s["batch"], shuffle=True)
    val_loader = DataLoader(val, batch_size=1000)
    grower = esper_core.Grower(
        model,
        slots=s["slots"],
        example_input=val[:2][0],
        policy=policy,
        optimizer=opt,
        max_epochs=s["epochs"],
        seed=seed,
        overrides=s["overrides"],
    )
    flops = 0
    probe_x, probe_y = train[: s["batch"]]
    started = time.perf_counter()
    actions = []
    for _ in range(s["epochs"]):
        flops += count_train_flops(model, nn.functional.cross_entropy, probe_x, probe_y) * (
            len(train) // s["batch"]
        )
        model.train()
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        grower.end_epoch(val_loader)
        if grower.decision is not None and not grower.decision.action.startswith("WAIT"):
            actions.append(f"{grower.epoch}: {grower.decision.action}")
    model.eval()
    with torch.no_grad():
        x, y = test[:]
        acc = 100.0 * float((model(x).argmax(dim=1) == y).float().mean())
    reports = [
        {
            "slot": r.slot_id,
            "stage": r.stage.value,
            "blueprint": r.blueprint,
            "params": r.seed_params,
        }
        for r in grower.reports()
    ]
    return {
        "model": model_name,
        "policy": policy,
        "seed": seed,
        "test_acc": acc,
        "params": params_held(grower.model),
        "train_flops": flops,
        "wall_s": time.perf_counter() - started,
        "actions": actions,
        "slots": reports,
    }


def summarise(runs: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    from esper_core.compare.stats import iqm_interval

    rows = []
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    by = {(r["policy"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    for policy in policies:
        row: dict[str, Any] = {"policy": policy, "n": len(seeds)}
        for metric, better in (("test_acc", 1), ("params", -1), ("train_flops", -1)):
            values = [by[(policy, s)][metric] for s in seeds]
            interval = iqm_interval([values])
            row[metric] = [interval.estimate, interval.low, interval.high]
            if policy != baseline:
                diffs = [by[(policy, s)][metric] - by[(baseline, s)][metric] for s in seeds]
                d = iqm_interval([diffs])
                wins = sum(better * v > 0 for v in diffs)
                ties = sum(v == 0 for v in diffs)
                row[f"{metric}_vs_{baseline}"] = [d.estimate, d.low, d.high]
                row[f"{metric}_wtl"] = [wins, ties, len(diffs) - wins - ties]
        rows.append(row)
    return rows


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--seeds", default="3000-3009", help="A-B, inclusive")
    parser.add_argument(
        "--policy", action="append", help="repeatable; default: " + ", ".join(POLICIES)
    )
    parser.add_argument("--baseline", default="heuristic")
    parser.add_argument(
        "--out", type=Path, help="JSON written here after every run; finished runs are kept"
    )
    parser.add_argument("--smoke", action="store_true", help="one seed, 2-epoch runs, no file")
    args = parser.parse_args(argv)
    policies = args.policy or list(POLICIES)
    epochs = 2 if args.smoke else None
    seeds = [3000] if args.smoke else _seeds(args.seeds)
    out = None if args.smoke else args.out
    if out is None and not args.smoke:
        parser.error("--out is required (or --smoke)")
    done: list[dict[str, Any]] = []
    if out is not None and out.is_file():
        done = json.loads(out.read_text())["runs"]
    have = {(r["policy"], r["seed"]) for r in done}
    for seed in seeds:
        for policy in policies:
            if (policy, seed) in have:
                continue
            run = one_run(args.model, seed, policy, epochs)
            done.append(run)
            print(
                f"{policy:>16} seed {seed}: {run['test_acc']:.2f} % {run['params']:,} params "
                f"{run['train_flops'] / 1e9:.3f} GFLOPs {run['wall_s']:.1f}s {run['actions'][:3]}",
                file=sys.stderr,
                flush=True,
            )
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"runs": done}, indent=1))
    summary = summarise(done, args.baseline) if args.baseline in policies else []
    result = {"model": args.model, "runs": done, "summary": summary}
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result if args.smoke else summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
