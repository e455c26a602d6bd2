"""A learned controller pooled over its independent training runs (``[training_runs]``).

Each training run's checkpoint is a policy under test, scored like any other; what the
training *procedure* is worth needs the runs as a random factor. Every run meets the same
pairs and the same evaluation seeds, so runs x pairs x seeds are three crossed factors:
each score is the IQM over that table with the crossed bootstrap of
:mod:`esper_core.compare.crossed_nd` (one draw of runs, of pairs and of seeds per
resample), so the interval speaks for training runs, hosts and seeds not drawn. The
paired difference against another policy, ``d[r, p, s] = run_r[p, s] - other[p, s]`` on
the normalized score, is resampled as one such table: the draw of pairs and seeds applies
to both terms.

The table must be whole: a pair some run (or the other policy) has no value on is left
out, then a seed some (run, pair) lacks is left out of every pair, as the pooled score
over pairs x seeds does (:func:`esper_core.benchmark.scores.pooled`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from esper_core.benchmark.results import (
    NORMALIZED,
    PairResult,
    RunsDifference,
    RunsResult,
    RunsScore,
    by_kind,
)
from esper_core.benchmark.suite import RunsGroup
from esper_core.compare.crossed_nd import crossed_interval_nd
from esper_core.compare.stats import Interval

PerPair = list[tuple[str, dict[int, float]]]  # (pair, seed -> value) in pair order


def crossed_table(
    per_run: Sequence[PerPair], seeds: Sequence[int]
) -> tuple[np.ndarray, list[str], list[int]]:
    """The whole ``runs x pairs x seeds`` table of the runs' values, with its pairs and
    seeds (module doc: pairs some run lacks, then seeds some cell lacks, left out)."""
    if not per_run:
        return np.empty((0, 0, 0)), [], []
    labels = [p for p, _ in per_run[0]]
    rows = [dict(run) for run in per_run]
    pairs = [p for p in labels if all(row.get(p) for row in rows)]
    kept = [s for s in seeds if all(s in row[p] for row in rows for p in pairs)]
    table = np.array([[[row[p][s] for s in kept] for p in pairs] for row in rows], dtype=float)
    return table.reshape(len(rows), len(pairs), len(kept)), pairs, kept


def _interval(table: np.ndarray, settings: tuple[float, int, int]) -> Interval | None:
    if table.size == 0:
        return None
    confidence, resamples, seed = settings
    return crossed_interval_nd(table, confidence, resamples, seed)


def _score(
    kind: str,
    unit: str,
    per_run: Sequence[PerPair],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> RunsScore:
    table, pairs, kept = crossed_table(per_run, seeds)
    found = _interval(table, settings)
    if found is None:
        return RunsScore(kind, unit, pairs, kept, None)
    return RunsScore(kind, unit, pairs, kept, found.estimate, found.low, found.high)


def _difference(
    against: str,
    runs: Sequence[PerPair],
    other: PerPair,
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> RunsDifference:
    # The other policy joins the table as one more "run" so that the cut to whole cells
    # is the same for both terms; its row is then taken from every run's.
    table, pairs, kept = crossed_table([*runs, other], seeds)
    diffs = table[:-1] - table[-1][None, :, :]
    found = _interval(diffs, settings) if table.shape[0] > 1 else None
    counts = [int((diffs > 0).sum()), int((diffs == 0).sum()), int((diffs < 0).sum())]
    if found is None:
        return RunsDifference(against, pairs, kept, None, None, None, *counts)
    return RunsDifference(against, pairs, kept, found.estimate, found.low, found.high, *counts)


def runs_results(
    pairs: Sequence[PairResult],
    groups: Sequence[RunsGroup],
    policies: Sequence[str],
    seeds: Sequence[int],
    settings: tuple[float, int, int],
) -> list[RunsResult]:
    """Per group: each score kind pooled over runs x pairs x seeds, and the normalized
    score's paired difference against each policy under test outside every group (wait
    aside: the normalized score is itself the difference from wait).
    ``settings``: confidence, resamples, bootstrap seed."""
    grouped = {run for g in groups for run in g.runs}
    others = [p for p in policies if p not in grouped and p != "wait"]
    results = []
    for group in groups:
        kinds = [by_kind(pairs, run, seeds) for run in group.runs]
        scores = [
            _score(kind, unit, [k.get((kind, unit), []) for k in kinds], seeds, settings)
            for kind, unit in kinds[0]
        ]
        differences = []
        for other in others:
            theirs = by_kind(pairs, other, seeds)
            for key in (k for k in theirs if k[0] == NORMALIZED):
                runs = [k.get(key, []) for k in kinds]
                differences.append(_difference(other, runs, theirs[key], seeds, settings))
        results.append(RunsResult(group.label, list(group.runs), scores, differences))
    return results
