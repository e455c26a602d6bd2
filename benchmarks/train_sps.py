"""Host epochs per second of ``esper train`` (PPO, digits impaired) by number of envs,
serial executor vs ``--executor distributed --nproc 2``.

Each configuration trains ``--updates`` updates of one episode of every env
(``rollout_episodes=1``) of ``--max-epochs`` epochs, with the greedy evaluation off, and
reports host epochs (envs x episodes x epochs) per second of the run's own wall time
(``summary.json``'s, without interpreter start-up), and per second of the whole
command. Each command gets ``OMP_NUM_THREADS=1`` and ``run.threads=1``; the machine's
load average before and after each command is printed with it, because on a shared
machine the other jobs move these numbers as much as the code does.

Each configuration runs ``--repeats`` times (serial and distributed alternating);
``ratios`` gives, per number of envs, the distributed/serial SPS ratio of each repetition
with its spread (median, interquartile range, bootstrap interval of the median).
``--smoke``: 2 envs, one update of one epoch of one batch, once (the same path and JSON
keys).

    OMP_NUM_THREADS=1 python benchmarks/train_sps.py [--envs 1 4 8] [--updates 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread


def train(envs: int, distributed: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "esper_cli",
        "train",
        "--task",
        "digits",
        "--set",
        "tasks.digits.preset=impaired",
        "--envs",
        str(envs),
        "--updates",
        str(args.updates),
        "--max-epochs",
        str(args.max_epochs),
        "--set",
        "policies.ppo.rollout_episodes=1",
        "--set",
        "train.eval_every=0",
        "--set",
        'run.telemetry=["jsonl"]',
        "--set",
        "run.threads=1",
        "--out",
        str(out),
        "--quiet",
        "--json",
        *[arg for kv in args.set for arg in ("--set", kv)],
    ]
    if distributed:
        command += ["--executor", "distributed", "--nproc", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    command_time = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(command)}")
    summary = json.loads(done.stdout)
    epochs = envs * args.updates * args.max_epochs
    return {
        "envs": envs,
        "executor": "distributed --nproc 2" if distributed else "serial",
        "host_epochs": epochs,
        "run_wall_s": round(summary["wall_time"], 1),
        "sps": round(epochs / summary["wall_time"], 2),
        "sps_with_startup": round(epochs / command_time, 2),
        "loadavg_before": round(load_before[0], 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="extra config override")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.envs, args.updates, args.max_epochs, args.repeats = [2], 1, 1, 1
        args.set = [*args.set, "env.max_batches=1"]
    root = Path(tempfile.mkdtemp(prefix="train-sps-"))
    rows = []
    sps: dict[tuple[int, bool], list[float]] = {}
    for repeat in range(args.repeats):
        for envs in args.envs:
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for distributed in order:
                if distributed and envs < 2:
                    continue  # two ranks need an env each
                name = f"{envs}-{'dist' if distributed else 'serial'}-{repeat}"
                rows.append(train(envs, distributed, args, root / name))
                sps.setdefault((envs, distributed), []).append(rows[-1]["sps"])
                sys.stderr.write(json.dumps(rows[-1]) + "\n")
    ratios = {
        str(envs): spread(paired_ratios(sps[envs, True], sps[envs, False]), digits=3)
        for envs in args.envs
        if (envs, True) in sps
    }
    print(
        json.dumps(
            {"benchmark": "train_sps", "cpus": os.cpu_count(), "rows": rows, "ratios": ratios},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
