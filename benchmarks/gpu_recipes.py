"""What mixed precision and ``torch.compile`` buy on a GPU: seconds per epoch of one env
under fp32 eager, bf16, fp16 and compiled, and seconds per run of the frontier tasks'
largest static hosts, so a researcher knows what a size sweep costs there.

``epochs``: the hosts of benchmarks/gpu_streams.py (digits ``base``, CIFAR-10 ``base`` on
random CIFAR-shaped images), one env, serial executor, wait policy; seconds per epoch
between CUDA events after ``--warmup`` epochs (compilation happens in the warm-up).

``runs``: ``esper run`` of the wait policy on the largest host of each frontier sweep
(glyphs ``large``, charlm ``base`` at the sweep's 60,000 characters) under the task's
default recipe and epochs, once per setting; seconds of the run (``summary.json``'s
wall time: data generation included, interpreter start-up not) and the median epoch
(``metrics.csv``'s ``epoch_time``), with the run's validation accuracy or loss as a
check that the setting trains.

    python benchmarks/gpu_recipes.py --device cuda [--parts epochs runs]

``--smoke``: CPU, one epoch of two batches and runs of one epoch on a few hundred images
(same path and keys).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_streams import HOSTS, device_name, measure

SETTINGS = {
    "fp32-eager": [],
    "bf16-eager": ["training.amp=bf16"],
    "fp16-eager": ["training.amp=fp16"],
    "fp32-compiled": ["training.compile=default"],
    "bf16-compiled": ["training.amp=bf16", "training.compile=default"],
}
FRONTIER = {
    "glyphs-large": ["--task", "glyphs", "--set", "tasks.glyphs.preset=large"],
    "charlm-base": [
        "--task",
        "charlm",
        "--set",
        "tasks.charlm.preset=base",
        "--set",
        "tasks.charlm.max_chars=60000",
    ],
}
RUN_SETTINGS = ("fp32-eager", "bf16-eager", "fp32-compiled")
# ``--smoke``: the same run on a few hundred generated images (the default 20,000 are
# generated, and 10,000 validated and tested on the large host, for nothing).
SMOKE_FRONTIER = {
    "glyphs-large": [
        *("--set", "tasks.glyphs.n_train=256"),
        *("--set", "tasks.glyphs.n_val=128"),
        *("--set", "tasks.glyphs.n_test=128"),
    ],
}


def epochs(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for host in args.hosts:
        for name, extra in SETTINGS.items():
            if torch.device(args.device).type != "cuda" and (
                name.startswith("fp16") or (args.smoke and "compiled" in name)
            ):
                continue  # fp16 autocast is CUDA-only; compiling on CPU takes minutes
            try:
                row = measure(host, 1, "serial", args, *extra)
            except Exception as exc:  # a setting that fails is a finding, not the end
                row = {"host": host, "error": f"{type(exc).__name__}: {exc}"}
            rows.append({**row, "setting": name})
    return rows


def speedups(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for row in rows:
        base = next(
            (r for r in rows if r["host"] == row["host"] and r["setting"] == "fp32-eager"), None
        )
        if base and "gpu_s_per_epoch" in row and "gpu_s_per_epoch" in base:
            out[f"{row['host']}/{row['setting']}"] = round(
                base["gpu_s_per_epoch"] / row["gpu_s_per_epoch"], 3
            )
    return out


def run(task: str, setting: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    out = root / f"{task}-{setting}"
    command = [
        sys.executable,
        "-m",
        "esper_cli",
        "run",
        *FRONTIER[task],
        "--policy",
        "wait",
        "--device",
        args.device,
        "--out",
        str(out),
        "--quiet",
        "--json",
        "--set",
        'run.telemetry=["csv"]',
        *[a for kv in SETTINGS[setting] for a in ("--set", kv)],
        *(["--max-epochs", "1", "--set", "env.max_batches=2"] if args.smoke else []),
        *(SMOKE_FRONTIER.get(task, []) if args.smoke else []),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    row: dict[str, Any] = {"task": task, "setting": setting}
    if done.returncode != 0:
        return {**row, "error": done.stderr.strip().splitlines()[-1:]}
    summary = json.loads(done.stdout)
    with (out / "metrics.csv").open() as f:
        epoch_times = [float(r["epoch_time"]) for r in csv.DictReader(f)]
    return {
        **row,
        "run_s": round(summary["wall_time"], 2),
        "command_s": round(time.perf_counter() - started, 2),
        "epochs": len(epoch_times),
        "median_epoch_s": round(statistics.median(epoch_times), 3),
        "first_epoch_s": round(epoch_times[0], 3),
        "final": {k: summary.get(k) for k in ("final_val_acc_mean", "final_test_loss_mean")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--parts", nargs="+", default=["epochs", "runs"])
    parser.add_argument("--hosts", nargs="+", default=list(HOSTS), choices=list(HOSTS))
    parser.add_argument("--tasks", nargs="+", default=list(FRONTIER), choices=list(FRONTIER))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="CPU, seconds: same path and keys")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.warmup, args.epochs = "cpu", 1, 1
        args.hosts, args.tasks = ["digits-base"], ["glyphs-large"]
    result: dict[str, Any] = {"benchmark": "gpu_recipes", "device": device_name(args.device)}
    if "epochs" in args.parts:
        rows = epochs(args)
        result["epochs"] = rows
        result["speedup_vs_fp32_eager"] = speedups(rows)
    if "runs" in args.parts:
        root = Path(tempfile.mkdtemp(prefix="gpu-recipes-"))
        settings = ("fp32-eager",) if args.smoke else RUN_SETTINGS
        result["runs"] = []
        for task in args.tasks:
            for setting in settings:
                result["runs"].append(run(task, setting, args, root))
                sys.stderr.write(json.dumps(result["runs"][-1]) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
