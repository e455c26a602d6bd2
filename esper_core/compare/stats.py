"""Robust aggregate statistics for comparison experiments.

Follows Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice":
with a handful of seeds per policy, report the interquartile mean (IQM: the mean of the
middle 50% of runs) with a stratified bootstrap confidence interval, and the probability
that a run of one policy beats a run of another. Every resample comes from
``scipy.stats.bootstrap`` with a seeded generator, so the same data always gives the
same interval.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
from attrs import frozen
from scipy import stats

IQM_TRIM = 0.25  # cut 25% at each end: the interquartile mean
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_BOOTSTRAP_SEED = 0

Sample = Sequence[float] | np.ndarray


@frozen
class Interval:
    """A point estimate and its confidence interval (``None`` when it cannot be computed,
    e.g. from fewer than two values in a stratum)."""

    estimate: float
    low: float | None = None
    high: float | None = None


def iqm(values: Sample | np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean along ``axis`` (``scipy.stats.trim_mean`` with 25% cut each side)."""
    return np.asarray(stats.trim_mean(np.asarray(values, dtype=float), IQM_TRIM, axis=axis))


def _as_arrays(groups: Sequence[Sample]) -> list[np.ndarray]:
    arrays = [np.asarray(g, dtype=float).ravel() for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("every group needs at least one value")
    return arrays


def _bootstrap(
    samples: list[np.ndarray],
    statistic: Callable[..., np.ndarray],
    confidence: float,
    n_resamples: int,
    seed: int,
) -> tuple[float, float]:
    """A percentile bootstrap interval; each sample is resampled on its own (stratified)."""
    with warnings.catch_warnings():
        # Identical values in a stratum make every resample equal; the interval is then the
        # point itself, which is the right answer, so scipy's degeneracy warning is noise.
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(
            tuple(samples),
            statistic,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            axis=-1,
            rng=np.random.default_rng(seed),
        )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _pooled_iqm(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return iqm(np.concatenate(samples, axis=axis), axis=axis)


def iqm_interval(
    groups: Sequence[Sample],
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> Interval:
    """IQM of all values of all groups pooled, with a bootstrap CI stratified over groups.

    Each group (one task's runs) is resampled with replacement at its own size, so every
    resample keeps the task mix of the data. One group is the ordinary bootstrap.
    """
    samples = _as_arrays(groups)
    estimate = float(_pooled_iqm(*samples))
    if any(a.size < 2 for a in samples):
        return Interval(estimate)
    low, high = _bootstrap(samples, _pooled_iqm, confidence, n_resamples, seed)
    return Interval(estimate, low, high)


def _u_fraction(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + P(X = Y)/2 from the Mann-Whitney U statistic of ``x``: U / (n m)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # Only the statistic is used; the p-value of all-tied samples divides by zero.
        warnings.simplefilter("ignore", RuntimeWarning)
        u = stats.mannwhitneyu(
            x, y, alternative="two-sided", method="asymptotic", axis=axis
        ).statistic
    return np.asarray(u) / (x.shape[axis] * y.shape[axis])


def probability_of_improvement(x: Sample, y: Sample) -> float:
    """P(X > Y) for a random run X of one policy and Y of another, ties counting 1/2."""
    a, b = _as_arrays([x, y])
    return float(_u_fraction(a, b))


def improvement_interval(
    pairs: Sequence[tuple[Sample, Sample]],
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> Interval:
    """P(X > Y) averaged over tasks, ``pairs`` = one (policy runs, baseline runs) per task.

    The bootstrap resamples every policy's and every baseline's runs of every task
    independently (stratified over tasks and over the two policies).
    """
    samples = _as_arrays([s for pair in pairs for s in pair])
    n_tasks = len(pairs)

    def statistic(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
        per_task = [_u_fraction(xs[2 * t], xs[2 * t + 1], axis=axis) for t in range(n_tasks)]
        return np.mean(np.stack(per_task), axis=0)

    estimate = float(statistic(*samples))
    if any(a.size < 2 for a in samples):
        return Interval(estimate)
    low, high = _bootstrap(samples, statistic, confidence, n_resamples, seed)
    return Interval(estimate, low, high)
