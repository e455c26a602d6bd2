"""Wall time of a run with the file and display backends vs the same run without telemetry.

Prints JSON. Both variants run the same config (same seed, task, policy, reward, envs
and epochs) through ``esper_core.run.api.run`` in this one process; ``telemetry`` is
``console`` (live, not quiet, drawn to console.txt in the run directory as if it were a
terminal: the console backend writes only inside the run directory), ``jsonl``,
``csv`` and ``tensorboard``; ``none`` has no backend at all. A warm-up run of each
variant comes first (imports, caches), then the repetitions alternate which variant
goes first, so machine noise hits both alike. The figure is the median over
repetitions of the per-repetition wall-time ratio; the target is <= 1.05. The CPU-time
ratio (process time, all threads) and the fraction of the run spent inside the telemetry
hub (every backend call, timed directly) are printed too: on a machine shared with other
work they are the steadier measures of what telemetry costs.

    OMP_NUM_THREADS=1 python benchmarks/telemetry_overhead.py [--reps 5] [--epochs 10] [--envs 2]

``ratio``, ``cpu_ratio`` and ``hub_fraction`` give each figure's spread over the
repetitions (median, interquartile range, bootstrap interval of the median).
``--smoke``: one repetition of one env for one epoch, the same path and JSON keys.

The task is ``digits`` with the ``heuristic`` policy and ``pbrs`` reward when they are
installed, otherwise the tests' tiny fake task (run from the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from esper_core.config import load_config
from esper_core.plugins import PluginManager
from esper_core.run import api
from esper_core.run.hub import Hub

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spread import paired_ratios, spread

BACKENDS = ["console", "jsonl", "csv", "tensorboard"]
HUB_METHODS = ("emit", "flush", "close", "state_dict", "load_state_dict")


class HubClock:
    """Seconds the training loop spends inside the telemetry hub (every backend call).

    Wraps the methods of ``esper_core.run.telemetry.Hub`` for the life of the benchmark: a
    direct measure of the main thread's telemetry cost that machine noise cannot fake.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._saved = {name: getattr(Hub, name) for name in HUB_METHODS}

    def __enter__(self) -> HubClock:
        for name, method in self._saved.items():
            setattr(Hub, name, self._timed(method))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, method in self._saved.items():
            setattr(Hub, name, method)

    def _timed(self, method: Any) -> Any:
        def wrapper(hub: Hub, *args: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(hub, *args)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapper


def _plugin_manager(task: str) -> tuple[PluginManager, dict[str, str]]:
    pm = PluginManager()
    components = {"task": task, "policy": "heuristic", "reward": "pbrs"}
    if (
        task in pm.registry("tasks")
        and "heuristic" in pm.registry("policies")
        and "pbrs" in pm.registry("rewards")
    ):
        return pm, components
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    pm.extend([str(Path(__file__).resolve().parents[1] / "tests" / "fake_plugin.py")])
    return pm, {"task": "tiny", "policy": "scripted", "reward": "acc_delta"}


def _config(components: dict[str, str], telemetry: list[str], args: argparse.Namespace) -> Any:
    sets = [
        f"run.telemetry={json.dumps(telemetry)}",
        f"run.n_envs={args.envs}",
        f"env.max_epochs={args.epochs}",
        f"run.seed={args.seed}",
        "run.checkpoint_every=0",
        "lifecycle.min_training_epochs=2",
        # The base host these figures have always used (digits now defaults to impaired).
        *(["tasks.digits.preset=base"] if components.get("task") == "digits" else []),
        'telemetry.console.file="console.txt"',
        "telemetry.console.force_terminal=true",
        *args.set,
    ]
    return load_config(None, sets, {"run": dict(components)})


def _timed(pm: PluginManager, config: Any, root: Path, name: str) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of the whole process with every thread, seconds in the hub)."""
    with HubClock() as clock:
        wall, cpu = time.perf_counter(), time.process_time()
        api.run(config, pm, run_dir=root / name, quiet=False, notify=lambda _msg: None)
        return time.perf_counter() - wall, time.process_time() - cpu, clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="extra config override")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.reps, args.epochs, args.envs = 1, 1, 1
        args.set = [*args.set, "env.max_batches=2"]

    pm, components = _plugin_manager(args.task)
    variants = {
        "none": _config(components, [], args),
        "telemetry": _config(components, BACKENDS, args),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    hub: list[float] = []
    with tempfile.TemporaryDirectory(prefix="esper-telemetry-bench-") as tmp:
        root = Path(tmp)
        for name, config in variants.items():
            _timed(pm, config, root, f"warmup-{name}")
        for rep in range(args.reps):
            order = list(variants) if rep % 2 == 0 else list(reversed(variants))
            for name in order:
                wall, used, in_hub = _timed(pm, variants[name], root, f"{name}-{rep}")
                times[name].append(wall)
                cpu[name].append(used)
                if name == "telemetry":
                    hub.append(in_hub / wall)
        sizes = {p.name: p.stat().st_size for p in (root / "telemetry-0").iterdir() if p.is_file()}
    ratios = paired_ratios(times["telemetry"], times["none"])
    cpu_ratios = paired_ratios(cpu["telemetry"], cpu["none"])
    print(
        json.dumps(
            {
                "benchmark": "telemetry_overhead",
                **components,
                "envs": args.envs,
                "epochs": args.epochs,
                "reps": args.reps,
                "threads": torch.get_num_threads(),
                "backends": BACKENDS,
                "seconds_none": times["none"],
                "seconds_telemetry": times["telemetry"],
                "ratio_per_rep": ratios,
                "ratio_median": statistics.median(ratios),
                "ratio": spread(ratios),
                "ratio_of_medians": statistics.median(times["telemetry"])
                / statistics.median(times["none"]),
                "ratio_target": 1.05,
                "cpu_seconds_none": cpu["none"],
                "cpu_seconds_telemetry": cpu["telemetry"],
                "cpu_ratio_median": statistics.median(cpu_ratios),
                "cpu_ratio": spread(cpu_ratios),
                "hub_fraction_of_wall": hub,
                "hub_fraction_median": statistics.median(hub),
                "hub_fraction": spread(hub),
                "load_average": list(os.getloadavg()),
                "files_written_bytes": sizes,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
