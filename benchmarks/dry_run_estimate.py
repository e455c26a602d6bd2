"""How close ``esper compare --dry-run``'s estimate comes to the time the comparison takes.

Runs ``esper compare ... --dry-run`` and then the same comparison, ``--jobs 1`` with one
torch thread, in a fresh directory, and prints JSON: the estimate, the measured wall time
of the whole command, its CPU seconds (the command and its workers: what the estimate,
one CPU thread a job, prices; on a machine shared with other jobs the wall time is longer
by the share of the cores the command gets), the sum of its runs' own ``wall_time`` (what
the runs took inside their worker, without starting it) and the ratios measured /
estimate (within 2x is the target on the machine class the tasks' benchmarks were
measured on: BENCHMARKS.md). The estimate is read to the second (the dry run's own line
rounds it to the minute).

    OMP_NUM_THREADS=1 python benchmarks/dry_run_estimate.py -- --policy wait \\
        --policy heuristic --task digits --seeds 2 --baseline wait

Arguments after ``--`` are ``esper compare``'s (an experiment file, ``--set``, ...);
``--out`` is added. CPU budget: the comparison's own (about 1 minute for the example).
``--smoke``: one digits run of one epoch of 2 batches (the same path and JSON keys).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ESTIMATE = re.compile(r"about ([\d.]+) s at")
# The dry run with its estimate printed to a tenth of a second.
TO_THE_SECOND = (
    "import sys, esper_core.compare.preview as p\n"
    "p.duration = lambda s: f'{s:.1f} s'\n"
    "from esper_cli.main import main\n"
    "main(sys.argv[1:])\n"
)


def _seconds(line: str) -> float:
    found = ESTIMATE.search(line)
    if found is None:
        raise SystemExit(f"no estimate in the dry run's last line: {line}")
    return float(found.group(1))


def _esper(*args: str, exact: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = ["-c", TO_THE_SECOND] if exact else ["-m", "esper_cli"]
    done = subprocess.run([sys.executable, *run, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a few seconds: same path and keys")
    parser.add_argument("compare", nargs=argparse.REMAINDER, help="esper compare's arguments")
    args = parser.parse_args()
    given = [a for a in args.compare if a != "--"]
    if args.smoke:
        given = [
            *("--policy", "wait", "--task", "digits", "--seeds", "1", "--max-epochs", "1"),
            *("--set", "env.max_batches=2"),
        ]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="esper-dry-run-") as scratch:
        out = ["--out", str(Path(scratch) / "exp"), "--jobs", "1", "--quiet"]
        dry = _esper("compare", *given, *out, "--dry-run", exact=True)
        estimate = _seconds(dry.stdout.strip().splitlines()[-1])
        start = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        _esper("compare", *given, *out)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        runs = [
            json.loads(p.read_text(encoding="utf-8"))["wall_time"]
            for p in Path(scratch).rglob("summary.json")
        ]
    print(
        json.dumps(
            {
                "benchmark": "dry_run_estimate",
                "compare": given,
                "dry_run": dry.stdout.strip().splitlines(),
                "estimate_s": estimate,
                "measured_wall_s": round(wall, 1),
                "measured_cpu_s": round(cpu, 1),
                "runs": len(runs),
                "runs_wall_time_s": round(sum(runs), 1),
                "ratio": round(wall / estimate, 2) if estimate else None,
                "cpu_ratio": round(cpu / estimate, 2) if estimate else None,
                "load_before": load_before,
                "load_after": os.getloadavg()[0],
                "cores": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
