"""IQM, stratified bootstrap intervals and probability of improvement against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from esper_core.compare.stats import (
    Interval,
    improvement_interval,
    iqm,
    iqm_interval,
    probability_of_improvement,
)


def test_iqm_of_known_arrays() -> None:
    assert float(iqm(list(range(1, 9)))) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    # Outliers at both ends are cut: the plain mean is 1027 / 8.
    with_outliers = [-1000.0, 2, 3, 4, 5, 6, 7, 2000.0]
    assert float(np.mean(with_outliers)) == pytest.approx(128.375)
    assert float(iqm(with_outliers)) == pytest.approx(4.5)
    # n = 5: int(0.25 * 5) = 1 value cut at each end -> mean of 2, 3, 4.
    assert float(iqm([100.0, 2, 3, 1, 4])) == pytest.approx(3.0)


def test_interval_contains_the_mean_of_a_synthetic_sample() -> None:
    # Normal quantiles around 80: a sample whose mean (and IQM) is exactly 80.
    sample = 80.0 + 3.0 * stats.norm.ppf(np.linspace(0.02, 0.98, 41))
    interval = iqm_interval([sample])
    assert interval.estimate == pytest.approx(80.0)
    assert interval.low is not None and interval.high is not None
    assert interval.low < 80.0 < interval.high
    assert interval.high - interval.low < 4.0


def test_interval_coverage_is_near_nominal() -> None:
    # For a symmetric distribution the IQM equals the mean: a 95% interval should cover
    # it in most of many independent samples (and not in all of them at 80%).
    rng = np.random.default_rng(11)
    covered = 0
    trials = 40
    for _ in range(trials):
        interval = iqm_interval([rng.normal(0.0, 1.0, 20)], n_resamples=1000)
        covered += interval.low <= 0.0 <= interval.high  # type: ignore[operator]
    assert 0.8 * trials <= covered <= trials
    narrow = sum(
        iqm_interval([rng.normal(0.0, 1.0, 20)], confidence=0.5, n_resamples=1000).low  # type: ignore[operator]
        <= 0.0
        <= iqm_interval([rng.normal(0.0, 1.0, 20)], confidence=0.5, n_resamples=1000).high  # type: ignore[operator]
        for _ in range(10)
    )
    assert narrow < 10  # a 50% interval cannot cover every time


def test_bootstrap_is_reproducible_and_seeded() -> None:
    sample = np.random.default_rng(3).normal(size=15)
    assert iqm_interval([sample], seed=5) == iqm_interval([sample], seed=5)
    assert iqm_interval([sample], seed=5) != iqm_interval([sample], seed=6)


def test_bootstrap_is_stratified_over_groups() -> None:
    # Each task's runs are constant: a stratified resample keeps 5 runs of each task, so
    # every resample has the same IQM; pooling the tasks first would not.
    tasks = [[0.0] * 5, [100.0] * 5]
    assert iqm_interval(tasks) == Interval(50.0, 50.0, 50.0)
    pooled = iqm_interval([[0.0] * 5 + [100.0] * 5])
    assert pooled.low is not None and pooled.high is not None
    assert pooled.low < 50.0 < pooled.high


def test_no_interval_from_a_single_run() -> None:
    assert iqm_interval([[3.0]]) == Interval(3.0, None, None)
    assert iqm_interval([[1.0, 2.0], [3.0]]).low is None
    with pytest.raises(ValueError, match="at least one value"):
        iqm_interval([[]])


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([3, 4], [1, 2], 1.0),
        ([1, 2], [3, 4], 0.0),
        ([1, 2, 3], [2, 2, 2], 0.5),  # 0 + 3 ties (1.5) + 3 wins = 4.5 of 9
        ([1, 2, 2, 3], [2, 3], 2.5 / 8),  # 1: 0; 2: 1/2; 2: 1/2; 3: 1 + 1/2
        ([5, 5], [5, 5, 5], 0.5),  # all tied
        ([1, 10], [5], 0.5),
    ],
)
def test_probability_of_improvement(x: list[float], y: list[float], expected: float) -> None:
    assert probability_of_improvement(x, y) == pytest.approx(expected)


def test_improvement_interval_averages_tasks_and_brackets_the_estimate() -> None:
    both = improvement_interval([([3, 4], [1, 2]), ([1, 2], [3, 4])])
    assert both.estimate == pytest.approx(0.5)
    rng = np.random.default_rng(2)
    better = improvement_interval([(rng.normal(2.0, 1.0, 12), rng.normal(0.0, 1.0, 12))])
    assert better.low is not None and better.high is not None
    assert 0.5 < better.low <= better.estimate <= better.high <= 1.0
    # Identical constant samples: every resample gives exactly 1/2.
    assert improvement_interval([([1.0, 1.0, 1.0], [1.0, 1.0])]) == Interval(0.5, 0.5, 0.5)
