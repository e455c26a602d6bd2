"""Which ``run.threads`` default is fast on a small CPU host: the README's main command
(``esper run``: the heuristic growing the base CNN on digits, 30 epochs) timed end to end
with ``run.threads`` = 1, 2 and 0 (torch's own default, one thread per core).

Each setting runs ``--repeats`` times in a fresh process (``OMP_NUM_THREADS`` removed from
the environment, so only ``run.threads`` decides), alternating settings so a change in the
machine's load hits all of them alike. Prints JSON: per setting the wall times, their
median, torch's thread count in that process and the final test accuracy, which shows
that the thread count changes the numbers (float sums in another order) as well as the
time.

    python benchmarks/thread_default.py [--repeats 2] [--max-epochs 30] [--threads 1 2 0]

``--smoke``: one run of one epoch with 1 thread and with torch's default (the same path
and JSON keys).

CPU budget: on a 2-core machine about 10 s a run with one thread, minutes with more when
the cores are shared with other work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def timed_run(threads: int, max_epochs: int | None, out: Path, extra: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    command = [sys.executable, "-m", "esper_cli", "run", "--quiet", "--json", "--out", str(out)]
    command += ["--set", f"run.threads={threads}", "--set", "run.telemetry=[]"]
    if max_epochs is not None:
        command += ["--max-epochs", str(max_epochs)]
    command += [arg for kv in extra for arg in ("--set", kv)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(command)}")
    summary = json.loads(done.stdout)
    return {"wall_s": round(wall, 2), "final_test_acc": summary["final_test_acc_mean"]}


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-epochs", type=int, default=None, help="default: the task's (30)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 0])
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.max_epochs, args.threads = 1, 1, [1, 0]
    extra = ["env.max_batches=2"] if args.smoke else []

    runs: dict[int, list[dict[str, Any]]] = {t: [] for t in args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for threads in args.threads:
                out = Path(tmp) / f"t{threads}-r{repeat}"
                runs[threads].append(timed_run(threads, args.max_epochs, out, extra))
    settings = {}
    for threads, records in runs.items():
        walls = [r["wall_s"] for r in records]
        settings[str(threads)] = {
            # 0: torch's default in the child, one thread per usable core (this process's
            # own count follows OMP_NUM_THREADS, which the children do not get).
            "torch_threads": threads or usable_cpus(),
            "wall_s": walls,
            "median_wall_s": statistics.median(walls),
            "final_test_acc": sorted({r["final_test_acc"] for r in records}),
        }
    fastest = min(settings, key=lambda k: settings[k]["median_wall_s"])
    print(
        json.dumps(
            {
                "benchmark": "thread_default",
                "command": "esper run",
                "usable_cpus": usable_cpus(),
                "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                "max_epochs": args.max_epochs,
                "settings": settings,
                "fastest": fastest,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
