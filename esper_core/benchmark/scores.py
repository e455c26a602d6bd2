"""The benchmark's scores of a policy on a pair, per evaluation seed (pure).

Where growth pays (the oracle is not ``wait``), the **normalized score** of a seed is
``(policy - wait) / (oracle - wait)`` in the task's metric turned so that higher is
better: the numerator is the seed's own paired difference (same seed, same host init and
data order), the denominator the pair's gap, the mean over the evaluation seeds of
``oracle - wait``. A per-seed denominator would divide by the noise of one seed (a gap
near zero sends the ratio anywhere); one gap per pair makes the score a paired
difference in units of what growth buys on that pair. 0 is ``wait``, 1 the oracle. A
pair whose oracle does not beat wait on the evaluation seeds (gap <= 0: its validation
choice did not hold) has no normalized score and is listed as such.

Where the oracle is ``wait``, growth is priced instead: the **extra training FLOPs**
``policy / wait - 1`` (a fraction), and the **metric lost** ``wait - policy`` (oriented:
positive is worse than wait), each per seed.

Pooled over pairs x evaluation seeds, the IQM's interval is the crossed bootstrap
(:mod:`esper_core.compare.crossed_bootstrap`): pairs and seeds are both drawn, so the
interval speaks for hosts the suite did not hold, not only for these pairs. Per pair it
is the ordinary bootstrap over seeds (:func:`esper_core.compare.stats.iqm_interval`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from esper_core.compare.crossed_bootstrap import crossed_interval
from esper_core.compare.stats import Interval, iqm_interval

Values = Mapping[int, float]  # evaluation seed -> value


def _oriented(value: float, higher: bool) -> float:
    return value if higher else -value


def gap(wait: Values, oracle: Values, higher: bool) -> float:
    """The mean of ``oracle - wait`` over the seeds both finished, higher is better."""
    seeds = [s for s in wait if s in oracle]
    if not seeds:
        return math.nan
    diffs = [_oriented(oracle[s], higher) - _oriented(wait[s], higher) for s in seeds]
    return math.fsum(diffs) / len(diffs)


def normalized(
    policy: Values, wait: Values, oracle: Values, higher: bool
) -> dict[int, float] | None:
    """Per seed ``(policy - wait) / gap``; None when the gap is not positive."""
    denominator = gap(wait, oracle, higher)
    if not math.isfinite(denominator) or denominator <= 0:
        return None
    return {
        s: (_oriented(policy[s], higher) - _oriented(wait[s], higher)) / denominator
        for s in policy
        if s in wait
    }


def extra_flops(policy: Values, wait: Values) -> dict[int, float]:
    """Per seed the training FLOPs spent beyond wait's, as a fraction of wait's."""
    return {s: policy[s] / wait[s] - 1.0 for s in policy if s in wait and wait[s] > 0}


def metric_lost(policy: Values, wait: Values, higher: bool) -> dict[int, float]:
    """Per seed how much worse than wait the policy ends (negative: better)."""
    return {
        s: _oriented(wait[s], higher) - _oriented(policy[s], higher) for s in policy if s in wait
    }


def pooled(
    per_pair: Sequence[Values], seeds: Sequence[int], confidence: float, resamples: int, seed: int
) -> Interval | None:
    """The IQM over pairs x seeds with its crossed bootstrap interval (pairs and seeds
    drawn); a seed some pair lacks is left out of every pair (the table must be whole).
    None without values."""
    rows = [[float(p.get(s, math.nan)) for s in seeds] for p in per_pair if p]
    if not rows:
        return None
    table = np.asarray(rows)
    if not (~np.isnan(table).any(axis=0)).any():
        return None
    return crossed_interval(rows, confidence, resamples, seed)


def one_pair(values: Values, confidence: float, resamples: int, seed: int) -> Interval | None:
    """The IQM over one pair's seeds with its bootstrap interval."""
    finite = [v for v in values.values() if math.isfinite(v)]
    if not finite:
        return None
    return iqm_interval([finite], confidence, resamples, seed)
