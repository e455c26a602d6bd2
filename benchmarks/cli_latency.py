"""How long the quick commands take end to end: ``esper --help``, ``esper plugins`` and
``esper blueprints`` in a fresh process each, with every installed plugin autoloaded.

These were timed unit tests once (under 2 s); a loaded machine made them fail, so the
timing lives here and the test suite only checks what keeps them fast (the listings
import no torch: tests/cli/test_cli.py).

    python benchmarks/cli_latency.py [--repeats 5]

``--smoke``: each command once (the same path and JSON keys).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COMMANDS = (["--help"], ["plugins"], ["blueprints"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: same path and keys, no figures"
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    env = {k: v for k, v in os.environ.items() if k != "ESPER_DISABLE_PLUGIN_AUTOLOAD"}
    results = {}
    for command in COMMANDS:
        walls = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "esper_cli", *command],
                check=True,
                capture_output=True,
                env=env,
            )
            walls.append(round(time.perf_counter() - start, 3))
        results[" ".join(command)] = {"wall_s": walls, "median_s": statistics.median(walls)}
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    print(json.dumps({"benchmark": "cli_latency", "load_average": load, "commands": results}))


if __name__ == "__main__":
    main()
