"""What host growth returned in PPO training episodes, paired by random seed, and the
compute price at which it would break even.

A PPO suite run plays each random seed on a group of envs (``train.seed_group``), so
within a group some envs grew the host and some did not, on the same data and initial
weights. Per pair, over the groups that hold both, this script averages the paired
difference (grew less did not) of the return, of the rent and of the final validation
accuracy. The return and the rent are discounted with the run's ``run.gamma``, as the
learner discounts them: undiscounted, the lifecycle shaping does not telescope, and a
held seed's potential leaks ``(1 - γ)·Φ`` a step, so an episode that grew the host and
germinated fewer seeds read about +0.05 better for its seeds, not for its growth. Host
growth adds no seed parameters, so the rent it changes is the compute rent, linear in
``flops_rent_weight`` (the small parameter rent of seeds grown in either arm is counted
with it, an approximation): at price ``w`` the return gain would be
``gain + (w / w_run - 1) * rent_change``, and it breaks even at
``w_run * (1 - gain / rent_change)``. The PPO suite chooses a study's price from these
figures on the training pairs (docs/results/ppo-suite.md). Reads each run directory's
``events.jsonl`` and ``config.toml``; nothing is trained or replayed.

    python benchmarks/ppo_price_break_even.py runs/ppo-suite-11/run-{1,2,3} --from-update 5

``--markdown`` prints the table the docs quote instead. ``--smoke``: reads a tiny mixed
run trained here (``ppo_greedy_check.smoke_run``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any


def run_config(run_dir: Path) -> dict[str, Any]:
    return tomllib.loads((run_dir / "config.toml").read_text())


def run_price(run_dir: Path) -> float:
    """The run's ``flops_rent_weight``: its reward family's option in its config."""
    config = run_config(run_dir)
    reward = config["run"]["reward"]
    return float(config.get("rewards", {}).get(reward, {}).get("flops_rent_weight", 0.0))


def run_gamma(run_dir: Path) -> float:
    """The discount the run's learner used (``run.gamma``)."""
    return float(run_config(run_dir)["run"]["gamma"])


def discounted_episodes(run_dir: Path, from_update: int) -> list[dict[str, Any]]:
    """The run's finished episodes from ``from_update`` on, each with ``return`` and
    ``rent``: its epochs' rewards and rents discounted from its first epoch."""
    gamma = run_gamma(run_dir)
    sums: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    episodes = []
    with (run_dir / "events.jsonl").open() as lines:
        for line in lines:
            e = json.loads(line)
            key = (e.get("env"), e.get("episode"))
            if e.get("kind") == "epoch_completed":
                weight = gamma ** (e["epoch"] - 1)
                sums[key][0] += weight * e["reward"]
                sums[key][1] += weight * e["reward_components"].get("rent", 0.0)
            elif e.get("kind") == "episode_finished":
                ret, rent = sums.pop(key, [0.0, 0.0])
                if (e.get("update") or -1) >= from_update:
                    episodes.append(e | {"return": ret, "rent": rent})
    return episodes


def paired_differences(run_dir: Path, from_update: int) -> dict[str, list[tuple[float, ...]]]:
    """Per pair, one (return, rent, validation accuracy) difference per seed group."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in discounted_episodes(run_dir, from_update):
        groups[(e.get("pair") or "all", e["seed"])].append(e)
    out: dict[str, list[tuple[float, ...]]] = defaultdict(list)
    for (pair, _seed), eps in groups.items():
        grew = [e for e in eps if e["host_params_added"] > 0]
        kept = [e for e in eps if e["host_params_added"] == 0]
        if grew and kept:
            out[pair].append(
                tuple(
                    statistics.fmean(get(e) for e in grew) - statistics.fmean(get(e) for e in kept)
                    for get in (
                        lambda e: e["return"],
                        lambda e: e["rent"],
                        lambda e: e["final_val_acc"],
                    )
                )
            )
    return out


def summarise(runs: list[Path], from_update: int) -> dict[str, Any]:
    prices = {run_price(r) for r in runs}
    if len(prices) != 1:
        raise ValueError(f"the runs were trained at different prices {sorted(prices)}")
    price = prices.pop()
    diffs: dict[str, list[tuple[float, ...]]] = defaultdict(list)
    for r in runs:
        for pair, rows in paired_differences(r, from_update).items():
            diffs[pair] += rows
    pairs = {}
    for pair in sorted(diffs):
        rows = diffs[pair]
        gain, rent, acc = (statistics.fmean(col) for col in zip(*rows, strict=True))
        se = statistics.stdev(r[0] for r in rows) / math.sqrt(len(rows)) if len(rows) > 1 else None
        pairs[pair] = {
            "groups": len(rows),
            "return_gain": gain,
            "return_gain_se": se,
            "rent_change": rent,
            "val_acc_gain": acc,
            "break_even_price": price * (1 - gain / rent) if rent < 0 and price > 0 else None,
        }
    return {
        "runs": [str(r) for r in runs],
        "from_update": from_update,
        "price": price,
        "pairs": pairs,
    }


def markdown(summary: dict[str, Any]) -> str:
    rows = [
        f"| pair | seed groups | return gain at {summary['price']} | rent change | "
        "validation accuracy gain (points) | break-even price |",
        "|---|---|---|---|---|---|",
    ]
    for pair, c in summary["pairs"].items():
        se = "" if c["return_gain_se"] is None else f" ± {c['return_gain_se']:.3f}"
        even = "" if c["break_even_price"] is None else f"{c['break_even_price']:.3f}"
        rows.append(
            f"| {pair} | {c['groups']} | {c['return_gain']:+.3f}{se} | {c['rent_change']:+.3f} | "
            f"{c['val_acc_gain']:+.2f} | {even} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="training run directories")
    parser.add_argument(
        "--from-update", type=int, default=5, help="skip the first updates' episodes (5)"
    )
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument("--smoke", action="store_true", help="read a tiny run made here")
    args = parser.parse_args(argv)
    if not args.runs and not args.smoke:
        parser.error("pass training run directories (or --smoke)")
    missing = [
        str(r)
        for r in args.runs
        if not ((r / "events.jsonl").is_file() and (r / "config.toml").is_file())
    ]
    if missing:
        print(
            f"error: no events.jsonl and config.toml in {', '.join(missing)}: pass training "
            "run directories",
            file=sys.stderr,
        )
        return 2
    from ppo_greedy_check import runs_or_smoke

    with runs_or_smoke(args.runs, args.smoke) as dirs:
        try:
            summary = summarise(dirs, 0 if args.smoke else args.from_update)
        except ValueError as err:
            print(f"error: {err}: pass runs of one study", file=sys.stderr)
            return 2
    print(markdown(summary) if args.markdown else json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
