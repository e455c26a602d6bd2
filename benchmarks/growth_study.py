"""Does growing pay? Policies (and lifecycle variants) against fair baselines, with costs.

Each *variant* is a policy plus ``--set`` overrides, run once per seed as an ordinary
``esper run`` directory (one episode, one env, one torch thread). For every variant named
with ``--static-final``, each seed's *final architecture* (the seeds in its forward pass
at the end, see ``esper_core.run.summary.final_architecture``) is then trained from
scratch on the same seed by ``policies.static``: same host init, data order and seed
init. The script prints JSON with, per variant:

* the IQM of the final validation and test accuracy with a 95 % stratified bootstrap
  interval (``esper_core.compare.stats``), the mean parameters in the forward pass and
  held at the end, and the mean training FLOPs (counted by ``FlopCounterMode``);
* paired differences (same seed) against every ``--baseline`` and against the variant's
  own static-final architecture: IQM of the differences [CI] and wins/ties/losses;
* against its static-final: the FLOPs ratio, and the static run's accuracy at the grown
  run's FLOPs (read from its per-epoch curve: the last epoch within that budget), so
  "a better accuracy at equal FLOPs" is measured on the same seeds.

Choices are made on validation accuracy; ``--metric`` picks the one the tables lead with.
Finished cells are reused, so an interrupted study resumes; ``--out`` keeps the runs.

    OMP_NUM_THREADS=1 python benchmarks/growth_study.py --seeds 100-109 \\
        --set tasks.digits.preset=impaired --variant heuristic --variant wait \\
        --variant "iso-full=heuristic;lifecycle.isolation_non_identity=full" \\
        --static-final heuristic --baseline wait --jobs 2 --out runs/study

``--smoke`` runs a study of its own in a temporary directory: seed 0, ``heuristic`` and
``wait`` with 2-epoch episodes, the heuristic's static-final, ``wait`` as the baseline
(the same path and JSON keys; the figures mean nothing).

A variant ``LABEL=external`` only reads run directories already under ``OUT/LABEL/seed-K``
(e.g. written by an older checkout's ``esper run``), so they join the same tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def parse_variant(text: str) -> tuple[str, str, list[str]]:
    """``LABEL=POLICY;key=value;...`` or just ``POLICY`` -> (label, policy, overrides)."""
    label, sep, rest = text.partition("=")
    spec = rest if sep and ";" not in label else text
    label = label if sep and ";" not in label else spec.split(";")[0]
    policy, *sets = spec.split(";")
    return label, policy, sets


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """One ``esper run`` cell in this (worker) process; returns its summary."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from esper_core.config import load_config
    from esper_core.plugins import PluginManager
    from esper_core.run import api

    path = Path(job["dir"])
    if (path / SUMMARY).is_file():
        summary: dict[str, Any] = json.loads((path / SUMMARY).read_text())
        if summary.get("status") == "completed":
            return summary
    overrides = [
        f"run.task={job['task']}",
        f"run.policy={job['policy']}",
        f"run.seed={job['seed']}",
        "run.threads=1",
        "run.quiet=true",
        'run.telemetry=["jsonl"]',
        *job["sets"],
    ]
    config = load_config(overrides=overrides)
    return api.run(config, PluginManager(), run_dir=path, quiet=True, notify=lambda _m: None)


def curve(run_dir: Path) -> list[dict[str, float]]:
    """Per-epoch validation/test accuracy and cumulative FLOPs from a cell's events.jsonl."""
    events = run_dir / "events.jsonl"
    if not events.is_file():
        return []
    out = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "epoch_completed":
            out.append(
                {
                    "epoch": event["epoch"],
                    "val_acc": event["val_acc"],
                    "test_acc": event["test_acc"],
                    "train_flops": event.get("train_flops", 0),
                }
            )
    return out


def record(summary: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    (episode,) = summary["episodes"]
    from esper_core.run.summary import final_architecture

    return {
        "val": episode["final_val_acc"],
        "test": episode["final_test_acc"],
        "test_loss": episode["final_test_loss"],
        "params_forward": episode.get("params_forward"),
        "params_held": episode.get("params_held"),
        "train_flops": episode.get("train_flops"),
        "germinated": episode["seeds_germinated"],
        "fossilized": episode["seeds_fossilized"],
        "pruned": episode["seeds_pruned"],
        "architecture": final_architecture(summary["seeds"]),
        "seeds": [
            {k: s.get(k) for k in ("blueprint", "germinated_epoch", "ended_epoch", "fate", "gain")}
            for s in summary["seeds"]
        ],
        "growth": summary.get("growth"),
        "wall_time": summary["wall_time"],
        "curve": curve(run_dir),
    }


def interval(values: list[float]) -> dict[str, Any]:
    from esper_core.compare.stats import iqm_interval

    i = iqm_interval([values])
    return {"iqm": i.estimate, "low": i.low, "high": i.high, "n": len(values)}


def paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any]:
    """a - b on the seeds both have: IQM of the differences [CI], mean and W/T/L."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    if not diffs:
        return {}
    return {
        **interval(diffs),
        "mean": statistics.fmean(diffs),
        "wins": sum(d > 1e-9 for d in diffs),
        "ties": sum(abs(d) <= 1e-9 for d in diffs),
        "losses": sum(d < -1e-9 for d in diffs),
    }


def at_equal_flops(static_curve: list[dict[str, float]], flops: float, key: str) -> float | None:
    """The static run's accuracy after the last epoch whose cumulative FLOPs fit ``flops``."""
    fitting = [c for c in static_curve if c["train_flops"] <= flops and c[key] is not None]
    return fitting[-1][key] if fitting else None


def mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def summarise(
    label: str,
    runs: dict[int, dict[str, Any]],
    all_runs: dict[str, dict[int, dict[str, Any]]],
    baselines: list[str],
    metric: str,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "variant": label,
        "val": interval([r["val"] for r in runs.values()]),
        "test": interval([r["test"] for r in runs.values()]),
        "test_loss_mean": mean([r["test_loss"] for r in runs.values()]),
        "params_forward": mean([r["params_forward"] for r in runs.values()]),
        "params_held": mean([r["params_held"] for r in runs.values()]),
        "train_flops": mean([r["train_flops"] for r in runs.values()]),
        "fossilized": mean([r["fossilized"] for r in runs.values()]),
        "germinated": mean([r["germinated"] for r in runs.values()]),
    }
    values = {s: r[metric] for s, r in runs.items()}
    row["vs"] = {
        b: paired(values, {s: r[metric] for s, r in all_runs[b].items()})
        for b in baselines
        if b in all_runs and b != label
    }
    static = all_runs.get(f"{label}.static-final")
    if static:
        row["vs"]["static-final"] = paired(values, {s: r[metric] for s, r in static.items()})
        ratios = [
            runs[s]["train_flops"] / static[s]["train_flops"]
            for s in runs
            if s in static and runs[s]["train_flops"] and static[s]["train_flops"]
        ]
        row["flops_vs_static_final"] = interval(ratios) if ratios else None
        equal = {
            s: at_equal_flops(static[s]["curve"], runs[s]["train_flops"] or 0, f"{metric}_acc")
            for s in runs
            if s in static
        }
        row["vs_static_final_at_equal_flops"] = paired(
            values, {s: v for s, v in equal.items() if v is not None}
        )
    return row


def markdown(rows: list[dict[str, Any]], metric: str) -> str:
    def ci(x: dict[str, Any] | None) -> str:
        if not x:
            return "-"
        if x.get("low") is None:
            return f"{x['iqm']:.2f}"
        return f"{x['iqm']:.2f} [{x['low']:.2f}, {x['high']:.2f}]"

    def diff(x: dict[str, Any] | None) -> str:
        if not x:
            return "-"
        return f"{ci(x)} ({x['wins']}/{x['ties']}/{x['losses']})"

    others = sorted({b for r in rows for b in r["vs"]})
    head = [
        "variant",
        f"final {metric} acc % IQM [CI]",
        "params fwd",
        "params held",
        "train GFLOPs",
        *[f"vs {b}: diff [CI] (W/T/L)" for b in others],
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["variant"],
            ci(r[metric]),
            f"{r['params_forward']:,.0f}" if r["params_forward"] is not None else "-",
            f"{r['params_held']:,.0f}" if r["params_held"] is not None else "-",
            f"{r['train_flops'] / 1e9:.1f}" if r["train_flops"] is not None else "-",
            *[diff(r["vs"].get(b)) for b in others],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="digits")
    parser.add_argument("--seeds", type=parse_seeds, help="e.g. 100-109 or 1,2,5 (required)")
    parser.add_argument("--set", action="append", default=[], help="Override for every cell.")
    parser.add_argument(
        "--variant", action="append", default=[], help="LABEL=POLICY;key=value;... (required)"
    )
    parser.add_argument("--static-final", action="append", default=[], metavar="LABEL")
    parser.add_argument("--baseline", action="append", default=[], metavar="LABEL")
    parser.add_argument("--metric", choices=("val", "test"), default="val")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, help="where the runs are kept (required)")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.variant = [0], ["heuristic", "wait"]
        args.static_final, args.baseline = ["heuristic"], ["wait"]
        args.set = [*args.set, "env.max_epochs=2", "env.max_batches=2"]
        args.out = args.out or Path(tempfile.mkdtemp(prefix="growth-study-smoke-"))
    for flag, value in (("--seeds", args.seeds), ("--variant", args.variant), ("--out", args.out)):
        if not value:
            parser.error(f"{flag} is required (or --smoke)")

    variants = [parse_variant(v) for v in args.variant]
    runs: dict[str, dict[int, dict[str, Any]]] = {}

    def cells(label: str, policy: str, sets: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "dir": str(args.out / label / f"seed-{seed}"),
                "task": args.task,
                "policy": policy,
                "seed": seed,
                "sets": [*args.set, *sets],
            }
            for seed in args.seeds
        ]

    def execute(jobs: list[tuple[str, dict[str, Any]]]) -> None:
        unique = list({job["dir"]: job for _, job in jobs}.values())  # shared dirs run once
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            summaries = dict(zip([j["dir"] for j in unique], pool.map(run_cell, unique)))
        for label, job in jobs:
            record_ = record(summaries[job["dir"]], Path(job["dir"]))
            runs.setdefault(label, {})[job["seed"]] = record_
            print(f"{label} seed {job['seed']}: done", file=sys.stderr)

    def read_external(label: str) -> None:
        for seed in args.seeds:
            run_dir = args.out / label / f"seed-{seed}"
            summary = json.loads((run_dir / SUMMARY).read_text())
            runs.setdefault(label, {})[seed] = record(summary, run_dir)

    todo = []
    for label, policy, sets in variants:
        if policy == "external":
            read_external(label)
        else:
            todo += [(label, job) for job in cells(label, policy, sets)]
    execute(todo)
    static_jobs = []
    for label in args.static_final:
        sets = next(s for lab, _, s in variants if lab == label)
        for job in cells(f"{label}.static-final", "static", sets):
            architecture = runs[label][job["seed"]]["architecture"]
            job["sets"].append(f"policies.static.seeds={json.dumps(architecture)}")
            # One directory per architecture and seed: variants that end alike share it.
            name = "+".join(architecture).replace("@", "-at-") or "host"
            job["dir"] = str(args.out / "static" / name / f"seed-{job['seed']}")
            static_jobs.append((f"{label}.static-final", job))
    execute(static_jobs)

    labels = [label for label, _, _ in variants] + [f"{s}.static-final" for s in args.static_final]
    rows = [summarise(label, runs[label], runs, args.baseline, args.metric) for label in labels]
    result = {
        "benchmark": "growth_study",
        "task": args.task,
        "sets": args.set,
        "seeds": args.seeds,
        "metric": args.metric,
        "rows": rows,
        "markdown": markdown(rows, args.metric),
        "runs": {
            label: {str(s): {k: v for k, v in r.items() if k != "curve"} for s, r in by.items()}
            for label, by in runs.items()
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
