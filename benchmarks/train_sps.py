"""Host epochs per second of ``esper train`` (PPO, digits impaired) by number of envs,
serial executor vs ``--executor distributed --nproc 2``.

Each configuration trains ``--updates`` updates of one episode of every env
(``rollout_episodes=1``) of ``--max-epochs`` epochs, with the greedy evaluation off, and
reports host epochs (envs x episodes x epochs) per second of the run's own wall time
(``summary.json``'s, without interpreter start-up), and per second of the whole
command. Each command gets ``OMP_NUM_THREADS=1`` and ``run.threads=1``; the machine's
load average before and after each command is printed with it, because on a shared
machine the other jobs move these numbers as much as the code does.

    OMP_NUM_THREADS=1 python benchmarks/train_sps.py [--envs 1 4 8] [--updates 2]
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
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="train-sps-"))
    rows = []
    for envs in args.envs:
        for distributed in (False, True):
            if distributed and envs < 2:
                continue  # two ranks need an env each
            name = f"{envs}-{'dist' if distributed else 'serial'}"
            rows.append(train(envs, distributed, args, root / name))
            sys.stderr.write(json.dumps(rows[-1]) + "\n")
    print(json.dumps({"benchmark": "train_sps", "cpus": os.cpu_count(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
