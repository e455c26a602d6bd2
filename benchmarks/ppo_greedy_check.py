"""The greedy check of trained PPO runs, after training, with the code as it stands.

A training run evaluates its greedy policy on ``train.eval_seeds`` while it trains
(``train.eval_every``), with the code it was started with. This script plays the same
check on each run's last checkpoint with today's code (for instance a deterministic rule
changed while the runs trained), without touching the run directories: each is copied
to a temporary directory and resumed there, and no update is made. It prints one JSON
object: per run, the mean return, final validation accuracy and parameters added over
the evaluation seeds, and the same per pair; its ``best`` key names the run with the
highest mean return (the PPO suite's rule for the run ``ppo:pretrained`` ships,
docs/results/ppo-suite.md).

    OMP_NUM_THREADS=1 python benchmarks/ppo_greedy_check.py runs/ppo-suite-2/run-{1,2,3}

``--smoke``: trains one update of a 2-epoch mixed run on two digits hosts in a temporary
directory, then checks it (the same path and keys, no figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from esper_core.plugins import PluginManager


def check(run_dir: Path, pm: PluginManager) -> dict[str, Any]:
    """The greedy check of the run in ``run_dir`` at its last checkpoint."""
    from esper_core.run.evaluation import play_trained
    from esper_core.run.run_dir import load_run_config
    from esper_core.run.session import open_session

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / run_dir.name
        shutil.copytree(run_dir, copy)
        config = load_run_config(copy)
        session = open_session(config, pm, "train", copy, resume=True, quiet=True)
        try:
            result = play_trained(session)
        finally:
            session.close()
    pairs: dict[str, list[int]] = {}
    for i, pair in enumerate(result.pairs or ["all"] * len(result.seeds)):
        pairs.setdefault(pair, []).append(i)

    def means(idx: list[int]) -> dict[str, float]:
        return {
            "return": statistics.fmean(result.total_reward[i] for i in idx),
            "final_val_acc": statistics.fmean(result.final_val_acc[i] for i in idx),
            "params_added": statistics.fmean(result.params_added[i] for i in idx),
            "episodes": len(idx),
        }

    return {
        "run": str(run_dir),
        "update": result.update,
        "seeds": result.seeds,
        **means(list(range(len(result.seeds)))),
        "pairs": {pair: means(idx) for pair, idx in pairs.items()},
    }


@contextlib.contextmanager
def runs_or_smoke(runs: list[Path], smoke: bool) -> Iterator[list[Path]]:
    """The run directories a reading script was given, or with ``smoke`` one tiny run
    trained in a temporary directory that lives as long as the block."""
    if not smoke:
        yield runs
        return
    from esper_core.plugins import PluginManager

    with tempfile.TemporaryDirectory() as tmp:
        yield [smoke_run(Path(tmp), PluginManager())]


def smoke_run(root: Path, pm: PluginManager) -> Path:
    """A tiny mixed training run to check: one update, two digits hosts, two eval seeds."""
    from esper_core.config import load_config
    from esper_core.run import api

    pairs = [
        {
            "label": size,
            "config": {"run": {"task": "digits"}, "tasks": {"digits": {"preset": size}}},
        }
        for size in ("small", "base")
    ]
    config = load_config(
        extra={
            "run": {"policy": "ppo", "n_envs": 2, "seed": 1, "quiet": True},
            "env": {"max_epochs": 2, "max_batches": 2},
            "train": {"updates": 1, "eval_every": 1, "eval_seeds": [5, 6], "pairs": pairs},
            "policies": {"ppo": {"network": "slots", "rollout_episodes": 1}},
        }
    )
    api.train(config, pm, run_dir=root / "smoke", quiet=True, notify=lambda _m: None)
    return root / "smoke"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="training run directories")
    parser.add_argument("--smoke", action="store_true", help="check a tiny run made here")
    parser.add_argument(
        "--plugin", action="append", default=[], help="a plugin module or file to load too"
    )
    args = parser.parse_args(argv)
    if not args.runs and not args.smoke:
        parser.error("pass training run directories (or --smoke)")
    missing = [str(r) for r in args.runs if not (r / "checkpoint.pt").is_file()]
    if missing:
        print(
            f"error: no checkpoint.pt in {', '.join(missing)}: pass training run directories",
            file=sys.stderr,
        )
        return 2
    from esper_core.plugins import PluginManager

    pm = PluginManager(extra=args.plugin)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [smoke_run(Path(tmp), pm)] if args.smoke else args.runs
        runs = [check(r, pm) for r in dirs]
    best = max(runs, key=lambda r: r["return"])
    print(json.dumps({"runs": runs, "best": best["run"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
