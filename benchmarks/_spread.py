"""The spread of a benchmark's per-repetition figures: median, interquartile range and a
bootstrap 95 % interval of the median.

One number cannot tell noise from a regression: two runs of the same epoch benchmark on
an idle machine gave 1.088 and 1.036. Every ratio benchmark therefore reports the ratio
of each repetition (both sides measured back to back, so a burst of load hits both) and
summarises them here. Not a benchmark itself (the leading underscore keeps it out of
the smoke test's list of scripts).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

BOOTSTRAP_RESAMPLES = 2000


def spread(values: Sequence[float], digits: int = 4, seed: int = 0) -> dict[str, Any]:
    """``median``, ``iqr`` [q1, q3], ``ci95`` [lo, hi] of the median (percentile bootstrap
    over the repetitions, seeded so a rerun on the same figures prints the same interval),
    ``n`` and the ``values`` themselves."""
    if not values:
        raise ValueError("spread of no values")
    xs = [float(v) for v in values]
    if len(xs) == 1:
        q1 = q3 = lo = hi = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        rng = random.Random(seed)
        medians = sorted(
            statistics.median(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP_RESAMPLES)
        )
        lo = medians[int(0.025 * BOOTSTRAP_RESAMPLES)]
        hi = medians[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]
    return {
        "median": round(statistics.median(xs), digits),
        "iqr": [round(q1, digits), round(q3, digits)],
        "ci95": [round(lo, digits), round(hi, digits)],
        "n": len(xs),
        "values": [round(x, digits) for x in xs],
    }


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-repetition ratios of two sides measured in the same repetition."""
    if len(numerators) != len(denominators):
        raise ValueError("paired ratios need as many numerators as denominators")
    return [a / b for a, b in zip(numerators, denominators)]
