"""Train PPO on digits (impaired host) with the defaults, then compare it with the
heuristic and `wait` on evaluation seeds never used in training or tuning.

The impaired host (``tasks.digits.preset=impaired``) is the base CNN cut after its first
block, so it cannot see a digit's layout; a seed in its slot adds the depth it lacks, so
a controller that grows it well ends far above one that never grows it.

Two commands, run one after another in this process's environment, each with
``OMP_NUM_THREADS=1`` and ``run.threads=1``:

1. ``esper train --task digits --set tasks.digits.preset=impaired --seed TRAIN_SEED``:
   nothing else, so every PPO setting, the number of envs, the rollout length, the
   number of updates and the reward (``pbrs``) are the defaults. Training episodes use
   env seeds TRAIN_SEED + k (k < updates x rollout episodes x envs: 0-79 by default),
   the greedy evaluations during training seeds 100000-100002 (``train.eval_seeds``).
2. ``esper compare`` of the trained checkpoint (acting greedily: the most likely action
   of every head), ``heuristic`` and ``wait`` on ``--eval-seeds`` seeds from
   ``--eval-seed`` (2000-2009 by default): one episode per seed and policy, IQM of the
   final test accuracy with a 95% bootstrap CI, and P(policy > wait).

The JSON printed at the end holds the training time and the machine load around it
(``os.getloadavg``: on a shared machine the wall time says as much about the others'
jobs as about this one), the training curve and the comparison, and whether the issue
17 acceptance holds: PPO's IQM at least 15 points above wait's and at most 2 below the
heuristic's.

    OMP_NUM_THREADS=1 python benchmarks/ppo_digits.py [--out DIR] [--eval-seeds 10]

``--smoke``: one update of one 2-epoch episode, then the comparison on 2 seeds of 2-epoch
episodes (the same commands and JSON keys; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TASK = ["--task", "digits", "--set", "tasks.digits.preset=impaired"]


def esper(args: list[str]) -> dict[str, Any]:
    """Run one ``esper`` command; return its JSON output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "esper_cli", *args, "--set", "run.threads=1", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(command)}")
    return json.loads(done.stdout)


def training_curve(summary: dict[str, Any]) -> list[dict[str, float]]:
    """Per update: mean final test accuracy and return of its (sampled) rollout episodes."""
    by_update: dict[int, list[dict[str, Any]]] = {}
    for e in summary["episodes"]:
        by_update.setdefault(int(e["update"]), []).append(e)
    return [
        {
            "update": u,
            "final_test_acc": round(statistics.fmean(e["final_test_acc"] for e in g), 2),
            "total_reward": round(statistics.fmean(e["total_reward"] for e in g), 3),
            "seeds_fossilized": sum(e["seeds_fossilized"] for e in g),
            "seeds_pruned": sum(e["seeds_pruned"] for e in g),
        }
        for u, g in sorted(by_update.items())
    ]


def last_update(summary: dict[str, Any]) -> dict[str, float]:
    keys = ("clip_fraction", "approx_kl", "explained_variance", "entropy", "epochs_run")
    last = summary["updates"][-1] if summary.get("updates") else {}
    return {k: round(float(last[k]), 4) for k in keys if k in last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-seed", type=int, default=0)
    parser.add_argument("--eval-seed", type=int, default=2000, help="first evaluation seed")
    parser.add_argument("--eval-seeds", type=int, default=10, help="evaluation seeds")
    parser.add_argument("--jobs", type=int, default=1, help="esper compare -j")
    parser.add_argument("--out", type=Path, help="keep the run directories here")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    short = ["--max-epochs", "2", "--set", "env.max_batches=2"] if args.smoke else []
    one_update = ["--envs", "1", "--updates", "1", "--set", "policies.ppo.rollout_episodes=1"]
    train_extra = [*short, *one_update, "--set", "train.eval_every=0"] if args.smoke else []
    if args.smoke:
        args.eval_seeds = 2

    root = args.out or Path(tempfile.mkdtemp(prefix="ppo-digits-"))
    for name in ("train", "compare"):
        if (root / name).exists():
            shutil.rmtree(root / name)
    root.mkdir(parents=True, exist_ok=True)

    load_before = os.getloadavg()
    started = time.perf_counter()
    train = esper(
        [
            "train",
            *TASK,
            "--seed",
            str(args.train_seed),
            "--out",
            str(root / "train"),
            "--quiet",
            *train_extra,
        ]
    )
    train_time = time.perf_counter() - started
    load_after = os.getloadavg()

    checkpoint = root / "train" / "checkpoint.pt"
    started = time.perf_counter()
    compare = esper(
        [
            "compare",
            *TASK,
            "--policy",
            f"ppo:{checkpoint}",
            "--policy",
            "heuristic",
            "--policy",
            "wait",
            "--set",
            "policies.ppo.deterministic=true",
            "--seeds",
            str(args.eval_seeds),
            "--seed",
            str(args.eval_seed),
            "--baseline",
            "wait",
            "--jobs",
            str(args.jobs),
            "--out",
            str(root / "compare"),
            "--quiet",
            *short,
        ]
    )
    compare_time = time.perf_counter() - started

    print(json.dumps(_result(args, train, train_time, load_before, load_after, compare), indent=2))
    sys.stderr.write(f"compare took {compare_time:.0f} s; run directories in {root}\n")


def _result(
    args: argparse.Namespace,
    train: dict[str, Any],
    train_time: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    compare: dict[str, Any],
) -> dict[str, Any]:
    iqm = {row["policy"]: row for row in _rows(compare)}
    ppo = next(p for p in iqm if p.startswith("ppo"))
    ppo_iqm, wait_iqm = iqm[ppo]["iqm"], iqm["wait"]["iqm"]
    heuristic_iqm = iqm["heuristic"]["iqm"]
    return {
        "benchmark": "ppo_digits",
        "task": "digits (impaired host)",
        "train": {
            "command": "esper train --task digits --set tasks.digits.preset=impaired "
            f"--seed {args.train_seed}",
            "episodes": len(train["episodes"]),
            "wall_time_s": round(train_time, 1),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "cpus": os.cpu_count(),
            "last_update": last_update(train),
            "curve": training_curve(train),
        },
        "eval_seeds": list(range(args.eval_seed, args.eval_seed + args.eval_seeds)),
        "compare": {p: {k: v for k, v in row.items() if k != "policy"} for p, row in iqm.items()},
        "ppo_minus_wait_iqm": round(ppo_iqm - wait_iqm, 2),
        "ppo_minus_heuristic_iqm": round(ppo_iqm - heuristic_iqm, 2),
        "accepted": ppo_iqm - wait_iqm >= 15.0 and ppo_iqm >= heuristic_iqm - 2.0,
    }


def _rows(compare: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per policy: IQM, 95% CI, mean and per-seed final test accuracy, P(> wait)."""
    rows = []
    for row in compare["rows"]:
        metric = row["metrics"]["final_test_acc"]
        values = [
            round(c["final_test_acc"], 2) for c in compare["cells"] if c["policy"] == row["policy"]
        ]
        improvement = row.get("improvement") or {}
        rows.append(
            {
                "policy": row["policy"],
                "iqm": round(metric["iqm"], 2),
                "ci": [round(metric["low"], 2), round(metric["high"], 2)],
                "mean": round(metric["mean"], 2),
                "values": values,
                "p_better_than_wait": improvement.get("probability"),
            }
        )
    return rows


if __name__ == "__main__":
    main()
