"""The heuristic Tamiyo against the `wait` baseline on digits with the impaired host.

The impaired host (``tasks.digits.preset=impaired``) is the base CNN cut after its first
block: 3x3 receptive fields averaged over the image, so it cannot see a digit's layout.
A seed in its one slot can add the depth it lacks. This script runs ``esper run`` once
per policy and seed (one run at a time, ``OMP_NUM_THREADS=1``, ``run.threads=1``), with
the task's default episode length (30 epochs), and prints JSON with:

* per seed and policy: final test accuracy, seeds germinated / fossilized / pruned and
  the lifecycle of every seed (blueprint, epochs, fate, last stage, contribution);
* the mean final test accuracy of each policy and the heuristic's wins over wait;
* ``acceptance``: every heuristic run germinated and fossilized a seed (a fossil has
  passed G1, G2 and G3 and G5), the heuristic's mean beats wait's, and it beats wait
  on at least ``--min-wins`` of the seeds.

Plugins are named explicitly (autoload off), so the blueprint vocabulary does not depend
on whatever else is installed. The heuristic runs with its option defaults unless
``--heuristic-set KEY=VALUE`` overrides one (e.g. ``min_epoch=5``).

    OMP_NUM_THREADS=1 python benchmarks/heuristic_vs_wait.py [--seeds 0 1 2 3 4] [--out DIR]

CPU budget: 10 runs of 30 epochs of a 682-parameter host, about 1-2 min on one thread.
``--smoke``: seed 0 only, 2-epoch episodes (the same path and JSON keys; no acceptance).
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
from pathlib import Path
from typing import Any

PLUGINS = ["tasks.digits", "blueprints.cnn", "rewards.pbrs", "policies.heuristic", "policies.wait"]


def esper_run(policy: str, seed: int, out: Path, extra: list[str]) -> dict[str, Any]:
    """One ``esper run`` of one episode; returns its JSON summary."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ESPER_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "esper_cli", "run"]
    for plugin in PLUGINS:
        command += ["--plugin", plugin]
    command += [
        "--task", "digits",
        "--set", "tasks.digits.preset=impaired",
        "--policy", policy,
        "--reward", "pbrs",
        "--seed", str(seed),
        "--set", "run.telemetry=[]",
        "--set", "run.threads=1",
        "--out", str(out),
        "--quiet",
        "--json",
        *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(command)}")
    return json.loads(done.stdout)


def run_record(summary: dict[str, Any]) -> dict[str, Any]:
    (episode,) = summary["episodes"]
    return {
        "final_test_acc": episode["final_test_acc"],
        "final_val_acc": episode["final_val_acc"],
        "germinated": episode["seeds_germinated"],
        "fossilized": episode["seeds_fossilized"],
        "pruned": episode["seeds_pruned"],
        "params_added": episode["params_added"],
        "refused_actions": episode["refused_actions"],
        "rollbacks": episode["rollbacks"],
        "seeds": [
            {
                key: seed.get(key)
                for key in (
                    "slot_id",
                    "blueprint",
                    "germinated_epoch",
                    "ended_epoch",
                    "fate",
                    "last_stage",
                    "contribution",
                )
            }
            for seed in summary["seeds"]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--min-wins", type=int, default=4, help="Seeds on which the heuristic must beat wait."
    )
    parser.add_argument(
        "--heuristic-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a heuristic option, e.g. min_epoch=5 (repeatable).",
    )
    parser.add_argument(
        "--out", type=Path, help="Keep the run directories here (default: a temporary directory)."
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    smoke_extra = ["--max-epochs", "2", "--set", "env.max_batches=2"] if args.smoke else []
    if args.smoke:
        args.seeds, args.min_wins = [0], 0

    root = args.out or Path(tempfile.mkdtemp(prefix="esper-heuristic-vs-wait-"))
    heuristic_extra = smoke_extra + [
        arg for kv in args.heuristic_set for arg in ("--set", f"policies.heuristic.{kv}")
    ]
    runs: dict[str, dict[str, Any]] = {"heuristic": {}, "wait": {}}
    try:
        for seed in args.seeds:
            for policy, extra in (("heuristic", heuristic_extra), ("wait", smoke_extra)):
                summary = esper_run(policy, seed, root / f"{policy}-seed{seed}", extra)
                runs[policy][str(seed)] = run_record(summary)
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)

    def accs(policy: str) -> list[float]:
        return [runs[policy][str(s)]["final_test_acc"] for s in args.seeds]

    heuristic, wait = accs("heuristic"), accs("wait")
    wins = sum(h > w for h, w in zip(heuristic, wait))
    grew = all(r["germinated"] >= 1 and r["fossilized"] >= 1 for r in runs["heuristic"].values())
    result = {
        "benchmark": "heuristic_vs_wait",
        "task": "digits (preset impaired, default 30-epoch episodes)",
        "seeds": args.seeds,
        "heuristic_options": args.heuristic_set,
        "final_test_acc": {
            "heuristic": dict(zip(map(str, args.seeds), heuristic)),
            "wait": dict(zip(map(str, args.seeds), wait)),
        },
        "mean_final_test_acc": {
            "heuristic": statistics.fmean(heuristic),
            "wait": statistics.fmean(wait),
        },
        "heuristic_wins": wins,
        "acceptance": {
            "every_heuristic_run_germinated_and_fossilized": grew,
            "mean_beats_wait": statistics.fmean(heuristic) > statistics.fmean(wait),
            "wins_at_least": args.min_wins,
            "wins_ok": wins >= args.min_wins,
        },
        "runs": runs,
    }
    result["acceptance"]["passed"] = (
        grew and result["acceptance"]["mean_beats_wait"] and result["acceptance"]["wins_ok"]
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
