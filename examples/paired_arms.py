"""The paired difference of any two arms of a finished ``esper compare`` directory.

``esper compare`` pairs every arm with its ``baseline`` policy; a results page often needs
another pair too, a grown arm against a size of the sweep (``sweep.wide``), or two
schedules of one operator. This reads the directory's ``results.json`` and prints, per
pair, each arm's IQM, the IQM of the per-seed differences with its 95 % percentile
bootstrap interval (the statistics ``esper compare`` uses), wins/ties/losses and the
ratio of mean training FLOPs::

    python examples/paired_arms.py runs/growth-charlm-300k-budget \\
        host-widen2x-e7-t1:sweep.wide host-widen2x-e7-t1:sweep.wide-10ep

The metric is the experiment's (accuracy, or loss for a language model); ``--metric``
picks another of results.json's cell fields, ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from esper_core.compare.metric import HIGHER_IS_BETTER, higher_is_better
from esper_core.compare.stats import iqm_interval


def _by_seed(cells: list[dict[str, Any]], task: str, arm: str) -> dict[int, dict[str, Any]]:
    return {c["seed"]: c for c in cells if c["task"] == task and c["policy"] == arm}


def pair(results: dict[str, Any], task: str, a: str, b: str, metric: str) -> dict[str, Any]:
    """Arm ``a`` minus arm ``b`` on the seeds both finished, in ``metric``."""
    cells = results["cells"]
    left, right = _by_seed(cells, task, a), _by_seed(cells, task, b)
    for arm, found in ((a, left), (b, right)):
        if not found:
            arms = sorted({c["policy"] for c in cells if c["task"] == task})
            raise ValueError(f"no finished cell of {arm!r} on {task!r}; arms: {', '.join(arms)}")
    seeds = sorted(set(left) & set(right))
    diffs = [left[s][metric] - right[s][metric] for s in seeds]
    sign = 1 if higher_is_better(metric) else -1
    wins = sum(sign * d > 0 for d in diffs)
    ties = sum(d == 0 for d in diffs)
    interval = iqm_interval([diffs])
    flops = [sum(x[s]["train_flops"] for s in seeds) / len(seeds) for x in (left, right)]
    return {
        "task": task,
        "a": a,
        "b": b,
        "metric": metric,
        "seeds": seeds,
        "iqm_a": iqm_interval([[left[s][metric] for s in seeds]]).estimate,
        "iqm_b": iqm_interval([[right[s][metric] for s in seeds]]).estimate,
        "difference": [interval.estimate, interval.low, interval.high],
        "wins_ties_losses": [wins, ties, len(diffs) - wins - ties],
        "flops_ratio": flops[0] / flops[1] if flops[1] else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="A finished esper compare directory.")
    parser.add_argument("pairs", nargs="+", metavar="A:B", help="Arm labels, A minus B.")
    parser.add_argument("--task", help="Task label (default: the only one).")
    parser.add_argument(
        "--metric",
        help="final_test_acc, final_test_loss or train_flops (default: the experiment's).",
    )
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args(argv)
    path = args.directory / "results.json"
    if not path.is_file():
        parser.error(f"{path} not found: give a directory esper compare has finished")
    results = json.loads(path.read_text())
    tasks = sorted({c["task"] for c in results["cells"]})
    task = args.task or (tasks[0] if len(tasks) == 1 else None)
    if task is None:
        parser.error(f"several tasks ({', '.join(tasks)}): choose one with --task")
    metric = args.metric or results["metrics"].get(task, "final_test_acc")
    if metric not in HIGHER_IS_BETTER:
        parser.error(f"--metric {metric}: expected one of {', '.join(HIGHER_IS_BETTER)}")
    rows = []
    for spec in args.pairs:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            parser.error(f"{spec!r}: expected A:B, two arm labels")
        try:
            rows.append(pair(results, task, a, b, metric))
        except ValueError as exc:
            parser.error(str(exc))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        d, (w, t, lo) = r["difference"], r["wins_ties_losses"]
        cost = f", FLOPs {100 * r['flops_ratio']:.1f} %" if r["flops_ratio"] else ""
        print(
            f"{r['a']} {r['iqm_a']:.4f} - {r['b']} {r['iqm_b']:.4f}: {d[0]:+.4f} "
            f"[{d[1]:+.4f}, {d[2]:+.4f}] ({w}/{t}/{lo}), {len(r['seeds'])} seeds{cost}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
