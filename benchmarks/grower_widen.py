"""Widening a user's own layers through the Grower, against the same model built wide.

Each run is a user's own loop that knows nothing of Esper but one
``grower.end_epoch(val_loader)`` per epoch (the loops, data and optimizers of
``benchmarks/ppo_pretrained_grower.py``: the tabular MLP of ``examples/own_model_mlp.py``
and a user's three-block CNN). Arms, per model:

* ``narrow``: the model as the user wrote it (``wait``);
* ``wide``: the same model built ``--factor`` times as wide in every layer pair, from
  scratch (``wait``): the grown model's final architecture, and the static point a user
  would otherwise pick;
* ``widen@f``: the narrow model, every layer pair widened ``--factor`` times at the
  fraction ``f`` of the run (``policies.static.widen_at``), its mask ramped over
  ``--tempo`` epochs and folded.

Every arm's learning rate is chosen on the tuning seeds by final validation accuracy,
and so is ``f`` among the growth arms; then every chosen arm runs on the evaluation
seeds, never used for a choice. Reported per arm: final test accuracy, parameters at the
end and training FLOPs (forward and backward of each epoch's samples, counted at the start
of each epoch on one batch, so the masked ramp counts as it runs), IQM with a 95 %
bootstrap interval, and the paired difference (same seed: same data and initial narrow
weights) against ``wide`` and ``narrow``, with wins/ties/losses.

    OMP_NUM_THREADS=1 python benchmarks/grower_widen.py --model mlp \\
        --out /work/scratch/widen/mlp.json
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
from torch.utils.data import DataLoader

REPO = Path(__file__).resolve().parents[1]
TUNING_SEEDS = (100, 101, 102)
EVAL_SEEDS = tuple(range(3000, 3010))
LRS = {"mlp": (1e-3, 3e-3, 1e-2, 3e-2), "cnn": (0.01, 0.02, 0.05, 0.1)}
AT = (0.1, 0.25, 0.5)


def _module(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class UserCNN(nn.Module):
    """The benchmark's user CNN (``ppo_pretrained_grower.UserCNN``), ``width`` times as wide."""

    def __init__(self, width: float = 1.0, classes: int = 6) -> None:
        super().__init__()
        a, b, c = (round(n * width) for n in (8, 16, 32))
        self.block1 = nn.Sequential(nn.Conv2d(3, a, 3, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(a, b, 3, padding=1, stride=2), nn.ReLU())
        self.block3 = nn.Sequential(nn.Conv2d(b, c, 3, padding=1, stride=2), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.block3(self.block2(self.block1(x))))
        return out


def _setup(model_name: str, seed: int, width: float, lr: float) -> dict[str, Any]:
    torch.manual_seed(seed)
    if model_name == "mlp":
        ex = _module("own_model_mlp", "examples/own_model_mlp.py")
        model: nn.Module = ex.TabularMLP(hidden=round(16 * width))
        return {
            "data": ex.make_splits(seed),
            "model": model,
            "opt": torch.optim.AdamW(model.parameters(), lr=lr),
            "slots": ["body.1", "body.3"],
            "epochs": 24,
        }
    bench = _module("ppo_pretrained_grower", "benchmarks/ppo_pretrained_grower.py")
    model = UserCNN(width)
    return {
        "data": bench.cnn_splits(seed),
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True),
        "slots": ["block1", "block2", "block3"],
        "epochs": 20,
    }


def one_run(
    model_name: str, seed: int, arm: str, lr: float, factor: float, tempo: int,
    epochs: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    import esper_core
    from esper_core.env.cost import count_train_flops, params_held

    width = factor if arm == "wide" else 1.0
    s = _setup(model_name, seed, width, lr)
    epochs = epochs or s["epochs"]
    train, val, test = s["data"]
    model, opt = s["model"], s["opt"]
    overrides = []
    if arm.startswith("widen@"):
        overrides = [
            f"policies.static.widen_at={arm.removeprefix('widen@')}",
            f"policies.static.widen_factor={factor}",
            f"policies.static.widen_tempo={tempo}",
        ]
    grower = esper_core.Grower(
        model, slots=s["slots"], example_input=val[:2][0], optimizer=opt, max_epochs=epochs,
        seed=seed, policy="static" if overrides else "wait", overrides=overrides,
    )  # fmt: skip
    loader = DataLoader(train, batch_size=64, shuffle=True)
    val_loader = DataLoader(val, batch_size=1000)
    probe_x, probe_y = train[:64]
    flops, started = 0, time.perf_counter()
    for _ in range(epochs):
        flops += count_train_flops(model, nn.functional.cross_entropy, probe_x, probe_y) * (
            len(train) // 64
        )
        model.train()
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        step = grower.end_epoch(val_loader)
    model.eval()
    with torch.no_grad():
        x, y = test[:]
        acc = 100.0 * float((model(x).argmax(dim=1) == y).float().mean())
    return {
        "arm": arm, "seed": seed, "lr": lr, "test_acc": acc,
        "val_acc": step.metrics.val_acc, "params": params_held(grower.model),
        "train_flops": flops, "wall_s": time.perf_counter() - started,
    }  # fmt: skip


def choose(runs: list[dict[str, Any]], arms: list[str]) -> dict[str, float]:
    """Each arm's learning rate by mean validation accuracy over the tuning seeds."""
    chosen = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        by_lr: dict[float, list[float]] = {}
        for r in mine:
            by_lr.setdefault(r["lr"], []).append(r["val_acc"])
        chosen[arm] = max(by_lr, key=lambda lr: sum(by_lr[lr]) / len(by_lr[lr]))
    return chosen


def _mean_val(runs: list[dict[str, Any]], arm: str, lr: float) -> float:
    values = [r["val_acc"] for r in runs if r["arm"] == arm and r["lr"] == lr]
    return sum(values) / len(values)


def summarise(runs: list[dict[str, Any]], baselines: tuple[str, ...]) -> list[dict[str, Any]]:
    from esper_core.compare.stats import iqm_interval

    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    rows = []
    for arm in dict.fromkeys(r["arm"] for r in runs):
        row: dict[str, Any] = {"arm": arm, "lr": by[(arm, seeds[0])]["lr"], "n": len(seeds)}
        for metric in ("test_acc", "params", "train_flops"):
            ci = iqm_interval([[by[(arm, s)][metric] for s in seeds]])
            row[metric] = [ci.estimate, ci.low, ci.high]
        for base in baselines:
            if base == arm:
                continue
            diffs = [by[(arm, s)]["test_acc"] - by[(base, s)]["test_acc"] for s in seeds]
            d = iqm_interval([diffs])
            wins, ties = sum(v > 0 for v in diffs), sum(v == 0 for v in diffs)
            row[f"vs_{base}"] = [d.estimate, d.low, d.high]
            row[f"vs_{base}_wtl"] = [wins, ties, len(diffs) - wins - ties]
            flops = [by[(arm, s)]["train_flops"] / by[(base, s)]["train_flops"] for s in seeds]
            row[f"flops_vs_{base}"] = sum(flops) / len(flops)
        rows.append(row)
    return rows


def _run_all(
    jobs: list[tuple[str, int, float]], done: list[dict[str, Any]], args: Any, out: Path | None
) -> list[dict[str, Any]]:
    have = {(r["arm"], r["seed"], r["lr"]) for r in done}
    for arm, seed, lr in jobs:
        if (arm, seed, lr) in have:
            continue
        epochs = 2 if args.smoke else None
        run = one_run(args.model, seed, arm, lr, args.factor, args.tempo, epochs)
        done.append(run)
        print(
            f"{arm:>10} seed {seed} lr {lr:g}: val {run['val_acc']:.2f} test {run['test_acc']:.2f} "
            f"{run['params']:,} params {run['train_flops'] / 1e9:.3f} GFLOPs {run['wall_s']:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        if out is not None:
            out.write_text(json.dumps({"partial": done}, indent=1))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--tempo", type=int, default=3)
    parser.add_argument("--out", type=Path, help="JSON; finished runs in it are kept")
    parser.add_argument("--smoke", action="store_true", help="one seed each, 2 epochs, no file")
    args = parser.parse_args(argv)
    if args.out is None and not args.smoke:
        parser.error("--out is required (or --smoke)")
    out = None if args.smoke else args.out
    tuning, evaluation = (
        (TUNING_SEEDS[:1], EVAL_SEEDS[:2]) if args.smoke else (TUNING_SEEDS, EVAL_SEEDS)
    )
    lrs = LRS[args.model][:1] if args.smoke else LRS[args.model]
    growth = [f"widen@{f:g}" for f in (AT[1:2] if args.smoke else AT)]
    arms = ["narrow", "wide", *growth]
    done: list[dict[str, Any]] = []
    if out is not None and out.is_file():
        saved = json.loads(out.read_text())
        done = saved.get("partial") or saved["tuning"] + saved["evaluation"]
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    tune_jobs = [(a, s, lr) for a in arms for s in tuning for lr in lrs]
    done = _run_all(tune_jobs, done, args, out)
    tuned = [r for r in done if r["seed"] in tuning]
    lr_of = choose(tuned, arms)
    best = max(growth, key=lambda a: _mean_val(tuned, a, lr_of[a]))
    chosen = ["narrow", "wide", best]
    eval_jobs = [(a, s, lr_of[a]) for s in evaluation for a in chosen]
    done = _run_all(eval_jobs, done, args, out)
    evaluated = [
        r
        for r in done
        if r["seed"] in evaluation and r["arm"] in chosen and r["lr"] == lr_of[r["arm"]]
    ]
    result = {
        "model": args.model, "factor": args.factor, "tempo": args.tempo,
        "tuning_seeds": list(tuning), "eval_seeds": list(evaluation),
        "lr_grid": list(lrs), "chosen_lr": lr_of, "chosen_growth": best,
        "tuning_val": {a: {str(lr): _mean_val(tuned, a, lr) for lr in lrs} for a in arms},
        "summary": summarise(evaluated, ("wide", "narrow")),
        "tuning": tuned, "evaluation": evaluated,
    }  # fmt: skip
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    keys = ("model", "factor", "tempo", "chosen_lr", "chosen_growth", "summary")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
