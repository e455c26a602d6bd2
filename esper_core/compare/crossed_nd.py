"""The bootstrap interval of a design with any number of crossed factors.

A learned controller trained in several runs and evaluated on a benchmark's pairs and
evaluation seeds gives a table ``runs x pairs x seeds`` in which every run meets the same
pairs and the same seeds: the three are *crossed* factors, and a value is the sum of a
run effect, a pair effect, a seed effect, their interactions and the rest. An interval
that speaks for the training procedure, for hosts the suite did not hold and for seeds
not drawn must draw all three: a resample draws each axis's levels with replacement,
once, and reads the table at every combination of the drawn levels (a paired difference
is resampled as one table, so the draw applies to both of its terms).

This is :mod:`esper_core.compare.crossed_bootstrap` (two factors: its docstring says why
a nested draw is too narrow and why the percentile interval is expanded) for ``k``
factors. The expansion factor is the same, ``sqrt(V / V*) * t(nu) / z``, with V the
unbiased variance of the grand mean of a balanced random-effects design from the ANOVA
mean squares of every non-empty factor subset A,
``V = sum_A (-1)^(|A|+1) MS_A / N`` (N cells; for two factors
``(MS_run + MS_seed - MS_rest) / (R S)``), floored at ``MS_all / N`` (the full
interaction's), and nu its Satterthwaite degrees of freedom,
``V^2 N^2 / sum_A (MS_A^2 / df_A)`` with ``df_A = prod_{i in A} (n_i - 1)``. On a
two-factor table it draws and computes exactly what ``crossed_interval`` does (same
generator use, same arithmetic), so the two agree to the last bit.

The table must be whole (no NaN): with more than two factors there is no one way to cut
a missing cell away (drop its run, its pair or its seed?), so the caller chooses.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats as scipy_stats

from esper_core.compare.crossed_bootstrap import scale_to
from esper_core.compare.stats import IQM_TRIM, Interval, iqm

# Values drawn per block of resamples: bounds memory for large tables x many resamples.
_BLOCK = 4_000_000

Subset = tuple[int, ...]


def _subsets(k: int) -> list[Subset]:
    """The non-empty subsets of ``range(k)``, smallest first (for two factors: run,
    seed, run x seed, the order of the two-factor code's sums)."""
    return [a for size in range(1, k + 1) for a in itertools.combinations(range(k), size)]


def crossed_resamples_nd(
    table: np.ndarray, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pooled IQM and the grand mean of ``resamples`` crossed resamples of ``table``:
    each axis's levels drawn with replacement (axis by axis, from one generator), the
    table read at every combination of the drawn levels."""
    rng = np.random.default_rng(seed)
    k = table.ndim
    draws = [rng.integers(0, n, size=(resamples, n)) for n in table.shape]
    iqms = np.empty(resamples)
    means = np.empty(resamples)
    block = max(1, _BLOCK // table.size)
    for start in range(0, resamples, block):
        index = tuple(
            d[start : start + block].reshape((-1,) + (1,) * i + (n,) + (1,) * (k - 1 - i))
            for i, (d, n) in enumerate(zip(draws, table.shape))
        )
        values = table[index].reshape(len(index[0]), -1)
        iqms[start : start + len(values)] = scipy_stats.trim_mean(values, IQM_TRIM, axis=1)
        means[start : start + len(values)] = values.mean(axis=1)
    return iqms, means


def _marginal(table: np.ndarray, kept: Subset) -> np.ndarray | np.floating:
    """The table's means over every axis not in ``kept`` (kept as length-1 axes)."""
    if not kept:
        return table.mean()
    if len(kept) == table.ndim:
        return table
    dropped = tuple(i for i in range(table.ndim) if i not in kept)
    return table.mean(axis=dropped, keepdims=True)


def mean_squares(table: np.ndarray) -> dict[Subset, tuple[float, int]]:
    """Each non-empty factor subset's ANOVA mean square and its degrees of freedom."""
    k, cells = table.ndim, table.size
    marginals: dict[Subset, np.ndarray | np.floating] = {}
    found: dict[Subset, tuple[float, int]] = {}
    for subset in _subsets(k):
        # The subset's effect by inclusion-exclusion over the marginal means of its own
        # subsets (largest first: the table, less the main effects, plus the grand mean).
        effect: np.ndarray | np.floating | None = None
        for size in range(len(subset), -1, -1):
            for part in itertools.combinations(subset, size):
                if part not in marginals:
                    marginals[part] = _marginal(table, part)
                term = marginals[part]
                if effect is None:
                    effect = term
                elif (len(subset) - size) % 2:
                    effect = effect - term
                else:
                    effect = effect + term
        dof = math.prod(table.shape[i] - 1 for i in subset)
        weight = cells // math.prod(table.shape[i] for i in subset)
        found[subset] = (weight * float((np.asarray(effect) ** 2).sum()) / dof, dof)
    return found


def mean_variance_nd(table: np.ndarray) -> tuple[float, float]:
    """The unbiased variance of a crossed table's grand mean (balanced random effects, by
    inclusion-exclusion over the mean squares) and its Satterthwaite degrees of freedom.
    Every axis needs at least two levels."""
    squares = mean_squares(table)
    combined = 0.0
    spread = 0.0
    for subset, (ms, dof) in squares.items():
        combined += ms if len(subset) % 2 else -ms
        spread += ms**2 / dof
    # A negative variance component is estimated as zero: the grand mean then varies at
    # least as the full interaction alone says.
    combined = max(combined, squares[tuple(range(table.ndim))][0])
    dof_v = combined**2 / spread if spread > 0 else float("inf")
    return combined / table.size, max(dof_v, 1.0)


def expansion_nd(table: np.ndarray, boot_means: np.ndarray, confidence: float) -> float:
    """The factor a resample's distance from the estimate is scaled by (module doc)."""
    return scale_to(mean_variance_nd(table), boot_means, confidence)


def crossed_interval_nd(
    table: np.ndarray, confidence: float, resamples: int, seed: int
) -> Interval:
    """The IQM over every cell of a whole crossed table (one axis per factor) with its
    expanded crossed bootstrap interval; no interval when an axis has a single level
    (nothing then says how that factor's levels differ)."""
    values = np.asarray(table, dtype=float)
    if values.ndim < 1 or values.size == 0:
        raise ValueError("the crossed table has no cell")
    if np.isnan(values).any():
        raise ValueError("the crossed table has missing cells (NaN); cut it to whole levels")
    estimate = float(iqm(values.ravel()))
    if min(values.shape) < 2:
        return Interval(estimate)
    boot_iqms, boot_means = crossed_resamples_nd(values, resamples, seed)
    scale = expansion_nd(values, boot_means, confidence)
    expanded = estimate + scale * (boot_iqms - estimate)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(expanded, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high))
