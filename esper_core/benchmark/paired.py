"""One policy against another on the same pairs and seeds: the paired difference of
their normalized scores where growth pays.

Two policies' scores each come with an interval, but whether one beats the other is a
question about their difference on the same (pair, seed) cell, which shares the host,
the data and the seed's noise. ``d[p, s] = a[p, s] - b[p, s]`` is pooled like any score
(IQM over pairs x seeds, crossed bootstrap: pairs and seeds drawn), with wins, ties and
losses over its cells. Every policy under test meets every later one in the suite's
order, ``wait`` aside (a normalized score is already the difference from ``wait``) and
the runs of a ``[training_runs]`` group aside (their group is compared pooled over runs,
:mod:`esper_core.benchmark.pooled_runs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from esper_core.benchmark import scores
from esper_core.benchmark.results import NORMALIZED, PairResult, PolicyDifference, by_kind
from esper_core.benchmark.suite import RunsGroup


def _normalized(
    pairs: Sequence[PairResult], policy: str, seeds: Sequence[int]
) -> dict[str, dict[int, float]]:
    found = by_kind(pairs, policy, seeds)
    return {
        label: values
        for (kind, _), rows in found.items()
        if kind == NORMALIZED
        for label, values in rows
        if values
    }


def difference(
    policy: str,
    against: str,
    pairs: Sequence[PairResult],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> PolicyDifference:
    """``policy - against`` pooled over the pairs where growth pays (``settings``:
    confidence, resamples, bootstrap seed); a seed some pair lacks for either policy is
    left out of every pair, so the table is whole, as for a single policy's score."""
    mine, theirs = _normalized(pairs, policy, seeds), _normalized(pairs, against, seeds)
    shared = [p for p in mine if p in theirs]
    kept = [s for s in seeds if all(s in mine[p] and s in theirs[p] for p in shared)]
    table = [{s: mine[p][s] - theirs[p][s] for s in kept} for p in shared]
    cells = [d for row in table for d in row.values()]
    counts = [sum(d > 0 for d in cells), sum(d == 0 for d in cells), sum(d < 0 for d in cells)]
    confidence, resamples, boot = settings
    found = scores.pooled(table, kept, confidence, resamples, boot) if kept else None
    if found is None:
        return PolicyDifference(policy, against, shared, kept, None, None, None, *counts)
    return PolicyDifference(
        policy, against, shared, kept, found.estimate, found.low, found.high, *counts
    )


def paired_differences(
    pairs: Sequence[PairResult],
    policies: Sequence[str],
    groups: Sequence[RunsGroup],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> list[PolicyDifference]:
    """Each policy under test against every later one (module doc: wait and the runs of
    a training-run group aside)."""
    grouped = {run for g in groups for run in g.runs}
    compared = [p for p in policies if p != "wait" and p not in grouped]
    return [
        difference(a, b, pairs, seeds, settings) for a, b in itertools.combinations(compared, 2)
    ]
