"""What each controller did on each pair of a controller benchmark, cell by cell.

The benchmark's results page scores the arms; this script says what they did to get
there: per pair and arm, on how many evaluation random seeds the host grew (by which
operator, at which epoch, and on how many the growth was kept), on how many only seeds
were kept (and how large), and the mean final test accuracy and loss. It reads the cells ``esper benchmark`` wrote
(``<pair>/<arm>/seed-<n>/summary.json``), from the run directory or from a results
page's ``cells-*.tar.gz``; nothing is trained. The PPO suite's per-pair paragraphs
(docs/results/ppo-suite.md) are read from it.

    python benchmarks/controller_cells.py \
        docs/results/controller-benchmark-evaluation/cells-9000.tar.gz \
        --arm wait --arm heuristic --pair user-mlp-small --markdown

``--smoke`` reads two arms of one pair from the 9000-9009 cells in the repository.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

KEPT_CELLS = (
    Path(__file__).resolve().parent.parent
    / "docs/results/controller-benchmark-evaluation/cells-9000.tar.gz"
)


def _cell_path(parts: tuple[str, ...]) -> tuple[str, str, int] | None:
    """(pair, arm, random seed) of a ``.../<pair>/<arm>/seed-<n>/summary.json`` path."""
    if len(parts) < 4 or parts[-1] != "summary.json" or not parts[-2].startswith("seed-"):
        return None
    return parts[-4], parts[-3], int(parts[-2].removeprefix("seed-"))


def read_cells(source: Path) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    """Every cell's (pair, arm, random seed, summary) under a directory or in a tarball."""
    if source.is_dir():
        for f in sorted(source.rglob("summary.json")):
            if key := _cell_path(f.relative_to(source).parts):
                yield *key, json.loads(f.read_text())
        return
    with tarfile.open(source) as tar:
        for member in tar:
            key = _cell_path(PurePosixPath(member.name).parts)
            handle = tar.extractfile(member) if key and member.isfile() else None
            if key and handle is not None:
                yield *key, json.load(handle)


def cell(seed: int, summary: dict[str, Any]) -> dict[str, Any]:
    """One cell as this script reports it: what grew, when, and the final metrics."""
    episode = summary["episodes"][0]
    return {
        "seed": seed,
        "host_growths": [
            {"operator": g["operator"], "epoch": g["started_epoch"], "fate": g.get("fate")}
            for g in summary.get("host_growths") or []
        ],
        # params_added counts the host's added parameters too; a growth rolled back by
        # the governor adds none.
        "host_params": episode["host_params_added"],
        "seed_params": episode["params_added"] - episode["host_params_added"],
        "final_test_acc": episode.get("final_test_acc"),
        "final_test_loss": episode.get("final_test_loss"),
    }


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """What an arm did over its random seeds on one pair."""
    grown = [c for c in cells if c["host_growths"]]
    seeds_only = [c for c in cells if c["seed_params"] > 0 and not c["host_growths"]]
    sizes = [c["seed_params"] for c in cells if c["seed_params"] > 0]
    return {
        "cells": len(cells),
        "host_grown": len(grown),
        "host_kept": sum(c["host_params"] > 0 for c in grown),
        "operators": dict(Counter(g["operator"] for c in grown for g in c["host_growths"])),
        "first_epochs": dict(Counter(c["host_growths"][0]["epoch"] for c in grown)),
        "seeds_only": len(seeds_only),
        "seed_params": [min(sizes), max(sizes)] if sizes else None,
        "final_test_acc": _mean([c["final_test_acc"] for c in cells]),
        "final_test_loss": _mean([c["final_test_loss"] for c in cells]),
        "by_seed": cells,
    }


def collect(
    source: Path, arms: list[str], pairs: list[str], seeds: range | None
) -> dict[str, dict[str, Any]]:
    """Pair -> arm -> :func:`summarise` of the matching cells; arms in the order given
    (alphabetical when none is), empty filters matching everything."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for pair, arm, seed, summary in read_cells(source):
        if (arms and arm not in arms) or (pairs and pair not in pairs):
            continue
        if seeds is not None and seed not in seeds:
            continue
        found.setdefault(pair, {}).setdefault(arm, []).append(cell(seed, summary))
    return {
        pair: {
            arm: summarise(sorted(found[pair][arm], key=lambda c: c["seed"]))
            for arm in sorted(found[pair], key=lambda a: (arms.index(a) if arms else 0, a))
        }
        for pair in sorted(found)
    }


def _row(pair: str, arm: str, s: dict[str, Any]) -> str:
    ops = ", ".join(f"{op} {n}" for op, n in sorted(s["operators"].items())) or "none"
    epochs = ", ".join(f"{e}: {n}" for e, n in sorted(s["first_epochs"].items())) or ""
    size = "{}-{}".format(*s["seed_params"]) if s["seed_params"] else ""
    acc = f"{s['final_test_acc']:.2f}" if s["final_test_acc"] is not None else ""
    loss = f"{s['final_test_loss']:.3f}" if s["final_test_loss"] is not None else ""
    return (
        f"| {pair} | {arm} | {s['host_grown']} of {s['cells']} ({ops}; kept {s['host_kept']}) "
        f"| {epochs} | {s['seeds_only']} | {size} | {acc} | {loss} |"
    )


def markdown(pairs: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| pair | arm | host grown (operator) | first growth at epoch: cells "
        "| seeds only | seed parameters | test acc | test loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows += [_row(p, a, s) for p, arms in pairs.items() for a, s in arms.items()]
    return "\n".join(rows)


def _seeds(text: str) -> range:
    try:
        first, _, last = text.partition("-")
        return range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give random seeds as N or N-M") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", type=Path, help="cells directory or .tar.gz")
    parser.add_argument("--arm", action="append", default=[], help="an arm's label (all)")
    parser.add_argument("--pair", action="append", default=[], help="a pair's label (all)")
    parser.add_argument("--seeds", type=_seeds, help="evaluation random seeds, N-M (all)")
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument(
        "--smoke", action="store_true", help="read the 9000-9009 cells in the repository"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.source, args.arm, args.pair = KEPT_CELLS, ["wait", "heuristic"], ["user-mlp-small"]
    if args.source is None or not args.source.exists():
        parser.error(f"no cells at {args.source}: give a benchmark's cells directory or tarball")
    pairs = collect(args.source, args.arm, args.pair, args.seeds)
    if not pairs:
        parser.error(f"no cell in {args.source} matches the arms, pairs and seeds given")
    if args.markdown:
        print(markdown(pairs))
    else:
        json.dump({"source": str(args.source), "pairs": pairs}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
