"""Train PPO on digits with the impaired host, then compare it with the `wait` baseline.

The impaired host (``tasks.digits.preset=impaired``) is the base CNN cut after its first
block, so it cannot see a digit's layout; a seed in its slot adds the depth it lacks, so
a controller that grows it well should end above a controller that never grows it.

Four commands, run one after another in this process's environment (set
``OMP_NUM_THREADS=1``; every command also gets ``run.threads=1``):

1. ``esper train --policy ppo`` for ``--updates`` rollouts of ``--envs`` episodes of
   ``--max-epochs`` epochs (training env seeds ``--train-seed + k``, k < envs x updates);
2. ``esper run --policy ppo:TRAIN/checkpoint.pt`` (deterministic: the most likely action
   of every head) on the held-out seeds ``--eval-seed .. --eval-seed + --eval-envs - 1``;
3. the same with the policy sampling its actions (reported, not part of the acceptance);
4. ``esper run --policy wait`` on the same seeds.

Every env of an evaluation run is one episode with its own seed (host init and data
order); the task's train/validation/test split is fixed, so both policies are measured
on the same test images. Plugins are named explicitly (autoload off), so the action
vocabulary does not depend on whatever else is installed. The JSON printed at the end
holds the per-seed and mean final test accuracy of both policies and the training curve.

CPU budget (the defaults): 4 envs x 45 updates x 30 epochs (the digits episode length)
= 5400 host epochs of the impaired host, plus 15 evaluation episodes. Measured on one
thread of the shared 2-core machine: 11 min of training (29 min while another training
job shared the machine), 1 min of evaluation; budget: at most 40 min on one thread.

Reward: ``simplified`` (PBRS + a small cost per non-WAIT action + a terminal reward for
the final validation accuracy and for each fossil that contributes). ``pbrs`` charges a
parameter rent relative to the host, and this host has only 682 parameters: measured with
a scripted grower, the episode that grew a 9k-parameter conv seed to 98% test accuracy
paid 4.0 in rent and got a total ``pbrs`` reward of 6.9, less than the episodes that grew
tiny seeds and ended at 69-73% (8.2-8.4), so under ``pbrs`` the best policy here would be
not to grow useful seeds.

PPO options: the defaults except ``learning_rate=0.001`` (still annealed to 0, with the KL
early stop as a guard): with 3e-4 the policy moved by an approximate KL of ~1e-4 per
update on these 120-step rollouts, and after 60 updates its blueprint head was still
undecided (most likely choice ``cnn/norm`` at p = 0.63), too slow for this budget.

    OMP_NUM_THREADS=1 python benchmarks/ppo_digits.py [--updates 45] [--envs 4] [--out DIR]
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
TELEMETRY = ["--plugin", "telemetry.jsonl", "--set", 'run.telemetry=["jsonl"]']


def esper(args: list[str]) -> dict[str, Any]:
    """Run one ``esper`` command; return its JSON summary."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ESPER_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [
        sys.executable,
        "-m",
        "esper_cli",
        *args,
        "--set",
        "run.threads=1",
        "--quiet",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(command)}")
    return json.loads(done.stdout)


def per_seed(summary: dict[str, Any]) -> dict[str, float]:
    return {str(e["seed"]): e["final_test_acc"] for e in summary["episodes"]}


def training_curve(summary: dict[str, Any], n_envs: int) -> list[dict[str, float]]:
    """Mean final test accuracy and total reward of each update's episodes (stochastic policy)."""
    episodes = summary["episodes"]
    curve = []
    for k in range(0, len(episodes), n_envs):
        group = episodes[k : k + n_envs]
        curve.append(
            {
                "update": k // n_envs,
                "final_test_acc": statistics.fmean(e["final_test_acc"] for e in group),
                "total_reward": statistics.fmean(e["total_reward"] for e in group),
                "seeds_fossilized": sum(e["seeds_fossilized"] for e in group),
                "seeds_pruned": sum(e["seeds_pruned"] for e in group),
            }
        )
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4, help="training envs (episodes per update)")
    parser.add_argument("--updates", type=int, default=45)
    parser.add_argument(
        "--max-epochs", type=int, default=30, help="epochs per episode (digits default: 30)"
    )
    parser.add_argument("--train-seed", type=int, default=0)
    parser.add_argument("--eval-seed", type=int, default=1000, help="first held-out seed")
    parser.add_argument(
        "--eval-envs", type=int, default=5, help="held-out seeds (one episode each)"
    )
    parser.add_argument(
        "--out", type=Path, help="keep the run directories here (default: a temp dir)"
    )
    parser.add_argument(
        "--reward", default="simplified", help="reward family (see the module docstring)"
    )
    parser.add_argument(
        "--ppo-set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="PPO option (repeatable; replaces the default learning_rate=0.001)",
    )
    args = parser.parse_args()
    if args.ppo_set is None:
        args.ppo_set = ["learning_rate=0.001"]
    if args.train_seed + args.envs * args.updates > args.eval_seed:
        raise SystemExit("training seeds would overlap the held-out seeds; raise --eval-seed")

    plugins = ["tasks.digits", "blueprints.cnn", f"rewards.{args.reward}"]
    common_plugins = [a for p in plugins for a in ("--plugin", p)]
    root = args.out or Path(tempfile.mkdtemp(prefix="ppo-digits-"))
    for name in ("train", "eval-ppo", "eval-ppo-sampled", "eval-wait"):
        if (root / name).exists():
            shutil.rmtree(root / name)
    episode = ["--max-epochs", str(args.max_epochs), "--reward", args.reward]
    ppo_sets = [a for kv in args.ppo_set for a in ("--set", f"policies.ppo.{kv}")]

    started = time.perf_counter()
    train = esper(
        [
            "train",
            *common_plugins,
            "--plugin",
            "policies.ppo",
            *TASK,
            *TELEMETRY,
            *episode,
            *ppo_sets,
            "--envs",
            str(args.envs),
            "--updates",
            str(args.updates),
            "--seed",
            str(args.train_seed),
            "--out",
            str(root / "train"),
        ]
    )
    train_time = time.perf_counter() - started
    evaluation = [
        *TASK,
        *TELEMETRY,
        *episode,
        "--envs",
        str(args.eval_envs),
        "--episodes",
        "1",
        "--seed",
        str(args.eval_seed),
    ]
    checkpoint = root / "train" / "checkpoint.pt"
    started = time.perf_counter()
    ppo = esper(
        [
            "run",
            *common_plugins,
            "--plugin",
            "policies.ppo",
            *evaluation,
            "--policy",
            f"ppo:{checkpoint}",
            "--set",
            "policies.ppo.deterministic=true",
            "--out",
            str(root / "eval-ppo"),
        ]
    )
    # Secondary (not the acceptance): the same policy sampling its actions.
    sampled = esper(
        [
            "run",
            *common_plugins,
            "--plugin",
            "policies.ppo",
            *evaluation,
            "--policy",
            f"ppo:{checkpoint}",
            "--out",
            str(root / "eval-ppo-sampled"),
        ]
    )
    wait = esper(
        [
            "run",
            *common_plugins,
            "--plugin",
            "policies.wait",
            *evaluation,
            "--policy",
            "wait",
            "--out",
            str(root / "eval-wait"),
        ]
    )
    eval_time = time.perf_counter() - started

    ppo_mean, wait_mean = ppo["final_test_acc_mean"], wait["final_test_acc_mean"]
    result = {
        "benchmark": "ppo_digits",
        "task": "digits (impaired host)",
        "reward": args.reward,
        "train": {
            "envs": args.envs,
            "updates": args.updates,
            "max_epochs": args.max_epochs,
            "host_epochs": args.envs * args.updates * args.max_epochs,
            "seed": args.train_seed,
            "ppo_options": dict(kv.split("=", 1) for kv in args.ppo_set),
            "wall_time_s": round(train_time, 1),
            "curve": training_curve(train, args.envs),
        },
        "eval_seeds": list(range(args.eval_seed, args.eval_seed + args.eval_envs)),
        "ppo": {
            "per_seed": per_seed(ppo),
            "mean_final_test_acc": ppo_mean,
            "fossilized": ppo["seeds_fossilized"],
            "pruned": ppo["seeds_pruned"],
            "params_added_mean": ppo["params_added_mean"],
        },
        "ppo_sampled": {
            "per_seed": per_seed(sampled),
            "mean_final_test_acc": sampled["final_test_acc_mean"],
            "fossilized": sampled["seeds_fossilized"],
        },
        "wait": {"per_seed": per_seed(wait), "mean_final_test_acc": wait_mean},
        "ppo_minus_wait": ppo_mean - wait_mean,
        "accepted": ppo_mean >= wait_mean,
        "eval_wall_time_s": round(eval_time, 1),
        "run_dirs": str(root),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
