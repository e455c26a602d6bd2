"""``esper train`` (PPO) with the distributed executor: 2 ranks vs 1 rank.

Both sides run the same training (same task, envs, epochs, updates) through
``DistributedExecutor.launch_local`` - the path of ``esper train --executor distributed
--nproc N`` - so start-up and measurement are alike. Each rank reports its wall time
inside ``api.train`` (process start-up and imports excluded) and its peak resident
memory. SPS = env steps (epochs) of every env / rank 0's wall time. Each rank builds only
its own envs, so a rank of 2 should hold less memory than the single process holding all
of them. The default host is the digits CNN widened to 128 base channels (about 30 MB per
env once trained: weights, SGD state, activations), with 4 batches per epoch, so envs
weigh something next to the ~800 MB of a process with torch and the task loaded.
Repetitions alternate 1 and 2 ranks so machine noise hits both alike; the speed-up is
also taken per repetition and printed with its spread (``speedup_spread``). ``--smoke``:
2 envs, 1 epoch of 1 batch, one greedy-evaluation seed, one repetition, the default host
width: the same path (both launches) and JSON keys.

    OMP_NUM_THREADS=1 python benchmarks/distributed_sps.py [--envs 8] [--epochs 3] [--updates 1]
        [--reps 2] [--set SECTION.KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread

# The base host widened (digits now defaults to the one-block impaired preset).
DEFAULT_SETS = [
    "tasks.digits.preset=base",
    "tasks.digits.base_channels=128",
    "env.max_batches=4",
]


def rank_job(config: Any, run_dir: str, out: str) -> dict[str, Any]:
    """One rank: train, then write this rank's wall time and peak memory to ``out``."""
    from esper_core.plugins import PluginManager
    from esper_core.run import api

    started = time.perf_counter()
    summary = api.train(config, PluginManager(), run_dir=Path(run_dir), quiet=True)
    wall = time.perf_counter() - started
    rank = int(os.environ.get("RANK", "0"))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"wall": wall, "peak_mib": peak_kib / 1024})
    )
    return summary


def measure(nproc: int, args: argparse.Namespace) -> dict[str, Any]:
    from esper_streams.distributed import DistributedExecutor, DistributedOptions

    from esper_core.config import load_config

    config = load_config(
        overrides=[
            f"run.task={args.task}",
            "run.policy=ppo",
            "run.reward=pbrs",
            "run.executor=distributed",
            "run.telemetry=[]",
            f"run.n_envs={args.envs}",
            "run.threads=1",
            f"env.max_epochs={args.epochs}",
            f"train.updates={args.updates}",
            *args.set,
        ]
    )
    with tempfile.TemporaryDirectory(prefix="esper-bench-") as tmp:
        job = functools.partial(rank_job, config, str(Path(tmp) / "run"), tmp)
        DistributedExecutor.launch_local(nproc, job, DistributedOptions(timeout=300))
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(nproc)]
    steps = args.envs * args.epochs * args.updates
    return {
        "sps": steps / ranks[0]["wall"],
        "wall_s": ranks[0]["wall"],
        "peak_mib_per_rank": [r["peak_mib"] for r in ranks],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="digits")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        help=f"config override (repeatable; applied after {' '.join(DEFAULT_SETS)})",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    args.set = [*DEFAULT_SETS, *args.set]
    if args.smoke:
        args.envs, args.epochs, args.updates, args.reps = 2, 1, 1, 1
        # One greedy-evaluation seed (the references and the trained policy still play it)
        # and one probe batch: the same path at the least work.
        args.set = ["env.max_batches=1", "train.eval_seeds=[100000]", "env.expansion_batches=1"]
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for _ in range(args.reps):
        for nproc in (1, 2):
            runs[nproc].append(measure(nproc, args))
    one, two = runs[1], runs[2]
    sps1 = statistics.median(r["sps"] for r in one)
    sps2 = statistics.median(r["sps"] for r in two)
    peak1 = statistics.median(r["peak_mib_per_rank"][0] for r in one)
    peak2 = statistics.median(max(r["peak_mib_per_rank"]) for r in two)
    print(
        json.dumps(
            {
                "task": args.task,
                "envs": args.envs,
                "epochs": args.epochs,
                "updates": args.updates,
                "reps": args.reps,
                "overrides": args.set,
                "cpu_count": os.cpu_count(),
                "sps_1_rank": round(sps1, 2),
                "sps_2_ranks": round(sps2, 2),
                "speedup": round(sps2 / sps1, 3),
                "speedup_spread": spread(
                    paired_ratios([r["sps"] for r in two], [r["sps"] for r in one]), digits=3
                ),
                "load_average": list(os.getloadavg()),
                "peak_rss_mib_1_rank": round(peak1, 1),
                "peak_rss_mib_per_rank_2_ranks": round(peak2, 1),
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
