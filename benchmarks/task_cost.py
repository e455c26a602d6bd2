"""Each task's cost on one CPU thread: seconds per sample and per GFLOP of its runs.

What ``esper compare --dry-run`` estimates a fresh experiment with (a task's
``measured_cost``). For each task, two host sizes (its smallest and its largest preset)
run ``esper run`` in this process under the ``wait`` policy, for 1 and for 3 epochs; the
difference of the two runs' CPU time over the two extra epochs is the time of an epoch
without the run's setup (data, host, FLOP counting), and each epoch's work (samples
through the model, GFLOPs of training and evaluation) is what
:mod:`esper_core.compare.run_cost` predicts for it. The two sizes give two equations in
the two unknowns: seconds per sample (what a tiny host costs) and per GFLOP (what a large
one adds); the setup (a run's time less its epochs', the mean of the two sizes) is the
seconds per run. Prints JSON with every figure it solves from, for BENCHMARKS.md.

    OMP_NUM_THREADS=1 python benchmarks/task_cost.py [--tasks digits glyphs charlm]

CPU budget: about 3 minutes (charlm's ``base`` host dominates). Each task runs on the
settings of its studies, where they bound an epoch (charlm: 300,000 characters, 25
batches of 16 an epoch). ``--smoke``: digits only, one epoch against two, 2 batches an
epoch (the same path and JSON keys; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from esper_core.compare.run_cost import CellCosts
from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api

# Per task: (small preset, large preset, overrides of the studies' settings).
TASKS: dict[str, tuple[str, str, list[str]]] = {
    "digits": ("impaired", "base", []),
    "glyphs": ("tiny", "large", []),
    "charlm": (
        "impaired",
        "base",
        ["tasks.charlm.max_chars=300000", "env.batch_size=16", "env.max_batches=25"],
    ),
}


def _config(task: str, preset: str, epochs: int, extra: list[str]) -> Any:
    sets = [
        f"run.task={task}",
        "run.policy=wait",
        "run.threads=1",
        "run.telemetry=[]",
        "run.checkpoint_every=0",
        "env.eval_test_every=0",
        f"env.max_epochs={epochs}",
        f"tasks.{task}.preset={preset}",
        *extra,
    ]
    return load_config(None, sets)


def _cpu_seconds(config: Any, pm: PluginManager, root: Path, name: str) -> float:
    start = time.process_time()
    api.run(config, pm, run_dir=root / name, quiet=True, notify=lambda _msg: None)
    return time.process_time() - start


def measure(task: str, pm: PluginManager, root: Path, short: int, long: int, extra: list[str]):  # type: ignore[no-untyped-def]
    """Per size: CPU seconds of an epoch, and its samples and GFLOPs; then the two unknowns."""
    small, large, settings = TASKS[task]
    costs = CellCosts(pm)
    # Untimed: the first run of a process imports torch and fills caches.
    _cpu_seconds(_config(task, small, short, [*settings, *extra]), pm, root, f"{task}-warm")
    sizes = {}
    for preset in (small, large):
        runs = {e: _config(task, preset, e, [*settings, *extra]) for e in (short, long)}
        seconds = {e: _cpu_seconds(c, pm, root, f"{task}-{preset}-{e}") for e, c in runs.items()}
        work = {e: costs(c) for e, c in runs.items()}
        assert work[short] and work[long], f"{task} says nothing of its cost"
        extra_epochs = long - short
        sizes[preset] = {
            "epoch_s": (seconds[long] - seconds[short]) / extra_epochs,
            "setup_s": seconds[short] - short * (seconds[long] - seconds[short]) / extra_epochs,
            "epoch_samples": (work[long].work.samples - work[short].work.samples) / extra_epochs,
            "epoch_gflop": (work[long].work.gflop - work[short].work.gflop) / extra_epochs,
        }
    (t1, n1, g1), (t2, n2, g2) = (
        (s["epoch_s"], s["epoch_samples"], s["epoch_gflop"]) for s in sizes.values()
    )
    # t = a n + b g at both sizes (Cramer's rule); a negative part means the two sizes
    # cannot separate it from noise, and the other part carries the whole time.
    det = n1 * g2 - n2 * g1
    per_sample = (t1 * g2 - t2 * g1) / det if det else 0.0
    per_gflop = (n1 * t2 - n2 * t1) / det if det else 0.0
    if per_sample < 0:
        per_sample, per_gflop = 0.0, max(0.0, (t1 + t2) / (g1 + g2))
    elif per_gflop < 0:
        per_sample, per_gflop = max(0.0, (t1 + t2) / (n1 + n2)), 0.0
    return {
        "settings": [f"tasks.{task}.preset={small}|{large}", *settings, *extra],
        "sizes": sizes,
        "seconds_per_run": statistics.fmean(max(0.0, s["setup_s"]) for s in sizes.values()),
        "seconds_per_sample": per_sample,
        "seconds_per_gflop": per_gflop,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    short, long, extra = (1, 3, [])
    if args.smoke:
        args.tasks, short, long, extra = ["digits"], 1, 2, ["env.max_batches=2"]
    pm = PluginManager()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="esper-task-cost-") as scratch:
        tasks = {t: measure(t, pm, Path(scratch), short, long, extra) for t in args.tasks}
    out = {
        "benchmark": "task_cost",
        "clock": "process CPU time, run.threads = 1",
        "epochs": [short, long],
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "cores": os.cpu_count(),
        "tasks": tasks,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
