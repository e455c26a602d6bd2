"""What sharing a seed group's epochs saves in PPO training, and that it changes nothing.

With ``train.seed_group = G`` the envs of a group that have acted alike hold one state,
and ``esper train`` trains each such epoch once (``esper_core.run.shared_epochs``). Two
measurements, each printed as one JSON object:

* a run of its own (the default): one PPO training run on two digits hosts, trained
  twice in this process, with and without sharing; it prints both wall times, their
  ratio (per repetition of ``--reps``, interleaved; their median with its spread), the
  epochs each trained, and whether the two runs' events and learned weights are the same. A policy that has not learned yet acts at random, so its groups part
  early: this is the least sharing saves.

      OMP_NUM_THREADS=1 python benchmarks/shared_epochs.py --envs 12 --group 3 --updates 2 --reps 3

* ``--runs DIR...``: reads training run directories' ``events.jsonl`` (nothing is
  trained): per run and update, the training epochs and how many of them an env took
  from its group's lead (their ``epoch_time`` is 0), as the policy learns.

``--smoke``: the first measurement at its smallest.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import spread


def _config(envs: int, group: int, updates: int, epochs: int, batches: int) -> Any:
    from esper_core.config import load_config

    pairs = [
        {
            "label": size,
            "config": {"run": {"task": "digits"}, "tasks": {"digits": {"preset": size}}},
        }
        for size in ("small", "base")
    ]
    return load_config(
        extra={
            "run": {"policy": "ppo", "n_envs": envs, "seed": 1, "quiet": True},
            "env": {"max_epochs": epochs, **({"max_batches": batches} if batches else {})},
            "train": {"updates": updates, "eval_every": 0, "pairs": pairs, "seed_group": group},
            "policies": {
                "ppo": {"network": "slots", "rollout_episodes": 1, "advantage_groups": "seed"}
            },
        }
    )


def _rows(run_dir: Path) -> list[tuple[Any, ...]]:
    """Every epoch's and episode's numbers but its times (which differ run to run)."""
    rows = []
    with (run_dir / "events.jsonl").open() as lines:
        for line in lines:
            e = json.loads(line)
            if e.get("kind") in ("epoch_completed", "episode_finished"):
                rows.append(tuple(sorted((k, str(v)) for k, v in e.items() if "time" not in k)))
    return rows


def own_run(
    envs: int, group: int, updates: int, epochs: int, batches: int, reps: int
) -> dict[str, Any]:
    import torch

    from esper_core.plugins import PluginManager
    from esper_core.run import api
    from esper_core.run.checkpoint import load_checkpoint
    from esper_core.run.loops import TrainLoop

    class Alone(TrainLoop):
        def __init__(self, session: Any) -> None:
            super().__init__(session, share_epochs=False)

    pm = PluginManager()
    walls: dict[str, list[float]] = {"alone": [], "shared": []}
    with tempfile.TemporaryDirectory() as tmp:
        # A first run pays for the imports and the data's first load, which would
        # otherwise be timed in whichever run came first.
        warm = _config(2, 2, 1, 1, 1)
        api.drive(TrainLoop, warm, pm, run_dir=Path(tmp) / "warm", quiet=True, notify=print)
        # Repetitions interleaved, so that the machine's load hits both sides alike.
        for rep in range(reps):
            for name, loop in (("alone", Alone), ("shared", TrainLoop)):
                config = _config(envs, group, updates, epochs, batches)
                run_dir = Path(tmp) / f"{name}-{rep}"
                started = time.perf_counter()
                api.drive(loop, config, pm, run_dir=run_dir, quiet=True, notify=lambda _m: None)
                walls[name].append(time.perf_counter() - started)
        runs = {name: Path(tmp) / f"{name}-0" for name in walls}
        trained = {name: read_runs([d])[0]["epochs_trained"] for name, d in runs.items()}
        nets = [load_checkpoint(d / "checkpoint.pt")["policy"]["network"] for d in runs.values()]
        same_weights = nets[0].keys() == nets[1].keys() and all(
            torch.equal(nets[0][k], nets[1][k]) for k in nets[0]
        )
        same_events = _rows(runs["alone"]) == _rows(runs["shared"])
    ratios = [s / a for s, a in zip(walls["shared"], walls["alone"], strict=True)]
    return {
        "args": {"envs": envs, "group": group, "updates": updates, "max_epochs": epochs},
        **{
            name: {"wall_s": [round(w, 3) for w in walls[name]], "epochs_trained": trained[name]}
            for name in walls
        },
        "epochs_ratio": round(trained["shared"] / trained["alone"], 3),
        "time_ratio": spread(ratios),
        "identical": same_events and same_weights,
    }


def read_runs(run_dirs: list[Path]) -> list[dict[str, Any]]:
    runs = []
    for run_dir in run_dirs:
        epochs: Counter[int] = Counter()
        taken: Counter[int] = Counter()
        with (run_dir / "events.jsonl").open() as lines:
            for line in lines:
                e = json.loads(line)
                if e.get("kind") != "epoch_completed" or e.get("update") is None:
                    continue
                epochs[e["update"]] += 1
                taken[e["update"]] += e["epoch_time"] == 0.0
        per_update = [
            {"update": u, "epochs": epochs[u], "taken_from_a_lead": taken[u]}
            for u in sorted(epochs)
        ]
        total, shared = sum(epochs.values()), sum(taken.values())
        runs.append(
            {
                "run": str(run_dir),
                "epochs": total,
                "epochs_trained": total - shared,
                "share_taken": round(shared / max(total, 1), 3),
                "updates": per_update,
            }
        )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, help="training run directories to read")
    parser.add_argument("--envs", type=int, default=12)
    parser.add_argument("--group", type=int, default=3)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--smoke", action="store_true", help="the smallest run of its own")
    args = parser.parse_args(argv)
    if args.runs:
        missing = [str(r) for r in args.runs if not (r / "events.jsonl").is_file()]
        if missing:
            print(f"error: no events.jsonl in {', '.join(missing)}", file=sys.stderr)
            return 2
        print(json.dumps({"runs": read_runs(args.runs)}, indent=2))
        return 0
    if args.smoke:
        result = own_run(4, 2, 1, 2, 2, 1)
    else:
        result = own_run(args.envs, args.group, args.updates, args.max_epochs, 0, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
