"""What PPO training runs did in their training episodes, per block of updates and pair.

Reads each run directory's ``events.jsonl`` (nothing is trained or replayed) and prints
one JSON object: per run, per block of ``--block`` updates, per pair, the episodes, how
many grew the host and how many germinated a seed, and the means of the final
validation accuracy, the training FLOPs over the bare host's, and the return. These are
sampled episodes, so they show the habits a run is learning while it trains (the PPO
suite's tables, docs/results/ppo-suite.md); how a run's final policy acts is
``ppo_greedy_check.py``'s and the controller benchmark's.

    python benchmarks/ppo_training_episodes.py runs/ppo-suite-4/run-{1,2,3} --block 8

``--markdown`` prints the table the docs quote instead. ``--smoke``: reads a tiny mixed
run trained here (``ppo_greedy_check.smoke_run``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

KEYS = ("grew_host", "germinated", "final_val_acc", "flops_ratio", "return")


def episodes(run_dir: Path) -> list[dict[str, Any]]:
    """The run's finished training episodes, each as the numbers this script reads."""
    out = []
    with (run_dir / "events.jsonl").open() as lines:
        for line in lines:
            e = json.loads(line)
            if e.get("kind") != "episode_finished" or e.get("update") is None:
                continue
            out.append(
                {
                    "update": e["update"],
                    "pair": e.get("pair") or "all",
                    "grew_host": e["host_params_added"] > 0,
                    "germinated": e["seeds_germinated"] > 0,
                    "final_val_acc": e["final_val_acc"],
                    "flops_ratio": e["train_flops"] / max(e["host_train_flops"], 1),
                    "return": e["total_reward"],
                }
            )
    return out


def summarise(run_dir: Path, block: int) -> dict[str, Any]:
    groups: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for e in episodes(run_dir):
        groups[e["update"] // block][e["pair"]].append(e)
    blocks = []
    for b in sorted(groups):
        pairs = {}
        for pair, eps in groups[b].items():
            pairs[pair] = {
                "episodes": len(eps),
                "grew_host": sum(e["grew_host"] for e in eps),
                "germinated": sum(e["germinated"] for e in eps),
                **{k: statistics.fmean(e[k] for e in eps) for k in KEYS[2:]},
            }
        blocks.append({"updates": [b * block, b * block + block - 1], "pairs": pairs})
    return {"run": str(run_dir), "blocks": blocks}


def markdown(runs: list[dict[str, Any]]) -> str:
    order: list[str] = []
    for run in runs:
        for b in run["blocks"]:
            order += [p for p in b["pairs"] if p not in order]
    rows = [
        "| run | updates | " + " | ".join(order) + " |",
        "|---|---|" + "---|" * len(order),
    ]
    for run in runs:
        for b in run["blocks"]:
            cells = []
            for p in order:
                c = b["pairs"].get(p)
                cells.append(
                    ""
                    if c is None
                    else f"{c['grew_host']}/{c['germinated']}/{c['episodes']}, "
                    f"{c['final_val_acc']:.1f} %, {c['flops_ratio']:.2f}x, {c['return']:.2f}"
                )
            lo, hi = b["updates"]
            rows.append(f"| {Path(run['run']).name} | {lo}-{hi} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="training run directories")
    parser.add_argument("--block", type=int, default=10, help="updates per block (10)")
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument("--smoke", action="store_true", help="read a tiny run made here")
    args = parser.parse_args(argv)
    if not args.runs and not args.smoke:
        parser.error("pass training run directories (or --smoke)")
    if args.block < 1:
        parser.error(f"--block {args.block}: pass a number of updates, 1 or more")
    missing = [str(r) for r in args.runs if not (r / "events.jsonl").is_file()]
    if missing:
        print(
            f"error: no events.jsonl in {', '.join(missing)}: pass training run directories",
            file=sys.stderr,
        )
        return 2
    from ppo_greedy_check import runs_or_smoke

    with runs_or_smoke(args.runs, args.smoke) as dirs:
        runs = [summarise(r, args.block) for r in dirs]
    print(markdown(runs) if args.markdown else json.dumps({"runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
